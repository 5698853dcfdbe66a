"""Snakemake job: fig02, the ten kernels with the largest summed time per hardware label, coloured by class; every run measured here and shipped."""

from reporting.paperfigs import plot_top_kernels
from reporting.sources import Sources
from reporting.style import apply_style, save
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    apply_style()
    sources = Sources.from_job(snakemake)
    save(plot_top_kernels(sources), snakemake.output.pdf, snakemake.output.png)


run_job(snakemake.log[0], main)
