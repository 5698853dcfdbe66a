"""Snakemake job: paper/figures/all, every figure and table and the article with its sha256, the timing-bearing ones
marked."""

from jobio.job import run_job
from reporting.manifest import write_manifest
from reporting.registry import timing_bearing_files

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)

run_job(snakemake.log[0],
        lambda: write_manifest([*snakemake.input.outputs, snakemake.input.article], snakemake.output[0],
                               timing_bearing_files()),
        snakemake.output)
