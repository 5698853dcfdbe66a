"""Snakemake job: paper/article.pdf, typeset from the registered outputs (reporting.article)."""

from reporting.article import typeset
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)

run_job(snakemake.log[0], lambda: typeset(".", snakemake.input.template, snakemake.params.settings,
                                          snakemake.output.pdf), snakemake.output)
