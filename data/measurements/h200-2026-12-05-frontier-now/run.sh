#!/bin/bash
# One device call: frontier_edges against frontier_graphed (and baseline) in paired rounds, training and sampling, then
# torch.profiler over both phases of frontier_edges (overlay.yaml). Run from the repository root with snakemake
# importable; what it makes goes to $OUT after each stage. $1 and $2: seconds for each stage (SIGKILL after them:
# Snakemake waits for its running jobs on SIGTERM); 0 skips the stage, so a warm machine's second call can take the
# profile alone. OVERLAY and PROFILED, where set, name another record's overlay
# and the rung it profiles.
D=data/measurements/h200-2026-12-05-frontier-now
OVERLAY=${OVERLAY:-$D/overlay.yaml}
PROFILED=${PROFILED:-frontier_edges}
# The hardware label of the card found (h200 or h100: config.yaml knows both), h200 where nvidia-smi names neither.
LABEL=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[12]00' | tr H h)
LABEL=${LABEL:-h200}
R=results/wholehead/$LABEL
mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
  --format=csv > $OUT/gpu_state.csv
python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), \
triton.__version__)" > $OUT/versions.txt
stage() {
  local name=$1 seconds=$2; shift 2
  [ "$seconds" = 0 ] && return  # timeout's 0 would mean no limit at all
  # A stage killed at its time leaves Snakemake's lock on the folder: the next stage (or call) lifts it first.
  python3 -m snakemake --unlock --configfile config/paper.yaml $OVERLAY --config "gpus=[$LABEL]" > /dev/null 2>&1
  /usr/bin/time -f "$name %e s" -a -o $OUT/times.txt timeout -s KILL $seconds python3 -m snakemake --cores 16 \
    --resources gpu=1 --scheduler greedy --configfile config/paper.yaml $OVERLAY --config "gpus=[$LABEL]" \
    -- "$@" > $OUT/logs/snakemake_$name.log 2>&1
  pkill -KILL -f '\.snakemake/scripts/'  # a job left by the kill would hold the GPU's lock into the next stage
  tail -2 $OUT/logs/snakemake_$name.log
}
stage compare ${1:-330} $R/comparison.json $R/device_rates.json
cp $R/comparison.json $R/comparison_rounds.csv $R/preflight.json $R/device_rates.json $OUT/ 2>/dev/null
cp -r $R/comparison_groups $OUT/ 2>/dev/null
cp $R/logs/*.log $R/logs/*.tsv $OUT/logs/ 2>/dev/null
stage profile ${2:-200} $R/$PROFILED/profile/train/torch_kernels.parquet \
  $R/$PROFILED/profile/sample/torch_kernels.parquet
for phase in train sample; do
  P=$R/$PROFILED/profile/$phase
  mkdir -p $OUT/profile_$phase
  cp $P/torch_kernels.parquet $P/torch_summary.csv $OUT/profile_$phase/ 2>/dev/null
  [ -f $P/torch_trace.json ] && gzip -c $P/torch_trace.json > $OUT/profile_$phase/torch_trace.json.gz
done
cp $R/*/logs/*.log $R/*/logs/*.tsv $OUT/logs/ 2>/dev/null
cat $OUT/times.txt
