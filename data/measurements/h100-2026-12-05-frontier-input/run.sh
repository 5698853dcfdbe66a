#!/bin/bash
# One device call: frontier_input paired with frontier_edges, frontier_graphed and the baseline, and its profiles
# (../h200-2026-12-05-frontier-now/run.sh with this folder's overlay), then the GPU tests of the two edge switches.
# $1, $2, $3: seconds for the comparison, the profiles and the tests. Run from the repository root with snakemake
# importable; results to $OUT.
D=data/measurements/2026-12-05-frontier-input
OVERLAY=$D/overlay.yaml PROFILED=frontier_input bash data/measurements/h200-2026-12-05-frontier-now/run.sh $1 $2
timeout -s KILL ${3:-150} python3 -m pytest -o addopts="" -q -m cuda tests/test_ndhwc_input.py \
  tests/test_ndhwc_edges.py > $OUT/logs/gpu_test.log 2>&1
tail -1 $OUT/logs/gpu_test.log
