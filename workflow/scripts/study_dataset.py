"""Snakemake job: the quality study's own prepared dataset, at the study's shape and number of cases: synthetic
cases derived at that shape (synthetic sources), or the configured folder prepared at that shape."""

import tempfile
from pathlib import Path

from jobio.job import run_job
from medddpm.prepare import prepare_dataset
from medddpm.workloads import read_raw, source_of

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    params, out = snakemake.params, Path(snakemake.output.prepared)
    settings, shape = params.source, tuple(params.shape)
    source = source_of(settings["source"])
    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        raw = Path(params.root)
        if source.synthetic:
            raw = Path(scratch) / source.name
            source.derive(raw, params.cases, shape, params.seed)
        cases, reader = read_raw(raw, settings)
        manifest = prepare_dataset(cases, out, shape, params.heldout, params.seed, reader)
    print(f"prepared {manifest['counts']} at shape {manifest['shape']} from {source.name}")


run_job(snakemake.log[0], main, snakemake.output)
