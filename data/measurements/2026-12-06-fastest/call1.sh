#!/bin/bash
# First call: the GPU tests of the norm kernels with the time-embedding offset, then the union rung
# (frontier_gemm_dense_embedding) paired with frontier_gemm_dense, frontier_edges and the baseline
# (../2026-12-05-next-rungs/overlay_union.yaml). The union joins the pairing only where its tests passed: a rung whose
# process fails ends the comparison job with nothing written. Run from the repository root; results to $OUT.
[ -d /tmp/site2/snakemake ] || python3 -m zipfile -e .gpu-site.zip /tmp/site2; export PYTHONPATH=/tmp/site2
F=$OUT; export OUT=/tmp/o1; mkdir -p $OUT
OV=data/measurements/2026-12-05-next-rungs/overlay_union.yaml
timeout -s KILL 200 python3 -m pytest -o addopts="" -p no:cacheprovider -q -rA tests/test_ndhwc_norm.py \
  tests/test_time_embedding_in_norm.py > $OUT/gpu_tests.log 2>&1
echo "rc $?" >> $OUT/gpu_tests.log
tail -n 4 $OUT/gpu_tests.log
if ! grep -q " passed" $OUT/gpu_tests.log || grep -qE "^(FAILED|ERROR) tests/test_time_embedding" $OUT/gpu_tests.log
then
  sed 's/, frontier_gemm_dense_embedding\]/]/' $OV > /tmp/overlay_pair.yaml
  OV=/tmp/overlay_pair.yaml
fi
grep run_variants $OV
OVERLAY=$OV bash data/measurements/h200-2026-12-05-frontier-now/run.sh $((585 - SECONDS)) 0
tar czf $F/call1.tgz -C /tmp o1
python3 - <<'PY'
import json, glob
for f in glob.glob('results/wholehead/*/comparison.json'):
    for phase, v in json.load(open(f))['phases'].items():
        for c in v['comparisons']:
            print(phase, c['variant'], c['reference'], round(c['speedup'], 4), round(c['low'], 4),
                  round(c['high'], 4), c['verdict'], c['rounds'])
PY
