#!/bin/bash
# The workflow's own Nsight Compute profile jobs on an H200, one stage per argument, each from its own copy of the
# checkout in /tmp, its outputs packed into $OUT/<stage>.tgz: paper (tf32 at 128^3, paper settings, repeats once),
# small_once and small_every (the fixtures: 32^3, one-pass set, repeats once / every kernel). Stage time limit in
# seconds from LIMIT_<stage>. Run from the repository root with snakemake importable.
D=data/measurements/h200-2026-12-04-ncu-operators
P=results/wholehead/h200/tf32/profile
L=results/wholehead/h200/tf32/logs
for stage in "$@"; do
  W=/tmp/$stage; rm -rf $W; cp -a . $W; S=$W/out; mkdir -p $S
  limit=LIMIT_$stage
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
    --format=csv > $S/gpu_state.csv
  date -u +%FT%TZ > $S/started
  (cd $W && timeout -s KILL ${!limit:-300} python3 -m snakemake --cores 16 --scheduler greedy \
    --configfile config/paper.yaml $D/$stage.yaml -- $P/sample/ncu_summary.csv $P/train/ncu_summary.csv \
    > $S/snakemake.log 2>&1; echo "$stage: snakemake exit $?" | tee -a $S/snakemake.log)
  # A killed Snakemake leaves its running job behind (the job's script, ncu, the profiled program): end them before
  # the next stage measures anything.
  pkill -KILL -f '\.snakemake/scripts/'; pkill -KILL -x ncu; pkill -KILL -f 'profiling\.target'
  date -u +%FT%TZ > $S/ended
  for phase in sample train; do
    cp $W/$P/$phase/ncu_summary.csv $S/${phase}_ncu_summary.csv
    cp $W/$L/profile_${phase}_ncu.benchmark.tsv $S/${phase}_ncu.benchmark.tsv
    for f in ncu_raw.csv ncu_details.csv; do gzip -c $W/$P/$phase/$f > $S/${phase}_$f.gz; done
    gzip -c $W/$L/profile_${phase}_ncu.tool.log > $S/${phase}_ncu.tool.log.gz
    grep -h -o -- "- [0-9]* passes\|==MEDDDPM==.*" $W/$L/profile_${phase}_ncu.tool.log | sort | uniq -c
    tail -1 $S/${phase}_ncu.benchmark.tsv | cut -f1
  done 2>/dev/null
  tar -czf $OUT/$stage.tgz -C $S .
done
