"""Snakemake job: the bench table of one hardware label (every run variant against the device's ceilings)."""

from pathlib import Path

from jobio.job import run_job
from reporting.bench_files import write_bench

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    inputs, out = snakemake.input, snakemake.output
    write_bench(snakemake.wildcards.gpu, [Path(p) for p in inputs.train], [Path(p) for p in inputs.sample],
                Path(inputs.rates), Path(out.csv), Path(out.md), [Path(p) for p in inputs.comparison])


run_job(snakemake.log[0], main, snakemake.output)
