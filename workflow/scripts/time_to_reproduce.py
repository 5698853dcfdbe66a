"""Snakemake job: how long the finished study took per part, and would take on N GPUs of one node
(reporting.reproduce_time), from Snakemake's record of the jobs of this folder."""

from pathlib import Path

from jobio.job import run_job
from reporting.reproduce_time import markdown, time_to_reproduce

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    result = time_to_reproduce(".", set(snakemake.params.gpu_rules), tuple(snakemake.params.node_gpus))
    text = markdown(result, snakemake.params.title)
    Path(snakemake.output.table).write_text(text)
    jobs = result["jobs"].assign(outputs=result["jobs"]["outputs"].map(";".join)).drop(columns="inputs")
    jobs.to_csv(snakemake.output.jobs, index=False)
    print(text)


run_job(snakemake.log[0], main, snakemake.output)
