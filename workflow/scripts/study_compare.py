"""Snakemake job: one run of a hardware label's quality study against the baseline's first seed (samples from the
same noise and masks, loss curves)."""

from pathlib import Path

from medddpm.study import compare_runs
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    run = (snakemake.wildcards.variant, int(snakemake.wildcards.seed))
    reference = ("baseline", snakemake.params.reference_seed)
    folders = {run: Path(snakemake.input.run).parent, reference: Path(snakemake.input.reference).parent}
    compare_runs(folders, reference, snakemake.params.ssim_kernel, {run: Path(snakemake.output.comparison)})


run_job(snakemake.log[0], main, snakemake.output)
