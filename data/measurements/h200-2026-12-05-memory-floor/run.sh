#!/bin/bash
# frontier_graphed's 128^3 training step profiled by the workflow's own Nsight Compute job with its DRAM bytes
# (config/ncu-memory-floor.yaml), longer than one device call: `start` runs Snakemake in its own process session
# (setsid) from a copy of the checkout in /tmp/memory-floor, so that it runs on between calls on one warm machine;
# `wait S` follows it for up to S seconds; `pack` copies what it made to $OUT. Run from the repository root with
# snakemake importable. Where ../h200-2026-12-04-ncu-cost/pass_probe.py (mode memory_floor) found a set with the DRAM
# bytes that fits one replay pass, its overlay ($SET) replaces config/ncu-memory-floor.yaml's three-pass set.
D=data/measurements/h200-2026-12-05-memory-floor
W=/tmp/memory-floor
# The hardware label of the card found (h200 or h100: config.yaml knows both; the preflight refuses a card that does
# not match its label), h200 where nvidia-smi names neither.
LABEL=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[12]00' | tr H h)
LABEL=${LABEL:-h200}
P=results/wholehead/$LABEL/frontier_graphed/profile/train
L=results/wholehead/$LABEL/frontier_graphed/logs
SET=/tmp/memory-floor-set.yaml

# Snakemake on TARGETS in its own process session in $W: its output in out/snakemake_NAME.log, then out/exit.
launch() {
  local name=$1 extra=$2; shift 2
  date -u +%FT%TZ > $W/out/started_$name; rm -f $W/out/exit
  (cd $W && setsid bash -c "python3 -m snakemake --cores 16 --scheduler greedy --configfile config/paper.yaml \
    config/ncu-memory-floor.yaml $D/overlay.yaml $extra --config 'gpus=[$LABEL]' -- $* > out/snakemake_$name.log 2>&1; echo \$? > out/exit; \
    date -u +%FT%TZ > out/ended_$name" < /dev/null > /dev/null 2>&1 &)
  sleep 5; tail -3 $W/out/snakemake_$name.log
}

# One phase's profile of the rung into DEST: its pages, tool log, benchmark and memory-floor table.
pack_profile() {
  local phase=$1 dest=$2 profile=${P%/train}/$1
  mkdir -p $dest
  cp $W/$profile/ncu_summary.csv $W/$profile/ncu_kernels.parquet $W/$profile/ncu_rules.csv $dest/ 2>/dev/null
  for f in ncu_raw.csv ncu_details.csv; do gzip -c $W/$profile/$f > $dest/$f.gz; done 2>/dev/null
  cp $W/$L/profile_${phase}_ncu.benchmark.tsv $dest/ 2>/dev/null
  gzip -c $W/$L/profile_${phase}_ncu.tool.log > $dest/profile_${phase}_ncu.tool.log.gz 2>/dev/null
  [ -f $W/$profile/ncu_kernels.parquet ] && (cd $W && PYTHONPATH=workflow/scripts python3 -m profiling.memory_floor \
    $profile/ncu_kernels.parquet results/wholehead/$LABEL/device_rates.json --sites 8 > $dest/memory_floor.md 2>&1)
}

case "$1" in
  start)
    rm -rf $W; cp -a . $W; mkdir -p $W/out
    # The 128^3 synthetic set of the same overlay, made by an earlier stage of the same call where there was one.
    [ -d /tmp/paper/results/wholehead/dataset ] && mkdir -p $W/results/wholehead && \
      cp -a /tmp/paper/results/wholehead/dataset $W/results/wholehead/
    nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
      --format=csv > $W/out/gpu_state.csv
    EXTRA=""; [ -f $SET ] && cp $SET $W/out/set.yaml && EXTRA=out/set.yaml
    launch train "$EXTRA" $P/ncu_summary.csv results/wholehead/$LABEL/device_rates.json ;;
  start_sample)
    # The sampling evaluation of the same rung, after the training step's profile, in the same folder (its dataset
    # and device rates): the paper's sampling set (DRAM bytes included), every kernel of the replayed graph.
    launch sample "" ${P%/train}/sample/ncu_summary.csv ;;
  wait)
    end=$((SECONDS + $2))
    while [ ! -f $W/out/exit ] && [ $SECONDS -lt $end ]; do sleep 20; done
    echo "exit: $(cat $W/out/exit 2>/dev/null || echo running)"
    grep -c -- "- [0-9]* pass" $W/$L/profile_train_ncu.tool.log 2>/dev/null | sed 's/^/kernels profiled so far: /'
    cat $W/$L/profile_train_ncu.benchmark.tsv 2>/dev/null
    grep -o -- "- [0-9]* pass[es]*" $W/$L/profile_train_ncu.tool.log 2>/dev/null | sort | uniq -c
    tail -n 5 $W/out/snakemake_*.log ;;
  pack)
    S=$W/out
    cp $W/results/wholehead/$LABEL/device_rates.json $W/results/wholehead/$LABEL/preflight.json $S/ 2>/dev/null
    pack_profile train $S; pack_profile sample $S/sample
    tar -czf $OUT/memory-floor.tgz -C $S . ; ls -la $S ;;
esac
