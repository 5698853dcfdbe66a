"""Snakemake job: the quality study's own prepared dataset, at the study's shape and number of cases: synthetic
cases derived at that shape (synthetic sources), or the configured folder prepared at that shape."""

import tempfile
from pathlib import Path

from medddpm.brats import BratsReader, read_brats_cases
from medddpm.prepare import WholeHeadReader, prepare_dataset, read_wholehead_cases
from medddpm.synthetic import write_synthetic_dataset
from medddpm.synthetic_brats import write_synthetic_brats
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params, out = snakemake.params, Path(snakemake.output.prepared)
    source, shape = params.source, tuple(params.shape)
    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        raw = Path(params.root)
        if source["source"] == "synthetic":
            raw = Path(scratch) / "synthetic"
            write_synthetic_dataset(raw, params.cases, shape, params.seed)
        elif source["source"] == "synthetic_brats":
            raw = Path(scratch) / "synthetic_brats"
            write_synthetic_brats(raw, params.cases, shape, params.seed)
        if source["source"] in ("brats", "synthetic_brats"):
            layout, cases = read_brats_cases(raw, source["layout"], None)
            reader = BratsReader(layout)
        else:
            cases, reader = read_wholehead_cases(raw), WholeHeadReader(source["scaling"])
        manifest = prepare_dataset(cases, out, shape, params.heldout, params.seed, reader)
    print(f"prepared {manifest['counts']} at shape {manifest['shape']} from {source['source']}")


run_job(snakemake.log[0], main, snakemake.output)
