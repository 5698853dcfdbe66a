#!/bin/bash
# This record's sitting: the previous record's chain (ladder, the lean rung's jobs and quality.json, the GPU tests),
# its lean stage reading this folder's quality_lean.yaml. Run from the repository root with snakemake importable:
#   bash data/measurements/h100-2026-12-06-lean-quality/sitting.sh start SECONDS   # copy, start the chain, watch it
#   bash data/measurements/h100-2026-12-06-lean-quality/sitting.sh watch SECONDS   # watch it (a later call)
RECORD=data/measurements/h100-2026-12-06-lean-quality exec bash data/measurements/h100-2026-12-06-ladder/sitting.sh "$@"
