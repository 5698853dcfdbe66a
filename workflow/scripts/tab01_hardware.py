"""Snakemake job: tab01, each device measured here or shipped, from the runs' provenance."""

from reporting.claims import hardware_table
from reporting.sources import Sources
from reporting.tables import write_table
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)

CAPTION = (
    "Hardware of every run: device, SMs, memory, driver, CUDA, cuDNN, torch (from each run's provenance), and"
    " whether it was measured here or shipped with the workflow"
)


def main() -> None:
    sources = Sources.from_job(snakemake)
    out = snakemake.output
    write_table(hardware_table(sources), out.csv, out.tex, out.md, caption=CAPTION)


run_job(snakemake.log[0], main)
