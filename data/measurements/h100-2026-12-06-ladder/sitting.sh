#!/bin/bash
# The ladder of config/frontier.yaml paired in one sitting on one machine, then frontier_lean_edges's own jobs and
# quality.json (quality_lean.yaml), then the GPU tests of the norm kernels and of the recomputed columns. The chain runs
# detached (setsid) in a copy of the tree under /tmp/sitting, so that it outlives the device call that starts it and
# no stage is cut at a call's limit; later calls on the same warm machine watch it. Run from the repository root with
# snakemake importable (PYTHONPATH):
#   bash data/measurements/h100-2026-12-06-ladder/sitting.sh start SECONDS   # copy, start the chain, watch it
#   bash data/measurements/h100-2026-12-06-ladder/sitting.sh watch SECONDS   # watch it (a later call)
# Watching ends when the chain is done or SECONDS have passed; what the chain made so far goes to $OUT/sitting.tgz.
W=/tmp/sitting
# The record whose quality_lean.yaml the lean stage reads: this one, or the one RECORD names (a later record that
# runs this chain with its own settings through a sitting.sh of its own, which sets RECORD and runs this script).
D=${RECORD:-data/measurements/h100-2026-12-06-ladder}
# The chain's stages, in this order (a later record's sitting.sh may run fewer), and the ladder stage's limit.
STAGES=${STAGES:-ladder lean tests}
LADDER_SECONDS=${LADDER_SECONDS:-1750}
# The hardware label of the card found (h200 or h100: config.yaml knows both), h200 where nvidia-smi names neither.
LABEL=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[12]00' | tr H h)
LABEL=${LABEL:-h200}
R=results/wholehead/$LABEL

gpu_state() {
  nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
    --format=csv > $W/out/gpu_state_$(date -u +%H%M%S).csv
}

stage() {  # name, seconds (SIGKILL after them: Snakemake waits for its running jobs on SIGTERM), config, targets
  local name=$1 seconds=$2; shift 2
  local config=()
  while [ "$1" != -- ]; do config+=("$1"); shift; done; shift
  gpu_state
  python3 -m snakemake --unlock "${config[@]}" > /dev/null 2>&1
  /usr/bin/time -f "$name %e s" -a -o $W/out/times.txt timeout -s KILL $seconds python3 -m snakemake --cores 16 \
    --resources gpu=1 --scheduler greedy --rerun-incomplete "${config[@]}" -- "$@" > $W/out/snakemake_$name.log 2>&1
  pkill -KILL -f '\.snakemake/scripts/'  # a job left by the kill would hold the GPU's lock into the next stage
}

collect() {  # what the tree holds so far, into $W/out (small files only)
  cd $W/tree || return
  mkdir -p $W/out/ladder/logs $W/out/lean
  cp $R/comparison.json $R/comparison_rounds.csv $R/preflight.json $W/out/ladder/ 2>/dev/null
  cp -r $R/comparison_groups $W/out/ladder/ 2>/dev/null
  cp $R/logs/compare*.log $R/logs/compare*.tsv $W/out/ladder/logs/ 2>/dev/null
  for v in baseline frontier_lean_edges; do
    mkdir -p $W/out/lean/$v
    cp $R/$v/{train.json,train_steps.csv,sample.json,sample_steps.csv,quality.json} $W/out/lean/$v/ 2>/dev/null
    cp $R/$v/logs/*.log $R/$v/logs/*.tsv $W/out/lean/$v/ 2>/dev/null
  done
}

runs() {  # whether STAGES names this stage
  case " $STAGES " in *" $1 "*) return 0 ;; esac
  return 1
}

chain() {
  cd $W/tree
  python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), \
triton.__version__)" > $W/out/versions.txt
  if runs ladder; then
    stage ladder $LADDER_SECONDS --configfile config/paper.yaml config/frontier.yaml --config "gpus=[$LABEL]" \
      -- $R/comparison.json
    collect
  fi
  if runs lean; then
    stage lean 400 --configfile config/paper.yaml config/paper-timing.yaml $D/quality_lean.yaml \
      --config "gpus=[$LABEL]" -- $R/frontier_lean_edges/quality.json
    collect
  fi
  if runs tests; then
    gpu_state
    timeout -s KILL 240 python3 -m pytest -o addopts="" -p no:cacheprovider -q -rA tests/test_ndhwc_norm.py \
      tests/test_edge_columns_recomputed.py > $W/out/gpu_tests.log 2>&1
    echo "rc $?" >> $W/out/gpu_tests.log
  fi
  touch $W/out/done
}

watch() {
  local seconds=$1
  while [ ! -f $W/out/done ] && [ $SECONDS -lt $seconds ]; do sleep 10; done
  collect
  tar -czf $OUT/sitting.tgz -C $W out
  tail -n 2 $W/out/times.txt 2>/dev/null; ls $W/out/ladder/comparison_groups 2>/dev/null | tr '\n' ' '; echo
}

case $1 in
  start)
    rm -rf $W; mkdir -p $W/out; cp -a . $W/tree
    setsid nohup bash $D/sitting.sh chain > $W/out/chain.log 2>&1 < /dev/null &
    watch $2 ;;
  chain) chain ;;
  watch) watch $2 ;;
esac
