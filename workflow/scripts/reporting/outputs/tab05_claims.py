"""tab05: the claims of the paper's abstract, their published values, the values measured here and a verdict; the
rule behind each verdict is a numbered note under the table."""

from __future__ import annotations

from ..claims import claims_table, load_claims
from ..render import Table

CAPTION = ("Claims of the abstract of arXiv 2606.19365: the published value (from data/paper_claims.yaml), the value "
           "measured for each hardware label, and the verdict (reproduced; same direction, other magnitude; "
           "contradicted; inconclusive, for the quality claim's equivalence test; not measurable here) by the rule "
           "in the numbered note, over the paper's own variants "
           "(baseline and its optimizations; variants beyond the paper are never the evidence), and from Nsight "
           "Compute where the claim is about its metrics")


def build(job) -> Table:
    table, notes = claims_table(load_claims(job.files["claims"]), job.results)
    return Table(table, CAPTION, notes=notes)


# The article's table shows these columns, with these headers (the CSV keeps them all).
ARTICLE_COLUMNS = [("claim", "claim"), ("published", "published (A100)"), ("gpu", "label"),
                   ("measured", "measured"), ("verdict", "verdict"), ("rule", "rule")]
ARTICLE_SHOWN_ONCE = ("claim", "published")  # a claim and its published value once, above its labels' rows
