"""Snakemake job of the rules synthetic_dataset and synthetic_brats_dataset: derive the raw cases of a synthetic
source from nilearn's MNI152 template and tissue maps (medddpm.workloads: the whole-head pairs of medddpm.synthetic,
the raw BraTS cases of medddpm.synthetic_brats)."""

from pathlib import Path

from jobio.job import run_job
from medddpm.workloads import source_of

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = snakemake.params
    print(source_of(params.source).derive(Path(snakemake.output[0]), params.cases, params.shape, params.seed))


run_job(snakemake.log[0], main)
