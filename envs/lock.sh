#!/usr/bin/env bash
# Regenerates envs/constraints.txt, the exact release of every package (and of every package they pull in) that the
# README's two install commands take: `pip install -r envs/requirements.txt -c envs/constraints.txt` and the same
# with requirements-test.txt, which includes requirements.txt, so one file pins both installs.
#
# Run it deliberately, never from CI or the workflow:
#   - after adding, removing or changing a line in envs/requirements.txt or envs/requirements-test.txt
#     (`bash envs/lock.sh`: the other packages keep their pins where they still fit);
#   - to take newer releases (`bash envs/lock.sh --upgrade`, or `--upgrade-package NAME`), then run the suite.
# Then commit the constraints file with the requirement files. Extra arguments go to pip-compile.
#
# It must run where pip finds the CPU build of torch that requirements.txt pins (pip's find-links on the
# project's machines): resolved against the CUDA build, the file would pin the nvidia-* packages, which a CPU
# machine never installs. (triton is pinned anyway: requirements-test.txt asks for it, at the release that torch's
# CUDA wheel pins, for the tests of the project's Triton kernels.) The CPU build's local label (+cpu) is dropped, so the same pin takes the CUDA wheel
# of that release on a GPU machine, where pip adds the CUDA packages that wheel pins exactly itself.
set -euo pipefail
cd "$(dirname "$0")/.."

tools="$(mktemp -d)"
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools/venv"
"$tools/venv/bin/python" -m pip install --quiet "pip-tools==7.6.2"

# The header of the generated file names this script as the command that made it.
CUSTOM_COMPILE_COMMAND="bash envs/lock.sh" "$tools/venv/bin/pip-compile" --quiet --strip-extras --allow-unsafe \
    --no-emit-index-url --no-emit-find-links --output-file envs/constraints.txt "$@" envs/requirements-test.txt

sed -i -E 's/^(torch==[0-9.]+)\+[A-Za-z0-9.]+$/\1/' envs/constraints.txt
pinned="$(grep -E '^torch==' envs/requirements.txt)"
if ! grep -qxF "$pinned" envs/constraints.txt; then
    echo "lock.sh: envs/constraints.txt does not pin $pinned as envs/requirements.txt does" >&2
    exit 1
fi
if grep -nE '^nvidia-' envs/constraints.txt >&2; then
    echo "lock.sh: the lock resolved torch's CUDA build (lines above); run it where pip finds the CPU build" >&2
    exit 1
fi
echo "envs/constraints.txt: $(grep -cE '^[A-Za-z0-9]' envs/constraints.txt) packages pinned"
