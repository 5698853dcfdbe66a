"""Snakemake job: fig01, share of kernel time per kernel class, per variant, train and sample step; every run measured here and shipped."""

from reporting.paperfigs import plot_runtime_breakdown
from reporting.sources import Sources
from reporting.style import apply_style, save
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    apply_style()
    sources = Sources.from_job(snakemake)
    save(plot_runtime_breakdown(sources), snakemake.output.pdf, snakemake.output.png)


run_job(snakemake.log[0], main)
