"""Snakemake job: the quality study's runs of one variant, one per seed (trained together): train for the study's
budget, sample the held-out masks from the study's noise, measure the samples against the real images and the paths
against float64."""

from pathlib import Path

from jobio.job import repo_root, run_job
from medddpm.build import ModelSpec
from medddpm.runs import start_job
from medddpm.settings import StudySettings, TrainSettings, from_mapping, params_dict
from medddpm.study import RunFiles, run_study

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = params_dict(snakemake.params)
    run = start_job(params, snakemake.wildcards.variant, repo_root(snakemake.scriptdir), snakemake.input.preflight)
    out = snakemake.output
    # The outputs of every seed in the order of params.seeds (quality_study.smk).
    seeds = [int(seed) for seed in params["seeds"]]
    masks = len(out.volumes) // len(seeds)
    outputs = {seed: RunFiles(Path(out.summary[i]), Path(out.losses[i]), Path(out.slice[i]),
                              [Path(p) for p in out.volumes[i * masks: (i + 1) * masks]])
               for i, seed in enumerate(seeds)}
    run_study(ModelSpec.from_params(params["model"], params["diffusion"]),
              from_mapping(TrainSettings, params["train"] | {"seed": seeds[0]}, "train"),
              StudySettings.from_params(params["study"]), run, Path(snakemake.input.dataset), outputs,
              params["rerun"], dict(params["samplers"]))


run_job(snakemake.log[0], main, snakemake.output)
