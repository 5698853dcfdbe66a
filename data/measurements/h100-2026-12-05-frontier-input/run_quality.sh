#!/bin/bash
# After run.sh, on the same machine: frontier_input's quality.json, then its quality study against the baseline
# (../h200-2026-12-05-frontier-now/run_quality.sh with this folder's quality.yaml). $1 and $2: seconds for each stage
# (0 skips it).
D=data/measurements/2026-12-05-frontier-input
QUALITY=$D/quality.yaml VARIANT=frontier_input bash data/measurements/h200-2026-12-05-frontier-now/run_quality.sh "$@"
