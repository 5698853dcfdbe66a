#!/bin/bash
# The pairing call: the time-embedding rung joins the paired rungs only where its tests of the function pass on the
# GPU first (a rung whose process fails ends the comparison job with nothing written). Run from the repository root.
[ -d /tmp/site2/snakemake ] || python3 -m zipfile -e .gpu-site.zip /tmp/site2; export PYTHONPATH=/tmp/site2
F=$OUT; export OUT=/tmp/o1; mkdir -p $OUT
D=data/measurements/2026-12-05-next-rungs
OV=$D/overlay.yaml
T=tests/test_time_embedding_in_norm.py
timeout -s KILL 150 python3 -m pytest -o addopts="" -p no:cacheprovider -q -rA $T > $OUT/test_embedding.log 2>&1
# The gate: every test of the function passed (the kernel names' test is a record, not the gate).
if grep -q " passed" $OUT/test_embedding.log && \
    ! grep -E "^(FAILED|ERROR)" $OUT/test_embedding.log | grep -qv no_pass_of_its_own; then
  sed 's/frontier_gemm_dense\]/frontier_gemm_dense, frontier_embedding_in_norm]/' $OV > /tmp/overlay6.yaml
  OV=/tmp/overlay6.yaml
fi
tail -4 $OUT/test_embedding.log; grep run_variants $OV
OVERLAY=$OV bash data/measurements/h200-2026-12-05-frontier-now/run.sh $((575 - SECONDS)) 0
tar czf $F/call1.tgz -C /tmp o1
python3 - <<'PY'
import json,glob
for f in glob.glob('results/wholehead/*/comparison.json'):
    d=json.load(open(f))
    for ph,v in d['phases'].items():
        for c in v['comparisons']:
            print(ph, c['variant'], c['reference'], round(c['speedup'],4), round(c['low'],4), round(c['high'],4), c['verdict'], c['rounds'])
PY
