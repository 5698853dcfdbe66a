"""Snakemake job: one group of a hardware label's paired comparison, timed (medddpm.comparison.time_group)."""

from pathlib import Path

from medddpm.build import ModelSpec
from medddpm.comparison import time_group
from medddpm.runs import start_run
from medddpm.settings import ComparisonSettings, DeviceSpec, SampleSettings, TrainSettings, from_mapping, params_dict
from medddpm.switches import Variant
from jobio.job import repo_root, run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = params_dict(snakemake.params)
    spec = from_mapping(DeviceSpec, params["device"], "device")
    repo = repo_root(snakemake.scriptdir)
    runs = {name: start_run(spec, Variant.from_config(name, switches), repo, params, snakemake.input.preflight)
            for name, switches in params["variants"].items()}
    out = snakemake.output
    time_group(int(snakemake.wildcards.group) - 1, list(params["variants"]),
               ModelSpec.from_params(params["model"], params["diffusion"]),
               from_mapping(TrainSettings, params["train"], "train"),
               from_mapping(SampleSettings, params["sample"], "sample"),
               ComparisonSettings.from_params(params["comparison"]), runs, Path(snakemake.input.dataset),
               Path(out.summary), Path(out.rounds), count=params["groups"])


run_job(snakemake.log[0], main, snakemake.output)
