"""Snakemake job: DDPM sampling of the held-out masks with the EMA weights of one (hardware label, variant)."""

from pathlib import Path

from jobio.job import repo_root, run_job
from medddpm.build import ModelSpec
from medddpm.jobs import run_sampling
from medddpm.runs import start_job
from medddpm.settings import SampleSettings, from_mapping, params_dict

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = params_dict(snakemake.params)
    run = start_job(params, snakemake.wildcards.variant, repo_root(snakemake.scriptdir), snakemake.input.preflight)
    out = snakemake.output
    run_sampling(ModelSpec.from_params(params["model"], params["diffusion"]),
                 from_mapping(SampleSettings, params["sample"], "sample"), run, Path(snakemake.input.checkpoint),
                 Path(snakemake.input.dataset), Path(out.summary), Path(out.steps), [Path(p) for p in out.volumes])


run_job(snakemake.log[0], main, snakemake.output)
