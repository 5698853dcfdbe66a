"""Snakemake job: tab04, per variant and GPU: training and sampling cost, speed-up, and Nsight Compute ratios."""

from reporting.claims import optimization_table
from reporting.sources import Sources
from reporting.tables import write_table
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)

CAPTION = (
    "Optimization impact per variant and hardware label: training time per sample and speed-up vs baseline, "
    "sampling step time, peak training memory; SM cycles, warp instructions and IPC relative to baseline and "
    "tensor-pipe utilisation (%) from the Nsight Compute training step, empty where not measured"
)


def main() -> None:
    sources = Sources.from_job(snakemake)
    out = snakemake.output
    write_table(optimization_table(sources), out.csv, out.tex, out.md, caption=CAPTION)


run_job(snakemake.log[0], main)
