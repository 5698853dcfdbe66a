"""Snakemake job: the results of one hardware label as a reference set, data/reference/<workload>/<label>/
(reporting.export)."""

import os
from pathlib import Path

from jobio.job import run_job
from planning.layout import RESULTS
from reporting.export import export_set

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    out = Path(snakemake.output[0]).parent
    written = export_set(snakemake.wildcards.label, list(snakemake.input.results), RESULTS, out,
                         snakemake.params.config, os.environ.get("MEDDDPM_SNAKEMAKE_COMMAND", "(not recorded)"))
    print(f"{out}/: {len(written)} files")


run_job(snakemake.log[0], main, snakemake.output)
