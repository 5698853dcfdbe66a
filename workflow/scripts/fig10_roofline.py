"""Snakemake job: fig10, top kernels against each GPU's datasheet ceilings; every run measured here and shipped."""

from pathlib import Path

import yaml

from reporting.paperfigs import plot_roofline
from reporting.sources import Sources
from reporting.style import apply_style, save
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    apply_style()
    sources = Sources.from_job(snakemake)
    peaks = yaml.safe_load(Path(snakemake.input.peaks).read_text())
    save(plot_roofline(sources, peaks), snakemake.output.pdf, snakemake.output.png)


run_job(snakemake.log[0], main)
