"""Snakemake job: Nsight Compute's rule results with their estimated speedups (the priority scores) as a table."""

from pathlib import Path

from jobio.job import JobError, run_job
from profiling import ncu, tables
from profiling.errors import ProfilingError

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    try:
        details, raw = Path(snakemake.input.details), Path(snakemake.input.raw)
        text = details.read_text(errors="replace")
        rules = ncu.parse_details(text, source=f"ncu details CSV {details}")
        ncu.check_pages_agree(raw.read_text(errors="replace"), raw, text, details)  # a page cut at a row boundary
    except ProfilingError as error:
        raise JobError(str(error)) from None
    tables.save_frame(rules, snakemake.output.rules)
    print(f"{len(rules)} rule results for {rules['kernel_id'].nunique() if len(rules) else 0} kernels")


run_job(snakemake.log[0], main, snakemake.output)
