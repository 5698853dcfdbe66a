"""Snakemake job: tidy per-kernel table, per-class summary (and ncu's rule results) of one profile."""

from pathlib import Path

import pandas as pd

from profiling import ncu, nsys, tables, torchprof
from profiling.errors import ProfilingError
from ruleio import JobError, run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def kernels_of(tool: str, inputs) -> pd.DataFrame:
    if tool == "torch":
        return tables.from_torch(torchprof.trace_rows(inputs.trace))
    if tool == "ncu":
        return tables.from_ncu(ncu.parse_raw(Path(inputs.raw).read_text()))
    return tables.from_nsys(nsys.parse_kern_sum(inputs.kern_sum))


def main() -> None:
    tool, phase, out = snakemake.params.tool, snakemake.wildcards.phase, snakemake.output
    try:
        kernels = kernels_of(tool, snakemake.input)
        if kernels.empty:
            raise ProfilingError(f"{tool} profile of the {phase} step holds no kernels; fix: see the profile job's log")
        gpu_rows = kernels[kernels["device"] == "gpu"]
        if phase == "train" and len(gpu_rows):
            ncu.validate_kernels(gpu_rows)  # the backward pass must be in a training-step profile
    except ProfilingError as error:
        raise JobError(str(error)) from None
    tables.save_frame(kernels, out.kernels)
    tables.save_frame(tables.summarise(kernels), out.summary)
    print(f"{len(kernels)} rows from {tool}; classes: {kernels['kernel_class'].value_counts().to_dict()}")


run_job(snakemake.log[0], main)
