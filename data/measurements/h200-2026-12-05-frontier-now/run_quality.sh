#!/bin/bash
# After run.sh, on the same machine: frontier_edges's train and sample jobs and its quality.json, then the quality
# study of frontier_edges against the baseline (quality.yaml). $1 and $2: seconds for each stage (0 skips it; SIGKILL
# after them). A stage cut short is continued by running again: Snakemake keeps the jobs that finished. What each stage
# made goes to $OUT as one archive (quality.tgz, study.tgz). Run from the repository root with snakemake importable.
# QUALITY and VARIANT, where set, name another record's overlay and the rung it checks.
D=data/measurements/h200-2026-12-05-frontier-now
QUALITY=${QUALITY:-$D/quality.yaml}
VARIANT=${VARIANT:-frontier_edges}
LABEL=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[12]00' | tr H h)
LABEL=${LABEL:-h200}
R=results/wholehead/$LABEL
C=(--configfile config/paper.yaml config/paper-timing.yaml $QUALITY --config "gpus=[$LABEL]")
stage() {
  local name=$1 seconds=$2; shift 2
  [ "$seconds" -gt 0 ] || return 0
  local S=/tmp/frontier-now/$name
  mkdir -p $S/logs
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
    --format=csv > $S/gpu_state_$(date -u +%H%M%S).csv
  python3 -m snakemake --unlock "${C[@]}" > /dev/null 2>&1
  /usr/bin/time -f "$name %e s" -a -o $S/times.txt timeout -s KILL $seconds python3 -m snakemake --cores 16 \
    --resources gpu=1 --scheduler greedy "${C[@]}" -- "$@" >> $S/logs/snakemake_$name.log 2>&1
  pkill -KILL -f '\.snakemake/scripts/'
  tail -3 $S/logs/snakemake_$name.log
}
stage quality ${1:-420} $R/$VARIANT/quality.json
S=/tmp/frontier-now/quality
if [ -d $S ]; then
  for v in baseline $VARIANT; do
    mkdir -p $S/$v
    cp $R/$v/{train.json,train_steps.csv,sample.json,sample_steps.csv,quality.json} $S/$v/ 2>/dev/null
    cp $R/$v/logs/*.log $R/$v/logs/*.tsv $S/$v/ 2>/dev/null
  done
  tar -czf $OUT/quality.tgz -C $S .
fi
stage study ${2:-0} quality_study
S=/tmp/frontier-now/study
if [ -d $S ]; then
  for v in baseline $VARIANT; do
    for k in 0 1 2 3 4; do
      mkdir -p $S/$v/seed$k
      cp $R/study/$v/seed$k/{run.json,comparison.json,losses.csv,slice.npy} $S/$v/seed$k/ 2>/dev/null
    done
  done
  cp $R/study/summary.md $S/ 2>/dev/null
  cp $R/study/logs/* $S/logs/ 2>/dev/null
  tar -czf $OUT/study.tgz -C $S .
fi
cat /tmp/frontier-now/*/times.txt 2>/dev/null
