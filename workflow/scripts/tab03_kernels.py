"""Snakemake job: tab03, per kernel class and run: time share, count, SM cycles, instructions, IPC, tensor use."""

from reporting.kernels import class_table, headline
from reporting.tables import write_table
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    out = snakemake.output
    classes = class_table(snakemake.input.summaries)
    classes.to_csv(out.classes, index=False)
    write_table(headline(classes), out.csv, out.tex, out.md,
                caption="Kernels per run: conv and layout-conversion time shares, SM cycles, warp instructions, "
                        "IPC and tensor-pipe utilisation (time-weighted); empty where the profiler does not measure it")


run_job(snakemake.log[0], main)
