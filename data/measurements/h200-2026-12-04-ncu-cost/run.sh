#!/bin/bash
# The workflow's own profile jobs of one variant at 128^3 on an H200, one stage per argument, each stage's outputs
# packed into $OUT/<stage>.tar.gz. Stages: sample (the sampling step with config.yaml's settings), sample_shipped (the
# same with the settings before this change, overlay_shipped_sample_set.yaml), train (the training step).
# Run from the repository root with snakemake importable.
D=data/measurements/h200-2026-12-04-ncu-cost
V=${VARIANT:-tf32}
R=results/wholehead/h200/$V
for stage in "$@"; do
  case $stage in
    sample) phase=sample; extra=() ;;
    sample_shipped) phase=sample; extra=($D/overlay_shipped_sample_set.yaml) ;;
    train) phase=train; extra=() ;;
  esac
  P=$R/profile/$phase; L=$R/logs; S=$(mktemp -d)
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
    --format=csv > $S/gpu_state.csv
  date -u +%FT%TZ > $S/started
  python3 -m snakemake --cores 16 --resources gpu=1 --scheduler greedy --configfile config/paper.yaml $D/overlay.yaml \
    "${extra[@]}" -- $P/ncu_summary.csv $P/ncu_rules.csv > $S/snakemake.log 2>&1
  echo "$stage: snakemake exit $?" | tee -a $S/snakemake.log
  date -u +%FT%TZ > $S/ended
  cp $P/ncu_summary.csv $P/ncu_conditions.json $L/profile_${phase}_ncu.benchmark.tsv $S/ 2>/dev/null
  gzip -c $P/ncu_rules.csv > $S/ncu_rules.csv.gz; gzip -c $P/ncu_raw.csv > $S/ncu_raw.csv.gz
  gzip -c $L/profile_${phase}_ncu.tool.log > $S/ncu.tool.log.gz
  grep -o -- "- [0-9]* passes" $L/profile_${phase}_ncu.tool.log | sort | uniq -c
  cat $S/profile_${phase}_ncu.benchmark.tsv
  tar -czf $OUT/$stage.tar.gz -C $S .
done
