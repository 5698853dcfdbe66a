"""Snakemake job: derive synthetic raw BraTS 2021 cases from the MNI152 tissue maps (medddpm.synthetic_brats)."""

from pathlib import Path

from medddpm.synthetic_brats import raw_shape, write_synthetic_brats
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = snakemake.params
    files = write_synthetic_brats(Path(snakemake.output[0]), params.cases, tuple(params.shape), params.seed)
    print(f"wrote {len(files)} files: {params.cases} raw BraTS cases of shape {raw_shape(params.shape)} for the "
          f"prepared {params.shape}, seed {params.seed}")


run_job(snakemake.log[0], main)
