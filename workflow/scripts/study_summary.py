"""Snakemake job: one hardware label's quality study as a Markdown summary (the runs' numbers and the quality
claim's verdict by the rule of data/paper_claims.yaml), which the target `quality_study` prints."""

from pathlib import Path

from jobio.errors import writing
from jobio.job import run_job
from reporting.study_markdown import markdown_of_files

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)


def main() -> None:
    text = markdown_of_files(snakemake.input.files, snakemake.wildcards.gpu, snakemake.input.claims)
    with writing(snakemake.output[0]):
        Path(snakemake.output[0]).write_text(text)


run_job(snakemake.log[0], main, snakemake.output)
