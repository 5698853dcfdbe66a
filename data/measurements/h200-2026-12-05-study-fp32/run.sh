#!/bin/bash
# The quality study's fp32 training, cuDNN's heuristics against its autotuning among deterministic algorithms
# (overlay.yaml), with the workflow's own study jobs from a copy of the checkout in /tmp/study-fp32, one job at a time;
# every job's run.json, benchmark and log packed into $OUT/study-fp32.tgz. LIMIT: seconds for the whole run. Run from
# the repository root with snakemake importable.
D=data/measurements/h200-2026-12-05-study-fp32
W=/tmp/study-fp32; S=$W/out; H=results/wholehead/h200
rm -rf $W; cp -a . $W; mkdir -p $S
# The preflight of an earlier stage of the same call, where there was one (the same device and versions).
[ -f /tmp/paper/$H/preflight.json ] && mkdir -p $W/$H && cp -a /tmp/paper/$H/preflight.json $W/$H/
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,clocks.sm,temperature.gpu,power.draw,utilization.gpu \
  --format=csv > $S/gpu_state.csv
date -u +%FT%TZ > $S/started
(cd $W && timeout -s KILL ${LIMIT:-300} python3 -m snakemake --cores 16 --resources gpu=1 --scheduler greedy \
  --configfile config/paper.yaml $D/overlay.yaml -- $H/study/baseline/seed0/run.json \
  $H/study/baseline_autotuned/seed0/run.json > $S/snakemake.log 2>&1; echo "snakemake exit $?" >> $S/snakemake.log)
pkill -KILL -f '\.snakemake/scripts/'
date -u +%FT%TZ > $S/ended
for v in baseline baseline_autotuned; do
  mkdir -p $S/$v
  for k in 0 1 2 3 4; do [ -f $W/$H/study/$v/seed$k/run.json ] && cp $W/$H/study/$v/seed$k/run.json $S/$v/seed$k.json; done
  cp $W/$H/study/logs/$v.log $W/$H/study/logs/$v.benchmark.tsv $S/$v/ 2>/dev/null
done
python3 - "$S" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/seed*.json")):
    r = json.loads(path.read_text())
    t = r["training"]
    print(path.parent.name, path.stem, f"ms/step/run {t['ms_per_step']:.2f}", f"job train s {t['job_seconds']:.1f}",
          f"sampling s/vol {r['sampling']['seconds_per_volume']:.3f}", f"wall {r['wall_seconds']:.1f}",
          "cudnn_benchmark", r["provenance"].get("switches", {}).get("cudnn_benchmark"),
          "fwd err", r["numeric"]["forward_relative_error"])
PY
tail -4 $S/snakemake.log
tar -czf $OUT/study-fp32.tgz -C $S .
