"""Snakemake job: validate a raw dataset and prepare it: whole-head (medddpm.prepare: scaled, resized, one-hot,
split) or BraTS (medddpm.brats: cropped, rescaled, relabelled, one-hot, split)."""

from pathlib import Path

from medddpm.brats import BratsReader, read_brats_cases
from medddpm.prepare import WholeHeadReader, prepare_dataset, read_wholehead_cases
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params, raw = snakemake.params, Path(snakemake.input.raw)
    source = params.source
    if source["source"] in ("brats", "synthetic_brats"):
        listed = getattr(snakemake.input, "case_list", [])  # empty, or the one case-list file
        listed = [listed] if isinstance(listed, str) else list(listed)
        layout, cases = read_brats_cases(raw, source["layout"], Path(listed[0]) if listed else None)
        reader = BratsReader(layout)
    else:
        cases, reader = read_wholehead_cases(raw), WholeHeadReader(source["scaling"])
    manifest = prepare_dataset(cases, Path(snakemake.output.prepared), params.shape, params.heldout, params.seed,
                               reader)
    print(f"prepared {manifest['counts']} at shape {manifest['shape']} from {raw} ({manifest['workload']}"
          f"{', ' + manifest['layout'] + ' layout' if 'layout' in manifest else ''})")


run_job(snakemake.log[0], main)
