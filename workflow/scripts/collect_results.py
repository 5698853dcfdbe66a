"""Snakemake job: every result measured here and every shipped reference set, read once into the tables the
figures and tables draw on (reporting.results)."""

from medddpm.prepare import heldout_images
from reporting.results import collect, write_bundle
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = snakemake.params
    real = heldout_images(snakemake.input.dataset)[:1]
    tables = collect(snakemake.input.measured, snakemake.input.shipped, params.gpus,
                     {gpu: real[0] for gpu in params.gpus} if real else {}, snakemake.input.references)
    write_bundle(tables, dict(snakemake.output.items()))
    print({name: len(frame) for name, frame in tables.items()})


run_job(snakemake.log[0], main, snakemake.output)
