#!/bin/bash
# The call after the paired rungs, on the same warm machine (results/ kept): the fastest rung in training over
# REFERENCE (comparison.json; REFERENCE itself where no candidate is faster) is profiled over both phases and gets its
# train and sample jobs and quality.json. $1 and $2: seconds for each stage. OVERLAY: the pairing's overlay
# (overlay.yaml here; overlay_union.yaml with REFERENCE=frontier_gemm_dense). Run from the repository root.
D=data/measurements
OVERLAY=${OVERLAY:-$D/2026-12-05-next-rungs/overlay.yaml}
export REFERENCE=${REFERENCE:-frontier_edges}
LABEL=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[12]00' | tr H h)
LABEL=${LABEL:-h200}
WINNER=$(python3 - results/wholehead/$LABEL/comparison.json <<'PY'
import json, os, sys
from pathlib import Path
path = Path(sys.argv[1])
rows = json.loads(path.read_text())["phases"]["train"]["comparisons"] if path.exists() else []
reference = os.environ["REFERENCE"]
faster = [r for r in rows if r["reference"] == reference and r["verdict"] == "faster"]
print(max(faster, key=lambda r: r["speedup"])["variant"] if faster else reference)
PY
)
echo "fastest in training: $WINNER"
mkdir -p $OUT
echo $WINNER > $OUT/winner.txt
OVERLAY=$OVERLAY PROFILED=$WINNER bash $D/h200-2026-12-05-frontier-now/run.sh 0 ${1:-170}
# quality.yaml names frontier_edges; the same overlay with the winner in its place.
sed "s/frontier_edges/$WINNER/g" $D/h200-2026-12-05-frontier-now/quality.yaml > /tmp/quality_$WINNER.yaml
QUALITY=/tmp/quality_$WINNER.yaml VARIANT=$WINNER bash $D/h200-2026-12-05-frontier-now/run_quality.sh ${2:-400} 0
