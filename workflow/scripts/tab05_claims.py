"""Snakemake job: tab05, the paper's abstract claims, published values, measured values and verdicts."""

from reporting.claims import claims_table, load_claims
from reporting.sources import Sources
from reporting.tables import write_table
from ruleio import run_job

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)

CAPTION = (
    "Claims of the abstract of arXiv 2606.19365: the published value (from data/paper_claims.yaml), the value"
    " measured for each hardware label, and the verdict by the rule stated per claim"
)


def main() -> None:
    sources = Sources.from_job(snakemake)
    out = snakemake.output
    table = claims_table(load_claims(snakemake.input.claims), sources)
    write_table(table, out.csv, out.tex, out.md, caption=CAPTION)


run_job(snakemake.log[0], main)
