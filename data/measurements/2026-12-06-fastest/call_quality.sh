#!/bin/bash
# A call on one machine: the GPU tests of the norm kernels (their offset is new since they last ran on a GPU), then
# frontier_gemm_dense_embedding's quality.json and the quality study (quality.yaml; run_quality.sh of
# ../h200-2026-12-05-frontier-now/, which continues a stage cut at its seconds on the same warm machine). $1: 1 runs
# the tests first. $2 and $3: seconds for the quality and study stages (the study's within this call's 585 s).
[ -d /tmp/site2/snakemake ] || python3 -m zipfile -e .gpu-site.zip /tmp/site2; export PYTHONPATH=/tmp/site2
F=$OUT; export OUT=/tmp/o$RANDOM; mkdir -p $OUT
if [ "$1" = 1 ]; then
  timeout -s KILL 130 python3 -m pytest -o addopts="" -p no:cacheprovider -q -rA tests/test_ndhwc_norm.py \
    > $OUT/gpu_test_ndhwc_norm.log 2>&1
  echo "rc $?" >> $OUT/gpu_test_ndhwc_norm.log
  tail -n 3 $OUT/gpu_test_ndhwc_norm.log
fi
Q=${2:-0}; [ "$Q" -gt 0 ] && Q=$((Q < 585 - SECONDS ? Q : 585 - SECONDS))
S=${3:-0}; [ "$S" -gt 0 ] && S=$((585 - SECONDS - Q))
QUALITY=data/measurements/2026-12-06-fastest/quality.yaml VARIANT=frontier_gemm_dense_embedding \
  bash data/measurements/h200-2026-12-05-frontier-now/run_quality.sh $Q $S
cp /tmp/frontier-now/*/gpu_state_*.csv $OUT/ 2>/dev/null
tar czf $F/call.tgz -C $OUT .
