#!/bin/bash
# After probe.sh (its output PASSES and SETS_FILE): the most complete candidate set that includes the DRAM bytes and fits
# one replay pass per kernel on this GPU, written as an overlay for the training step's profile (OVERLAY); none where
# no candidate does (the three-pass train_memory_floor set then stays).
PASSES=$1; SETS_FILE=$2; OVERLAY=$3
for name in one_pass+dram_rw+flops one_pass+dram_rw one_pass-gmma+dram_rw time+cycles+inst+ipc+dram_rw time+cycles+inst+dram_rw \
    time+cycles+dram_rw time+dram_rw; do
  line=$(grep "^$name: " "$PASSES")
  if [ -n "$line" ] && ! echo "$line" | grep -qv -- "- 1 pass;" && echo "$line" | grep -q -- "- 1 pass;" \
      && [ "$(echo "$line" | grep -o -- '- [0-9]* pass' | sort -u | wc -l)" = 1 ]; then
    metrics=$(grep "^$name=" "$SETS_FILE" | cut -d= -f2)
    # config.yaml's by_architecture.sm90 adds the wgmma count to every phase: dropped for the training step unless the
    # chosen set has it, since it may cost a pass there.
    gmma=sm__inst_executed_pipe_tensor_op_gmma.sum
    remove=smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio
    case ",$metrics," in *",$gmma,"*) ;; *) remove="$remove, $gmma" ;; esac
    { echo "# chosen by choose.sh: $line"
      echo "profiling: {ncu: {by_phase: {train: {metrics: [${metrics}]}},"
      echo "  by_architecture: {sm90: {by_phase: {train: {metrics_remove: [$remove]}}}}}}"; } > "$OVERLAY"
    echo "one pass with the DRAM bytes: $name"; exit 0
  fi
done
echo "no candidate with the DRAM bytes fits one pass: the three-pass set"; rm -f "$OVERLAY"
