"""Snakemake job: every run of one hardware label's quality study against the baseline's first seed (samples from
the same noise and masks, loss curves)."""

import re
from pathlib import Path

from medddpm.study import compare_runs
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def run_key(path: str) -> tuple[str, int]:
    """(variant, seed) of a path .../study/<variant>/seed<k>/<file>."""
    folder = Path(path).parent
    return folder.parent.name, int(re.fullmatch(r"seed(\d+)", folder.name).group(1))


def main() -> None:
    runs = {run_key(path): Path(path).parent for path in snakemake.input.runs}
    outputs = {run_key(path): Path(path) for path in snakemake.output}
    compare_runs(runs, ("baseline", snakemake.params.reference_seed), snakemake.params.ssim_kernel, outputs)


run_job(snakemake.log[0], main, snakemake.output)
