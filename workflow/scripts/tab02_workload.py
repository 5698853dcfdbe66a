"""Snakemake job: tab02, the workload (model, diffusion, FLOPs, dataset)."""

from pathlib import Path

from reporting.tables import write_table
from reporting.workload import workload_table
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    out = snakemake.output
    write_table(workload_table(snakemake.config, Path(snakemake.input.dataset) / "manifest.json"), out.csv, out.tex, out.md,
                caption="Workload: Med-DDPM U-Net and diffusion as configured, FLOPs counted by PyTorch")


run_job(snakemake.log[0], main)
