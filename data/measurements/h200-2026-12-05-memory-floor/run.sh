#!/bin/bash
# frontier_graphed's 128^3 training step profiled by the workflow's own Nsight Compute job with its DRAM bytes
# (config/ncu-memory-floor.yaml), longer than one device call: `start` runs Snakemake in its own process session
# (setsid) from a copy of the checkout in /tmp/memory-floor, so that it runs on between calls on one warm machine;
# `wait S` follows it for up to S seconds; `pack` copies what it made to $OUT. Run from the repository root with
# snakemake importable. Where ../h200-2026-12-05-dram-passes/choose.sh found a set with the DRAM bytes that fits one
# replay pass, its overlay ($SET) replaces config/ncu-memory-floor.yaml's three-pass set.
D=data/measurements/h200-2026-12-05-memory-floor
W=/tmp/memory-floor
P=results/wholehead/h200/frontier_graphed/profile/train
L=results/wholehead/h200/frontier_graphed/logs
SET=/tmp/memory-floor-set.yaml
case "$1" in
  start)
    rm -rf $W; cp -a . $W; mkdir -p $W/out
    # The 128^3 synthetic set of the same overlay, made by an earlier stage of the same call where there was one.
    [ -d /tmp/paper/results/wholehead/dataset ] && mkdir -p $W/results/wholehead && \
      cp -a /tmp/paper/results/wholehead/dataset $W/results/wholehead/
    nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
      --format=csv > $W/out/gpu_state.csv
    date -u +%FT%TZ > $W/out/started
    EXTRA=""; [ -f $SET ] && cp $SET $W/out/set.yaml && EXTRA=out/set.yaml
    (cd $W && setsid bash -c "python3 -m snakemake --cores 16 --scheduler greedy --configfile config/paper.yaml \
      config/ncu-memory-floor.yaml $D/overlay.yaml $EXTRA -- $P/ncu_summary.csv results/wholehead/h200/device_rates.json \
      > out/snakemake.log 2>&1; echo \$? > out/exit; date -u +%FT%TZ > out/ended" < /dev/null > /dev/null 2>&1 &)
    sleep 5; tail -3 $W/out/snakemake.log ;;
  start_sample)
    # The sampling evaluation of the same rung, after the training step's profile, in the same folder (its dataset
    # and device rates): the paper's sampling set (DRAM bytes included), every kernel of the replayed graph.
    date -u +%FT%TZ > $W/out/started_sample; rm -f $W/out/exit
    (cd $W && setsid bash -c "python3 -m snakemake --cores 16 --scheduler greedy --configfile config/paper.yaml \
      config/ncu-memory-floor.yaml $D/overlay.yaml -- ${P%/train}/sample/ncu_summary.csv \
      > out/snakemake_sample.log 2>&1; echo \$? > out/exit; date -u +%FT%TZ > out/ended_sample" < /dev/null > /dev/null 2>&1 &)
    sleep 5; tail -3 $W/out/snakemake_sample.log ;;
  wait)
    end=$((SECONDS + $2))
    while [ ! -f $W/out/exit ] && [ $SECONDS -lt $end ]; do sleep 20; done
    echo "exit: $(cat $W/out/exit 2>/dev/null || echo running)"
    grep -c -- "- [0-9]* pass" $W/$L/profile_train_ncu.tool.log 2>/dev/null | sed 's/^/kernels profiled so far: /'
    cat $W/$L/profile_train_ncu.benchmark.tsv 2>/dev/null
    grep -o -- "- [0-9]* pass[es]*" $W/$L/profile_train_ncu.tool.log 2>/dev/null | sort | uniq -c
    tail -5 $W/out/snakemake.log ;;
  pack)
    S=$W/out
    cp $W/$P/ncu_summary.csv $W/$P/ncu_kernels.parquet $W/results/wholehead/h200/device_rates.json $S/ 2>/dev/null
    for f in ncu_raw.csv ncu_details.csv; do gzip -c $W/$P/$f > $S/$f.gz; done 2>/dev/null
    cp $W/$L/profile_train_ncu.benchmark.tsv $S/ 2>/dev/null
    gzip -c $W/$L/profile_train_ncu.tool.log > $S/profile_train_ncu.tool.log.gz 2>/dev/null
    cp $W/results/wholehead/h200/preflight.json $S/ 2>/dev/null
    (cd $W && PYTHONPATH=workflow/scripts python3 -m profiling.memory_floor $P/ncu_kernels.parquet \
      results/wholehead/h200/device_rates.json --sites 8 > $S/memory_floor.md 2>&1)
    S2=$S/sample; P2=${P%/train}/sample; mkdir -p $S2
    cp $W/$P2/ncu_summary.csv $W/$P2/ncu_kernels.parquet $W/$P2/ncu_rules.csv $S2/ 2>/dev/null
    for f in ncu_raw.csv ncu_details.csv; do gzip -c $W/$P2/$f > $S2/$f.gz; done 2>/dev/null
    cp $W/$L/profile_sample_ncu.benchmark.tsv $W/$L/train.benchmark.tsv $S2/ 2>/dev/null
    gzip -c $W/$L/profile_sample_ncu.tool.log > $S2/profile_sample_ncu.tool.log.gz 2>/dev/null
    [ -f $W/$P2/ncu_kernels.parquet ] && (cd $W && PYTHONPATH=workflow/scripts python3 -m profiling.memory_floor \
      $P2/ncu_kernels.parquet results/wholehead/h200/device_rates.json --sites 6 > $S2/memory_floor.md 2>&1)
    tar -czf $OUT/memory-floor.tgz -C $S . ; ls -la $S ;;
esac
