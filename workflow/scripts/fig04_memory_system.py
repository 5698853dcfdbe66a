"""Snakemake job: fig04, DRAM traffic and L1/L2 hit rates per kernel class (Nsight Compute); every run measured here and shipped."""

from reporting.paperfigs import plot_memory_system
from reporting.sources import Sources
from reporting.style import apply_style, save
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    apply_style()
    sources = Sources.from_job(snakemake)
    save(plot_memory_system(sources), snakemake.output.pdf, snakemake.output.png)


run_job(snakemake.log[0], main)
