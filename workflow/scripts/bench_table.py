"""Snakemake job: the bench table of one hardware label (every run variant against the device's ceilings)."""

import functools
import json
from pathlib import Path

from measurement.bench import bench_frame, bench_markdown
from medddpm.build import unet_config
from medddpm.flops import unet_flops
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    inputs, out = snakemake.input, snakemake.output
    unet = unet_config(snakemake.params.model)

    @functools.cache
    def counted(shape: tuple, checkpointing: str) -> dict:
        return unet_flops(unet, shape, checkpointing)

    rates = json.loads(Path(inputs.rates).read_text())
    frame = bench_frame([Path(p) for p in inputs.train], [Path(p) for p in inputs.sample], rates,
                        lambda shape, checkpointing: counted(tuple(shape), checkpointing))
    frame.to_csv(out.csv, index=False)
    first = json.loads(Path(inputs.train[0]).read_text())
    model = counted(tuple(first["volume_shape"]), "none")
    Path(out.md).write_text(bench_markdown(frame, snakemake.wildcards.gpu, rates, first["provenance"], model))


run_job(snakemake.log[0], main, snakemake.output)
