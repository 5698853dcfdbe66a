"""The statistics of the quality claim (data/paper_claims.yaml, claim `quality`): a variant against the baseline,
paired by seed, by an equivalence test.

The study trains every variant from every seed with the same initial weights, data order and sampling noise, so the
difference of one metric between a variant and the baseline at the same seed removes what the seed does to both:
d_k = m(variant, k) - m(baseline, k), over the seeds both trained. "Unchanged" is a claim of equivalence, which a
test of difference cannot support (a small study finds no difference for want of power), so the test is TOST (two
one-sided t-tests at `alpha`), whose decision is the two-sided 1 - 2 alpha t-interval of mean(d) (90 % at alpha
0.05) lying within [-margin, margin]. The margin is what "no change in practice" means here: a multiple of the
baseline's seed-to-seed standard deviation of the metric, i.e. a mean effect smaller than what training again with
another seed moves the metric by.

Outcomes, edges decided once (outcome): equivalent when the interval lies within the closed band [-margin, margin]
(touching an edge counts as inside: TOST at p <= alpha); different when it lies entirely outside the band (its lower
end above +margin or its upper end below -margin, strictly: an interval that touches the band is not entirely
outside); inconclusive when it straddles an edge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

EQUIVALENT = "equivalent"
DIFFERENT = "different"
INCONCLUSIVE = "inconclusive"


def by_seed(study: pd.DataFrame, variant: str, column: str) -> pd.Series:
    """`column` of `variant`'s runs indexed by seed (runs without the value left out)."""
    rows = study[study["variant"] == variant]
    values = pd.Series(rows[column].to_numpy(dtype=float), index=rows["seed"].astype(int).to_numpy())
    return values.dropna().sort_index()


def paired_differences(study: pd.DataFrame, variant: str, column: str, reference: str = "baseline") -> pd.Series:
    """d_k = column(variant, k) - column(reference, k) over the seeds k where both have the value: a seed only one
    of them trained pairs with nothing and is left out."""
    mine, theirs = by_seed(study, variant, column), by_seed(study, reference, column)
    seeds = mine.index.intersection(theirs.index)
    return (mine[seeds] - theirs[seeds]).sort_index()


def seed_spread(study: pd.DataFrame, column: str, reference: str = "baseline") -> float | None:
    """The reference's seed-to-seed standard deviation of `column` (sample SD, ddof = 1, over its seeds); None with
    fewer than two seeds."""
    values = by_seed(study, reference, column)
    return float(values.std(ddof=1)) if len(values) >= 2 else None


def interval(differences, alpha: float) -> tuple[float, float, float]:
    """(mean, low, high): the two-sided 1 - 2 alpha t-interval of the mean of `differences` (Student's t with n - 1
    degrees of freedom); NaN ends with fewer than two differences."""
    d = np.asarray(differences, dtype=float)
    mean = float(d.mean()) if len(d) else math.nan
    if len(d) < 2:
        return mean, math.nan, math.nan
    # Imported here: scipy.stats takes most of a second to import, and the Snakefile imports this module (through the
    # run summary) in every snakemake command, a dry run included.
    from scipy import stats

    half = float(stats.t.ppf(1 - alpha, len(d) - 1)) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return mean, mean - half, mean + half


def outcome(low: float, high: float, margin: float) -> str:
    """The outcome of an interval [low, high] against +-margin (edges: the module's docstring)."""
    if -margin <= low and high <= margin:
        return EQUIVALENT
    if low > margin or high < -margin:
        return DIFFERENT
    return INCONCLUSIVE


@dataclass(frozen=True)
class Comparison:
    """One variant against the reference, paired by seed: the seeds paired, the mean difference and its interval,
    the margin it was judged by and the outcome (None below `min_seeds` pairs or without a margin)."""

    variant: str
    seeds: tuple[int, ...]
    mean: float
    low: float
    high: float
    margin: float | None
    outcome: str | None

    @property
    def n(self) -> int:
        return len(self.seeds)


def compare(study: pd.DataFrame, variant: str, column: str, margin: float | None, alpha: float, min_seeds: int,
            reference: str = "baseline") -> Comparison:
    """`variant` against `reference` on `column`: judged only with at least `min_seeds` paired seeds and a margin
    above zero (a zero margin leaves no difference to call equivalent: the caller says so)."""
    d = paired_differences(study, variant, column, reference)
    mean, low, high = interval(d, alpha)
    judged = len(d) >= max(min_seeds, 2) and margin is not None and margin > 0
    return Comparison(variant, tuple(int(s) for s in d.index), mean, low, high, margin,
                      outcome(low, high, margin) if judged else None)
