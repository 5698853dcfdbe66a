"""Snakemake job: validate a raw dataset and prepare it with its workload's reader (medddpm.workloads): whole-head
(medddpm.prepare: scaled, resized, one-hot, split) or BraTS (medddpm.brats: cropped, rescaled, relabelled, one-hot,
split)."""

from pathlib import Path

from jobio.job import run_job
from medddpm.prepare import prepare_dataset
from medddpm.workloads import read_raw

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params, raw = snakemake.params, Path(snakemake.input.raw)
    listed = getattr(snakemake.input, "case_list", [])  # empty, or the one case-list file
    listed = [listed] if isinstance(listed, str) else list(listed)
    cases, reader = read_raw(raw, params.source, Path(listed[0]) if listed else None)
    manifest = prepare_dataset(cases, Path(snakemake.output.prepared), params.shape, params.heldout, params.seed,
                               reader)
    print(f"prepared {manifest['counts']} at shape {manifest['shape']} from {raw} ({manifest['workload']}"
          f"{', ' + manifest['layout'] + ' layout' if 'layout' in manifest else ''})")


run_job(snakemake.log[0], main)
