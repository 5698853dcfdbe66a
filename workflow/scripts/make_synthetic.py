"""Snakemake job: derive the synthetic whole-head dataset from the MNI152 template and tissue maps (medddpm.synthetic)."""

from pathlib import Path

from medddpm.synthetic import write_synthetic_dataset
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = snakemake.params
    files = write_synthetic_dataset(Path(snakemake.output[0]), params.cases, tuple(params.shape), params.seed)
    print(f"wrote {len(files)} files: {params.cases} cases of shape {params.shape}, seed {params.seed}")


run_job(snakemake.log[0], main)
