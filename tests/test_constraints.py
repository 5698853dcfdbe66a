"""envs/constraints.txt, the lock the README's install commands read, against the requirement files it was made from:
a package added to or re-ranged in a requirement file without running envs/lock.sh would install unpinned, or not at
all, on a fresh machine."""

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ENVS = Path(__file__).resolve().parents[1] / "envs"


def requirements(name):
    found = []
    for line in (ENVS / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            found.append(Requirement(line))
    return found


def pins():
    found = {}
    for line in (ENVS / "constraints.txt").read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([^\s;]+)(?: ; .+)?", line.strip())  # a pin, with its marker
        if match:
            found[canonicalize_name(match[1])] = Version(match[2])
    return found


def test_every_requirement_is_pinned_within_its_range():
    pinned = pins()
    for name in ("requirements.txt", "requirements-test.txt"):
        for req in requirements(name):
            version = pinned.get(canonicalize_name(req.name))
            assert version is not None, f"{name}: {req.name} has no pin in constraints.txt (run envs/lock.sh)"
            assert req.specifier.contains(version, prereleases=True), (
                f"{name}: {req} but constraints.txt pins {version} (run envs/lock.sh)")


def test_the_lock_pins_the_release_of_torch_without_a_build_label_or_cuda_packages():
    pinned = pins()
    (torch,) = [req for req in requirements("requirements.txt") if req.name == "torch"]
    assert str(torch.specifier) == f"=={pinned['torch']}"
    assert not pinned["torch"].local  # the CPU build's +cpu would make pip refuse the CUDA wheel on a GPU machine
    assert not [name for name in pinned if name.startswith("nvidia-")]
    # triton only as the tests' own requirement (torch's CPU build pulls in none), at the release that torch's CUDA
    # wheel of the pinned version requires (triton==3.7.1 for torch 2.13.0), so that one lock fits a GPU machine.
    (triton,) = [req for req in requirements("requirements-test.txt") if req.name == "triton"]
    assert triton.specifier.contains(pinned["triton"])
    text = (ENVS / "constraints.txt").read_text()
    assert re.search(r"^triton==[^\n]*\n    # via -r envs/requirements-test.txt\n(?!    #)", text, re.M)
