"""Snakemake job: train one (hardware label, variant) for the configured warm-up and measured steps."""

from pathlib import Path

from jobio.job import repo_root, run_job
from medddpm.build import ModelSpec
from medddpm.jobs import run_training
from medddpm.runs import start_job
from medddpm.settings import TrainSettings, from_mapping, params_dict

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = params_dict(snakemake.params)
    run = start_job(params, snakemake.wildcards.variant, repo_root(snakemake.scriptdir), snakemake.input.preflight)
    out = snakemake.output
    run_training(ModelSpec.from_params(params["model"], params["diffusion"]),
                 from_mapping(TrainSettings, params["train"], "train"), run, Path(snakemake.input.dataset),
                 Path(out.summary), Path(out.steps), Path(out.checkpoint))


run_job(snakemake.log[0], main, snakemake.output)
