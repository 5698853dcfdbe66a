"""Snakemake job: fig07, SM cycles, instructions, IPC and tensor use relative to baseline; training speed-up; every run measured here and shipped."""

from reporting.paperfigs import plot_optimization_impact
from reporting.sources import Sources
from reporting.style import apply_style, save
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    apply_style()
    sources = Sources.from_job(snakemake)
    save(plot_optimization_impact(sources), snakemake.output.pdf, snakemake.output.png)


run_job(snakemake.log[0], main)
