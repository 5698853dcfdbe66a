"""Snakemake job: DDPM sampling of the held-out masks with the EMA weights of one (hardware label, variant)."""

from pathlib import Path

from medddpm.jobs import run_sampling
from medddpm.runs import start_run
from ruleio import repo_root, run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    run = start_run(snakemake.config, snakemake.wildcards.gpu, snakemake.wildcards.variant,
                    repo_root(snakemake.scriptdir))
    out = snakemake.output
    run_sampling(snakemake.config, run, Path(snakemake.input.checkpoint), Path(snakemake.input.dataset),
                 Path(out.summary), Path(out.steps), [Path(p) for p in out.volumes])


run_job(snakemake.log[0], main)
