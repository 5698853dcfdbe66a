"""Snakemake job: paper/article.pdf, typeset from the registered outputs and the collected results
(reporting.article)."""

from jobio.job import run_job
from reporting.article import typeset
from reporting.registry import ARTICLE_TABLES

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)

run_job(snakemake.log[0], lambda: typeset(
    ".", snakemake.input.template, snakemake.params.settings, snakemake.output.pdf,
    collected={name: snakemake.input[name] for name in ARTICLE_TABLES},
    peaks=snakemake.input.peaks, references=snakemake.input.references), snakemake.output)
