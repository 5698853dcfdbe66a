"""Snakemake job: tab03, per kernel class and run: time share, count, SM cycles, instructions, IPC, tensor use."""

from reporting.kernels import RUN_KEYS, headline
from reporting.sources import Sources
from reporting.tables import write_table
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    out = snakemake.output
    classes = Sources.from_job(snakemake).summaries()
    classes = classes[RUN_KEYS + [c for c in classes.columns if c not in RUN_KEYS]]
    classes.sort_values(RUN_KEYS, kind="stable").to_csv(out.classes, index=False)
    write_table(headline(classes), out.csv, out.tex, out.md,
                caption="Kernels per run (measured here and shipped references): conv and layout-conversion time "
                        "shares, SM cycles, warp instructions, IPC and tensor-pipe utilisation (time-weighted); "
                        "empty where the profiler does not measure it")


run_job(snakemake.log[0], main)
