"""Snakemake job: one run of the quality study (a variant and a seed): train for the study's budget, sample the
held-out masks from the study's noise, measure the samples against the real images and the paths against float64."""

from pathlib import Path

from medddpm.build import Workload
from medddpm.runs import start_job
from medddpm.settings import StudySettings, TrainSettings, from_mapping, params_dict
from medddpm.study import run_study
from ruleio import repo_root, run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = params_dict(snakemake.params)
    run = start_job(params, snakemake.wildcards.variant, repo_root(snakemake.scriptdir))
    out = snakemake.output
    run_study(Workload.from_params(params["model"], params["diffusion"]),
              from_mapping(TrainSettings, params["train"], "train"), StudySettings.from_params(params["study"]), run,
              Path(snakemake.input.dataset), Path(out.summary), Path(out.losses), Path(out.slice),
              [Path(p) for p in out.volumes])


run_job(snakemake.log[0], main, snakemake.output)
