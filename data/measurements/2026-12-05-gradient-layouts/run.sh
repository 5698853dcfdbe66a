#!/bin/bash
# On a GPU: the layouts the compiled training step's gradient convolutions receive, for frontier_edges and
# frontier_dense_skips, whole-head network at 128^3 ($1 seconds each, SIGKILL after them). Run from the repository
# root; results to $OUT.
D=data/measurements/2026-12-05-gradient-layouts
mkdir -p $OUT
for rung in frontier_edges frontier_dense_skips; do
  timeout -s KILL ${1:-150} python3 $D/gradient_layouts.py --network wholehead --rung $rung \
    > $OUT/gradient_layouts_$rung.log 2>&1
  tail -2 $OUT/gradient_layouts_$rung.log
  cp $D/gradient_layouts_${rung}_wholehead_cuda.md $OUT/ 2>/dev/null
done
