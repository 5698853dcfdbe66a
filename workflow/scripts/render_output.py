"""Snakemake job: one registered figure or table (reporting.registry), rendered from the collected results."""

from reporting.render import render
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)

run_job(snakemake.log[0], lambda: render(snakemake.params.output, dict(snakemake.input.items()),
                                         dict(snakemake.output.items()), snakemake.params.settings),
        snakemake.output)
