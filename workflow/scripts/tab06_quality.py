"""Snakemake job: tab06, numeric fidelity and image quality per variant and hardware label."""

from reporting.collect import quality
from reporting.tables import write_table
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    out = snakemake.output
    frame = quality(snakemake.input.quality).drop(columns=["source"])
    write_table(frame, out.csv, out.tex, out.md,
                caption="Quality per variant: relative error vs float64, loss deviation vs baseline, SSIM/PSNR")


run_job(snakemake.log[0], main)
