#!/bin/bash
# ncu's NVTX filter over the probe's operator ranges: kernels profiled plain, with the ranges, and with repeats excluded.
cd "$(dirname "$0")"
o=$OUT/nvtx
mkdir -p $o
ncu --version | tail -1 > $o/ncu_version.txt
run() {  # name, probe mode, extra ncu args
  ncu --clock-control none --target-processes all --nvtx --nvtx-include medddpm_profiled \
      --metrics gpu__time_duration.sum "${@:3}" -o /tmp/nvtx_$1 -f python3 nvtx_probe.py $2 > $o/$1.log 2>&1
  ncu -i /tmp/nvtx_$1.ncu-rep --csv --page raw --print-units base > $o/$1.csv 2>&1
  echo "$1: $(($(wc -l < $o/$1.csv) - 2)) kernels"
}
run plain plain
run marks marks
run exclude_repeat marks --nvtx-exclude "repeat/"
run exclude_repeat_any marks --nvtx-exclude "repeat/*/"
run include_first marks --nvtx-include "first/"
