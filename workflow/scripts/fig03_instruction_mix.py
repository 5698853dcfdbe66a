"""Snakemake job: fig03, executed warp instructions by kind (Nsight Compute) per variant; every run measured here and shipped."""

from reporting.paperfigs import plot_instruction_mix
from reporting.sources import Sources
from reporting.style import apply_style, save
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    apply_style()
    sources = Sources.from_job(snakemake)
    save(plot_instruction_mix(sources), snakemake.output.pdf, snakemake.output.png)


run_job(snakemake.log[0], main)
