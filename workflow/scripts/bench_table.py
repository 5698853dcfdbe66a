"""Snakemake job: the bench table of one hardware label (every run variant against the device's ceilings)."""

import json
from pathlib import Path

from reporting.bench import bench_frame, bench_markdown, recorded_flops
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    inputs, out = snakemake.input, snakemake.output
    rates = json.loads(Path(inputs.rates).read_text())
    frame = bench_frame([Path(p) for p in inputs.train], [Path(p) for p in inputs.sample], rates)
    frame.to_csv(out.csv, index=False)
    first = json.loads(Path(inputs.train[0]).read_text())
    model = recorded_flops(first, Path(inputs.train[0]))["model"]
    Path(out.md).write_text(bench_markdown(frame, snakemake.wildcards.gpu, rates, first["provenance"], model))


run_job(snakemake.log[0], main, snakemake.output)
