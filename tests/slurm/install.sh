#!/usr/bin/env bash
# Install a single-host SLURM (slurm-wlm: slurmctld + slurmd + client tools) and munge for the tests.
# Idempotent: does nothing when every needed command is already present.
# Usage: tests/slurm/install.sh
set -euo pipefail

needed=(sbatch squeue scontrol sinfo scancel slurmctld slurmd munged)
missing=()
for cmd in "${needed[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "install.sh: slurm-wlm and munge already installed"
    exit 0
fi

if [ "$EUID" -ne 0 ]; then
    echo "install.sh: missing ${missing[*]}; installing slurm-wlm and munge needs root (run as root or install them yourself)" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install.sh: missing ${missing[*]} and no apt-get on this machine; install slurm-wlm (>= 22.05) and munge by hand" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp /tmp/slurm-install.XXXXXX.log)
if ! { apt-get update && apt-get install -y --no-install-recommends slurm-wlm munge; } >"$log" 2>&1; then
    echo "install.sh: apt-get failed installing slurm-wlm munge (log: $log; last line: $(tail -n 1 "$log"))" >&2
    exit 1
fi
rm -f "$log"
echo "install.sh: installed slurm-wlm and munge"
