"""Snakemake job: fig05, warp stall reasons and achieved occupancy, time-weighted (Nsight Compute); every run measured here and shipped."""

from reporting.paperfigs import plot_warp_states
from reporting.sources import Sources
from reporting.style import apply_style, save
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    apply_style()
    sources = Sources.from_job(snakemake)
    save(plot_warp_states(sources), snakemake.output.pdf, snakemake.output.png)


run_job(snakemake.log[0], main)
