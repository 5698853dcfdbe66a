#!/bin/bash
# One device call before the paired timing: each edge form alone (../2026-12-05-edge-conv-forms/), then the layouts
# of the whole-head training step's gradient convolutions for frontier_edges and frontier_dense_skips
# (../2026-12-05-gradient-layouts/). Under 7 minutes: each stage is stopped with SIGKILL at its seconds, and what it
# made is copied to $OUT before the next starts. Run from the repository root.
D=data/measurements
mkdir -p $OUT
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
  --format=csv > $OUT/gpu_state.csv
(cd $D/2026-12-05-edge-conv-forms && PYTHONPATH=../../../workflow/scripts \
  timeout -s KILL 100 python3 edge_conv_forms.py > $OUT/edge_conv_forms.log 2>&1)
cp $D/2026-12-05-edge-conv-forms/edge_conv_forms_*.md $OUT/ 2>/dev/null
tail -3 $OUT/edge_conv_forms.log
bash $D/2026-12-05-gradient-layouts/run.sh 150
