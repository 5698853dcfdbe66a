#!/bin/bash
# Two jobs of config/paper.yaml's quality study (tf32 and bf16, five seeds each) on one H200: one after the other, then
# side by side, each from its own copy of the run's folder with its own GPU lock folder (the workflow leases a GPU to
# one job at a time; this measures what sharing one would give). The GPU's state is sampled every second.
# Stages (arguments, in order): prepare (the study's dataset and the preflight, in $W/seq, copied to $W/a and $W/b),
# sequential (both jobs in $W/seq, --resources gpu=1), shared (tf32 in $W/a and bf16 in $W/b at once).
# Run from the repository root with snakemake importable; each stage's record goes to $OUT/<stage>/.
D=data/measurements/h200-2026-12-04-study-sharing
W=/tmp/sharing
S=results/wholehead/h200/study
run() {  # folder, lock folder, targets... ($UNTIL: rules to stop after)
  local folder=$1 locks=$2; shift 2
  (cd "$folder" && GPU_LOCK_DIR=$locks timeout -s KILL 420 python3 -m snakemake --cores 16 --resources gpu=1 \
     --scheduler greedy --configfile config/paper.yaml $D/overlay.yaml ${UNTIL:+--until $UNTIL} -- "$@")
}
record() {  # folder, stage
  mkdir -p "$OUT/$2"
  for variant in tf32 bf16; do
    [ -f "$1/$S/logs/$variant.benchmark.tsv" ] || continue
    cp "$1/$S/logs/$variant.benchmark.tsv" "$1/$S/logs/$variant.log" "$OUT/$2/" 2>/dev/null
    cp "$1/$S/$variant/seed0/run.json" "$OUT/$2/$variant-seed0-run.json"
    (cd "$1/$S/$variant" && sha256sum seed*/losses.csv seed*/slice.npy) > "$OUT/$2/$variant-sha256.txt"
  done
}
for stage in "$@"; do
  mkdir -p "$OUT/$stage"
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw,clocks.sm,temperature.gpu \
    --format=csv,nounits -lms 1000 > "$OUT/$stage/gpu_state.csv" &
  sampler=$!
  date -u +%FT%T.%3NZ > "$OUT/$stage/started"
  case $stage in
    prepare)
      rm -rf $W && mkdir -p $W && cp -a . $W/seq
      UNTIL="study_dataset preflight" run $W/seq /tmp/locks-seq $S/tf32/seed0/run.json $S/bf16/seed0/run.json \
        > "$OUT/$stage/snakemake.log" 2>&1
      echo "prepare: exit $?" >> "$OUT/$stage/snakemake.log"
      cp -a $W/seq $W/a && cp -a $W/seq $W/b ;;
    sequential)
      /usr/bin/time -f "%e s" -o "$OUT/$stage/wall.txt" \
        bash -c "$(declare -f run); D=$D; S=$S; run $W/seq /tmp/locks-seq $S/tf32/seed0/run.json $S/bf16/seed0/run.json" \
        > "$OUT/$stage/snakemake.log" 2>&1
      record $W/seq $stage ;;
    shared)
      /usr/bin/time -f "%e s" -o "$OUT/$stage/wall.txt" bash -c "
        $(declare -f run); D=$D; S=$S
        run $W/a /tmp/locks-a $S/tf32/seed0/run.json > '$OUT/$stage/snakemake-tf32.log' 2>&1 &
        run $W/b /tmp/locks-b $S/bf16/seed0/run.json > '$OUT/$stage/snakemake-bf16.log' 2>&1 &
        wait"
      record $W/a $stage; record $W/b $stage ;;
  esac
  date -u +%FT%T.%3NZ > "$OUT/$stage/ended"
  kill $sampler
  echo "$stage: $(cat "$OUT/$stage/wall.txt" 2>/dev/null) $(tail -1 "$OUT/$stage/snakemake"*.log | tr '\n' ' ')"
done
