"""Snakemake job: fig08, training time per sample, sampling time per volume and peak memory per variant."""

from reporting.collect import end_to_end
from reporting.figures import plot_end_to_end
from reporting.style import apply_style, save
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    apply_style()
    frame = end_to_end(snakemake.input.train, snakemake.input.sample)
    save(plot_end_to_end(frame, snakemake.params.gpus), snakemake.output.pdf, snakemake.output.png)


run_job(snakemake.log[0], main)
