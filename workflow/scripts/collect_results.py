"""Snakemake job: every result measured here and every shipped reference set, read once into the tables the
figures and tables draw on (reporting.results)."""

from jobio.job import run_job
from reporting.results import collect, write_bundle

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    tables = collect(snakemake.input.measured, snakemake.input.shipped, snakemake.params.gpus,
                     references=snakemake.input.references)
    write_bundle(tables, dict(snakemake.output.items()))
    print({name: len(frame) for name, frame in tables.items()})


run_job(snakemake.log[0], main, snakemake.output)
