#!/bin/bash
# One device call: the GPU tests of the edge switches, then frontier_input paired with frontier_edges,
# frontier_graphed and the baseline and its profiles (../h200-2026-12-05-frontier-now/run.sh with this folder's
# overlay). $1 and $2: seconds for the comparison and the profiles. Run from the repository root with snakemake
# importable; results to $OUT.
D=data/measurements/2026-12-05-frontier-input
mkdir -p $OUT/logs
timeout -s KILL 150 python3 -m pytest -o addopts="" -q -m cuda tests/test_ndhwc_input.py tests/test_ndhwc_edges.py \
  > $OUT/logs/gpu_test.log 2>&1
tail -1 $OUT/logs/gpu_test.log
OVERLAY=$D/overlay.yaml PROFILED=frontier_input bash data/measurements/h200-2026-12-05-frontier-now/run.sh "$@"
