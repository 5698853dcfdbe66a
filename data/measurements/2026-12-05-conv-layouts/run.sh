#!/bin/bash
# On a GPU: the layouts frontier_edges's compiled sampling evaluation hands its convolutions, for the tiny network
# and the whole-head one ($1 seconds each, SIGKILL after them). Run from the repository root; results to $OUT.
D=data/measurements/2026-12-05-conv-layouts
mkdir -p $OUT
for network in tiny wholehead; do
  timeout -s KILL ${1:-150} python3 $D/conv_layouts.py --network $network > $OUT/conv_layouts_$network.log 2>&1
  tail -2 $OUT/conv_layouts_$network.log
  cp $D/conv_layouts_${network}_cuda.md $OUT/ 2>/dev/null
done
