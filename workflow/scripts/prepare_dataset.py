"""Snakemake job: validate a raw whole-head dataset and prepare it (medddpm.prepare): scaled, resized, one-hot, split."""

from pathlib import Path

from medddpm.prepare import prepare_dataset, read_wholehead_pairs
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params = snakemake.params
    pairs = read_wholehead_pairs(Path(snakemake.input.raw))
    manifest = prepare_dataset(pairs, Path(snakemake.output.prepared), params.shape, params.heldout, params.seed)
    print(f"prepared {manifest['counts']} at shape {manifest['shape']} from {snakemake.input.raw}")


run_job(snakemake.log[0], main)
