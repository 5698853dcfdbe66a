"""Snakemake job of the rule of each registered output (fig01_..., tab01_...; reporting.registry): the figure or
table rendered from the collected results."""

from jobio.job import run_job
from reporting.render import render

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)

run_job(snakemake.log[0], lambda: render(snakemake.params.output, dict(snakemake.input.items()),
                                         dict(snakemake.output.items()), snakemake.params.settings),
        snakemake.output)
