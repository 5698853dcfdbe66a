"""Snakemake job: the results of one hardware label as a reference set, data/reference/<label>/
(reporting.export)."""

import os
from pathlib import Path

from reporting.export import export_set
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    label = snakemake.wildcards.label
    written = export_set(label, list(snakemake.input.results), "results", Path(snakemake.output[0]).parent,
                         snakemake.params.config, os.environ.get("MEDDDPM_SNAKEMAKE_COMMAND", "(not recorded)"))
    print(f"data/reference/{label}/: {len(written)} files")


run_job(snakemake.log[0], main, snakemake.output)
