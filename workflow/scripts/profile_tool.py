"""Snakemake job of the rules profile_{tool} (torch, ncu, nsys): profile one training or sampling step of one
(hardware label, variant) with that tool."""

from pathlib import Path

from jobio.job import JobError, repo_root, run_job
from measurement import gpus
from medddpm.settings import params_dict
from profiling.errors import ProfilingError
from profiling.runner import profile_ncu, profile_nsys, profile_torch
from profiling.target import RANGE

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    wildcards, out = snakemake.wildcards, snakemake.output
    scripts = Path(snakemake.scriptdir)
    # The profiled program gets what this job depends on (the workload's params), not the whole config.
    workload = {key: value for key, value in params_dict(snakemake.params).items() if key not in ("tool", "settings")}
    spec = {"params": workload, "variant": wildcards.variant, "phase": wildcards.phase,
            "dataset": snakemake.input.dataset, "preflight": snakemake.input.preflight,
            "repo": str(repo_root(snakemake.scriptdir)), "nvtx_range": RANGE}
    log = Path(snakemake.log.tool)  # the profiler's own output, next to this job's log
    log.unlink(missing_ok=True)
    device = snakemake.params.device
    if snakemake.params.tool != "torch" and device["device"] == "cuda" and not device["emulate_gpus_on_cpu"]:
        # The profiler and the profiled program it starts inherit this job's GPU (measurement.gpus).
        gpus.hold(f"label {wildcards.gpu}, {wildcards.variant}/{wildcards.phase} under {snakemake.params.tool}")
    try:
        if snakemake.params.tool == "torch":
            profile_torch(spec, Path(out.trace), log, Path(out.conditions))
        elif snakemake.params.tool == "ncu":
            profile_ncu(spec, scripts, snakemake.params.settings, Path(out.report), Path(out.raw), Path(out.details),
                        log, Path(out.conditions))
        else:
            profile_nsys(spec, scripts, snakemake.params.settings, Path(out.report), Path(out.kern_sum), log,
                         Path(out.conditions))
    except ProfilingError as error:
        raise JobError(f"{error} (tool output: {log})") from None
    print(f"{snakemake.params.tool} profile written; the profiler's output is in {log}")


run_job(snakemake.log.job, main, snakemake.output)
