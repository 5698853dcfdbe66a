#!/bin/bash
# The paper configuration's ten Nsight Compute profile jobs with repeated operators profiled once
# (../h200-2026-12-04-ncu-operators/paper.yaml), run by the workflow in /tmp/paper: the folder of that record's
# `paper` stage, whose tf32 profiles count as done (a fresh copy of the checkout where there is none). Cut at LIMIT
# seconds and resumed by the same command on the same machine. Each profile's pages, summary, benchmark and tool log
# packed into $OUT/ncu-once-paper.tgz. Run from the repository root with snakemake importable.
D=data/measurements/h200-2026-12-05-ncu-once-paper
C=data/measurements/h200-2026-12-04-ncu-operators/paper.yaml
W=/tmp/paper; S=$W/once-paper; H=results/wholehead/h200
[ -d $W ] || cp -a . $W
mkdir -p $S
TARGETS=()
for v in baseline tf32 channels_last tf32_channels_last torch_defaults; do
  for phase in sample train; do TARGETS+=($H/$v/profile/$phase/ncu_summary.csv); done
done
date -u +%FT%TZ >> $S/started
(cd $W && python3 -m snakemake --unlock --configfile config/paper.yaml $C -- "${TARGETS[@]}" \
  > /dev/null 2>&1; timeout -s KILL ${LIMIT:-540} python3 -m snakemake --cores 16 --resources gpu=1 \
  --scheduler greedy --configfile config/paper.yaml $C -- "${TARGETS[@]}" >> $S/snakemake.log 2>&1;
  echo "snakemake exit $?" | tee -a $S/snakemake.log)
pkill -KILL -f '\.snakemake/scripts/'; pkill -KILL -x ncu; pkill -KILL -f 'profiling\.target'
date -u +%FT%TZ >> $S/ended
for v in baseline tf32 channels_last tf32_channels_last torch_defaults; do
  for phase in sample train; do
    P=$W/$H/$v/profile/$phase; L=$W/$H/$v/logs; O=$S/$v/$phase; mkdir -p $O
    cp $P/ncu_summary.csv $P/ncu_kernels.parquet $O/ 2>/dev/null
    for f in ncu_raw.csv ncu_details.csv; do [ -f $P/$f ] && gzip -c $P/$f > $O/$f.gz; done
    cp $L/profile_${phase}_ncu.benchmark.tsv $O/ 2>/dev/null
    [ -f $L/profile_${phase}_ncu.tool.log ] && gzip -c $L/profile_${phase}_ncu.tool.log > $O/ncu.tool.log.gz
    [ -f $O/profile_${phase}_ncu.benchmark.tsv ] && echo "$v $phase $(tail -1 $O/profile_${phase}_ncu.benchmark.tsv | cut -f1) s"
  done
done
tail -3 $S/snakemake.log
tar -czf $OUT/ncu-once-paper.tgz -C $S .
