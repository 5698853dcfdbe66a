"""Snakemake job: tidy per-kernel table, per-class summary (and ncu's rule results) of one profile."""

import json
from pathlib import Path

import pandas as pd

from profiling import ncu, nsys, tables, torchprof
from profiling.errors import ProfilingError
from jobio.job import JobError, run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def kernels_of(tool: str, inputs) -> pd.DataFrame:
    if tool == "torch":
        return tables.from_torch(torchprof.trace_rows(inputs.trace))
    if tool == "ncu":
        return ncu.checked_kernels(Path(inputs.raw), Path(inputs.tool_log), Path(inputs.details))
    return tables.from_nsys(nsys.parse_kern_sum(inputs.kern_sum))


def read_conditions(path: Path) -> dict:
    """The profiled step's conditions (profiling.target), refused in one line where the file is not one."""
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ProfilingError(f"{path}: not a readable conditions file of a profiled step ({error}); fix: run the "
                             "profile job again") from None
    if not isinstance(record, dict) or "other_load_cores" not in record:
        raise ProfilingError(f"{path}: holds no other_load_cores, which every conditions file of a profiled step "
                             "holds (written by another version?); fix: run the profile job again")
    return record


def main() -> None:
    tool, phase, out = snakemake.params.tool, snakemake.wildcards.phase, snakemake.output
    try:
        kernels = kernels_of(tool, snakemake.input)
        if kernels.empty:
            raise ProfilingError(f"{tool} profile of the {phase} step holds no kernels; fix: see the profile job's log")
        gpu_rows = kernels[kernels["device"] == "gpu"]
        if phase == "train" and len(gpu_rows):
            ncu.validate_kernels(gpu_rows)  # the backward pass must be in a training-step profile
        summary = tables.with_conditions(tables.summarise(kernels), read_conditions(Path(snakemake.input.conditions)))
    except ProfilingError as error:
        raise JobError(str(error)) from None
    tables.save_frame(kernels, out.kernels)
    tables.save_frame(summary, out.summary)
    print(f"{len(kernels)} rows from {tool}; classes: {kernels['kernel_class'].value_counts().to_dict()}")


run_job(snakemake.log[0], main, snakemake.output)
