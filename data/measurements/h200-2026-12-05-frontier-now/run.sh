#!/bin/bash
# One device call: frontier_graphed paired again with baseline (train and sample) with the norm kernels' current tiles,
# and the sampling evaluation of the same compiled U-Net without a CUDA graph under torch.profiler (overlay.yaml).
# Run from the repository root with snakemake importable; what it makes goes to $OUT after each stage.
D=data/measurements/h200-2026-12-05-frontier-now
LABEL=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[12]00' | tr H h)
LABEL=${LABEL:-h200}
R=results/wholehead/$LABEL
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
  --format=csv > $OUT/gpu_state.csv
python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), \
triton.__version__)" > $OUT/versions.txt
# KILL, not TERM: Snakemake waits for its running jobs on SIGTERM.
/usr/bin/time -f "%e s" -o $OUT/times.txt timeout -s KILL ${1:-560} python3 -m snakemake --cores 16 \
  --resources gpu=1 --scheduler greedy --configfile config/paper.yaml $D/overlay.yaml --config "gpus=[$LABEL]" -- \
  $R/comparison.json $R/device_rates.json $R/frontier_ndhwc_eager/profile/sample/torch_kernels.parquet \
  > $OUT/logs/snakemake.log 2>&1
cp $R/comparison.json $R/comparison_rounds.csv $R/preflight.json $R/device_rates.json $OUT/ 2>/dev/null
cp -r $R/comparison_groups $OUT/ 2>/dev/null
P=$R/frontier_ndhwc_eager/profile/sample
cp $P/torch_kernels.parquet $P/torch_summary.csv $OUT/ 2>/dev/null
[ -f $P/torch_trace.json ] && gzip -c $P/torch_trace.json > $OUT/torch_trace.json.gz
cp $R/*/logs/*.log $OUT/logs/ 2>/dev/null
[ -f $OUT/torch_trace.json.gz ] && PYTHONPATH=workflow/scripts python3 -m profiling.argument_bytes \
  $OUT/torch_trace.json.gz $R/device_rates.json --kernels 15 > $OUT/frontier_ndhwc_eager_sample.md 2>&1
tail -3 $OUT/logs/snakemake.log; cat $OUT/times.txt
