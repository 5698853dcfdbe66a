"""Snakemake job: every run of a hardware label's quality study against the baseline's run of the same seed (the
baseline's own runs against its first seed): samples from the same noise and masks, loss curves."""

from pathlib import Path

from jobio.job import run_job
from medddpm.study import compare_runs

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    # params.runs and output.comparisons are in the same order (quality_study.smk: study_runs()).
    runs = [(variant, int(seed)) for variant, seed in snakemake.params.runs]
    outputs = {run: Path(path) for run, path in zip(runs, snakemake.output.comparisons, strict=True)}
    folders = {run: path.parent for run, path in outputs.items()}
    compare_runs(folders, snakemake.params.first_seed, snakemake.params.ssim_kernel, outputs)


run_job(snakemake.log[0], main, snakemake.output)
