"""Snakemake job: fig06, Nsight Compute rules' estimated speedups by rule and kernel class; every run measured here and shipped."""

from reporting.paperfigs import plot_priority_scores
from reporting.sources import Sources
from reporting.style import apply_style, save
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    apply_style()
    sources = Sources.from_job(snakemake)
    save(plot_priority_scores(sources), snakemake.output.pdf, snakemake.output.png)


run_job(snakemake.log[0], main)
