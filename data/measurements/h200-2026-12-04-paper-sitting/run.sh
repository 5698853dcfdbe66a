#!/bin/bash
# The README's GPU command (config/paper.yaml, paper/figures/all) on one H200, from a fresh copy of the checkout in
# $W, resumed over several calls of at most $LIMIT seconds each by the same command (a killed run's lock released
# with --unlock first; profiles/default reruns incomplete jobs). The first calls give the jobs of the 128^3 timing
# chain priority (-P: training, sampling, quality, the paired comparisons, the fast samplers: the parts no earlier
# record measured); the quality study and the Nsight profiles follow. After each call: Snakemake's record of every
# finished job (.snakemake/metadata), the job logs and benchmarks, and the GPU's state every 2 s, under $OUT.
# Run from the repository root with snakemake importable. Usage: run.sh LIMIT_SECONDS
set -u
LIMIT=${1:?seconds}
W=/tmp/sitting
[ -d $W ] || cp -a . $W
cd $W
mkdir -p "$OUT"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw,clocks.sm,temperature.gpu \
  --format=csv,nounits -lms 2000 > "$OUT/gpu_state.csv" &
sampler=$!
H=results/wholehead/h200
FIRST=()
for v in baseline tf32 channels_last tf32_channels_last torch_defaults; do FIRST+=($H/$v/sample.json $H/$v/quality.json); done
FIRST+=($H/comparison.json $H/tf32/samplers.json)
python3 -m snakemake --unlock --configfile config/paper.yaml -- paper/figures/all > /dev/null 2>&1
date -u +%FT%T.%3NZ > "$OUT/started"
timeout -s KILL $LIMIT python3 -m snakemake --cores 8 --scheduler greedy --configfile config/paper.yaml \
  -P "${FIRST[@]}" -- paper/figures/all > "$OUT/snakemake.log" 2>&1
echo "exit $?" >> "$OUT/snakemake.log"
# A killed Snakemake leaves its running job behind: end it, so that the next call's jobs have the GPU to themselves.
pkill -KILL -f '\.snakemake/scripts/'; pkill -KILL -x ncu; pkill -KILL -f 'profiling\.target'
date -u +%FT%T.%3NZ > "$OUT/ended"
kill $sampler
tar czf "$OUT/record.tgz" .snakemake/metadata $(find results paper -name "*.benchmark.tsv" -o -name "*.log" -path "*logs*" | grep -v "^paper/figures") 2>/dev/null
ls $H/*/*.json $H/*.json 2>/dev/null > "$OUT/done.txt"
tail -5 "$OUT/snakemake.log"
