"""Snakemake job: the fast samplers of one (hardware label, variant), timed (medddpm.fast_sampling)."""

from pathlib import Path

from jobio.job import repo_root, run_job
from medddpm.build import ModelSpec
from medddpm.fast_sampling import run_fast_sampling
from medddpm.runs import start_job
from medddpm.settings import ComparisonSettings, SampleSettings, from_mapping, params_dict

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = params_dict(snakemake.params)
    run = start_job(params, snakemake.wildcards.variant, repo_root(snakemake.scriptdir), snakemake.input.preflight)
    run_fast_sampling(ModelSpec.from_params(params["model"], params["diffusion"]),
                      from_mapping(SampleSettings, params["sample"], "sample"), dict(params["samplers"]),
                      params["chains"], params["batch_chains"], list(params["batch_sizes"]),
                      ComparisonSettings.from_params(params["comparison"]), run,
                      Path(snakemake.input.checkpoint), Path(snakemake.input.dataset), Path(snakemake.output.summary))


run_job(snakemake.log[0], main, snakemake.output)
