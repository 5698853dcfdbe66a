"""Snakemake job: paper/figures/all, every figure and table with its sha256."""

from reporting.manifest import write_manifest
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)

run_job(snakemake.log[0], lambda: write_manifest(list(snakemake.input), snakemake.output[0]), snakemake.output)
