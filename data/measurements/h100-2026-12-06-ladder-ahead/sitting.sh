#!/bin/bash
# This record's sitting: only the ladder stage of the first H100 record's chain, all of config/frontier.yaml's rungs
# paired in one sitting, each group's compiled rungs built ahead (comparison.compile_ahead, on by default). Run from
# the repository root with snakemake importable:
#   bash data/measurements/h100-2026-12-06-ladder-ahead/sitting.sh start SECONDS   # copy, start the chain, watch it
#   bash data/measurements/h100-2026-12-06-ladder-ahead/sitting.sh watch SECONDS   # watch it (a later call)
RECORD=data/measurements/h100-2026-12-06-ladder-ahead STAGES=ladder \
  exec bash data/measurements/h100-2026-12-06-ladder/sitting.sh "$@"
