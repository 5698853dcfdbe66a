"""Snakemake job: train one (hardware label, variant) for the configured warm-up and measured steps."""

from pathlib import Path

from medddpm.jobs import run_training
from medddpm.runs import start_run
from ruleio import repo_root, run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    run = start_run(snakemake.config, snakemake.wildcards.gpu, snakemake.wildcards.variant,
                    repo_root(snakemake.scriptdir))
    out = snakemake.output
    run_training(snakemake.config, run, Path(snakemake.input.dataset), Path(out.summary), Path(out.steps),
                 Path(out.checkpoint))


run_job(snakemake.log[0], main)
