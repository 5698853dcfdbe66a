"""Snakemake job: a hardware label's paired comparisons judged from its groups' rounds (measurement.verdicts)."""

from pathlib import Path

from jobio.job import run_job
from measurement.verdicts import merge_groups
from medddpm.settings import ComparisonSettings, params_dict

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = params_dict(snakemake.params)
    files = list(zip(map(Path, snakemake.input.summaries), map(Path, snakemake.input.rounds)))
    merge_groups(files, params["groups"], ComparisonSettings.from_params(params["comparison"]),
                 Path(snakemake.output.summary), Path(snakemake.output.rounds))


run_job(snakemake.log[0], main, snakemake.output)
