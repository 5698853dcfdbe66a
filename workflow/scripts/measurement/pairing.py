"""Paired comparisons of two timed steps: the ratio of a reference's step time to a variant's from rounds in which both
ran, back to back, under the same conditions; its confidence interval; when to stop adding rounds; and the verdict.

Why paired rounds: a speed-up computed from two jobs run at different moments compares two machine states as much as
two variants (on a busy 2-core machine the same commit's channels_last came out "within noise", "2.99x slower" and
"3.10x faster"). Within one round the two steps run seconds apart, so a change of load hits both; the rounds' ratios
then vary around the variant's effect, and their median is robust to a round that a burst of load hit on one side.

The interval is distribution-free and exact: the sign-test interval of the median of the per-round log ratios, the
order statistics (k, n + 1 - k) with k the largest rank whose two binomial tails (n, 1/2) stay within 1 - confidence
(e.g. 6 rounds give [min, max] at 96.9 %, 20 rounds the 6th and 15th at 95.9 %). No assumption on the shape of the
noise, which on a loaded machine is far from normal; the same rounds always give the same interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

FASTER, SLOWER, WITHIN, UNMEASURABLE = "faster", "slower", "within noise", "not measurable under this load"
# A narrow interval that lies across an edge of the band: measured, and a difference of about the band's size.
AT_EDGE = "at the band's edge"
# The verdicts that undecided_reason explains.
UNDECIDED = (UNMEASURABLE, AT_EDGE)


def median_interval_ranks(n: int, confidence: float) -> tuple[int, int] | None:
    """The 1-based ranks (k, n + 1 - k) of the order statistics that bound the median with at least `confidence`
    (exact, from the binomial distribution of a sign test); None when n rounds cannot reach it (n = 5 at most
    covers 93.8 %, so 95 % needs 6)."""
    best = None
    for k in range(1, n // 2 + 1):
        if coverage(n, k) >= confidence:
            best = (k, n + 1 - k)
        else:
            break
    return best


def coverage(n: int, k: int) -> float:
    """The exact coverage of the interval between the k-th and the (n + 1 - k)-th of n order statistics."""
    # Imported here: scipy.stats takes most of a second to import, and every figure and table job imports this module
    # (through measurement.verdicts) where most never compute a coverage.
    from scipy.stats import binom

    return float(1 - 2 * binom.cdf(k - 1, n, 0.5))


@dataclass(frozen=True)
class Ratio:
    """reference time / variant time over paired rounds (> 1: the variant is faster), with its interval."""

    rounds: int
    speedup: float
    low: float | None  # None: too few rounds for the confidence asked
    high: float | None
    coverage: float | None

    @property
    def half_width(self) -> float:
        """Half the interval's width on the log scale, as a relative precision (0.03: about +-3 %); inf without one."""
        if self.low is None:
            return math.inf
        return (math.log(self.high) - math.log(self.low)) / 2


def paired_ratio(reference_ms: Sequence[float], variant_ms: Sequence[float], confidence: float) -> Ratio:
    """The median of the per-round ratios reference / variant and its sign-test interval (module docstring)."""
    if len(reference_ms) != len(variant_ms) or not reference_ms:
        raise ValueError(f"paired rounds need as many reference times as variant times, at least one "
                         f"(got {len(reference_ms)} and {len(variant_ms)})")
    logs = sorted(math.log(r / v) for r, v in zip(reference_ms, variant_ms))
    n = len(logs)
    ranks = median_interval_ranks(n, confidence)
    centre = math.exp(statistics.median(logs))
    if ranks is None:
        return Ratio(n, centre, None, None, None)
    k, upper = ranks
    return Ratio(n, centre, math.exp(logs[k - 1]), math.exp(logs[upper - 1]), coverage(n, k))


def halves_disagree(reference_ms: Sequence[float], variant_ms: Sequence[float], confidence: float) -> bool | None:
    """Whether the first and the second half of the rounds give intervals that do not overlap (the variant's effect
    moved while it was measured: the load changed the two sides differently); None when a half is too short for an
    interval at `confidence`."""
    half = len(reference_ms) // 2
    first = paired_ratio(reference_ms[:half], variant_ms[:half], confidence) if half else None
    second = paired_ratio(reference_ms[half:2 * half], variant_ms[half:2 * half], confidence) if half else None
    if first is None or first.low is None or second.low is None:
        return None
    return first.high < second.low or second.high < first.low


def verdict(ratio: Ratio, band: float, precision: float | None = None) -> str:
    """What the interval says, never the point estimate alone: faster where the whole interval lies above the band
    (1 + band, asv's default factor 1.1 for the workflow's default band of 0.10), slower where it lies wholly below
    it (1 / (1 + band)), within noise where it lies wholly inside (the band's edges included). Where it reaches
    across an edge of the band, a difference of the band's size could hide in it: not measurable under this load,
    unless the interval is narrow (half-width within `precision`, where given): then the ratio was measured and lies
    at the band's edge, which no load made. Not measurable where the rounds give no interval. Two runs can only give
    opposite decided verdicts (faster in one, within noise in the other) if their intervals do not overlap, which at
    95 % each happens rarely; more load widens an interval, which turns a verdict into "not measurable", never into
    another direction."""
    if ratio.low is None:
        return UNMEASURABLE
    low_edge, high_edge = 1 / (1 + band), 1 + band
    if ratio.low > high_edge:
        return FASTER
    if ratio.high < low_edge:
        return SLOWER
    if ratio.low >= low_edge and ratio.high <= high_edge:
        return WITHIN
    if precision is not None and ratio.half_width <= precision:
        return AT_EDGE
    return UNMEASURABLE


def undecided_reason(ratio: Ratio, confidence: float, band: float, precision: float | None = None) -> str:
    """Why `verdict` said not measurable, or at the band's edge, in words."""
    if ratio.low is None:
        return f"{ratio.rounds} rounds give no interval at {100 * confidence:g} %"
    # An interval that ends exactly on an edge and goes beyond it is not wholly inside nor wholly beyond: it names
    # that edge too.
    edges = [edge for edge in (1 / (1 + band), 1 + band) if ratio.low <= edge <= ratio.high]
    across = (f"the interval [{ratio.low:.3g}, {ratio.high:.3g}] reaches across the band's edge "
              f"{' and '.join(f'{edge:.3g}' for edge in edges)} (+-{100 * band:g} %)")
    if precision is not None and ratio.half_width <= precision:
        return f"{across}, narrower than +-{100 * precision:g} %: a difference of about the band's size"
    return across


@dataclass(frozen=True)
class StopRule:
    """When a phase's rounds end: after `min_rounds` once every comparison is settled (decided, or its interval's
    half-width within `precision`), or at `max_rounds`, or when the time budget is spent (what was reached is
    recorded either way)."""

    confidence: float
    precision: float
    band: float
    min_rounds: int
    max_rounds: int
    budget_seconds: float

    def settled(self, ratio: Ratio) -> bool:
        """Decided (the interval wholly inside or wholly beyond the band), or narrow enough that more rounds would
        not decide it (half-width within `precision`: the ratio sits on an edge of the band)."""
        return verdict(ratio, self.band) != UNMEASURABLE or ratio.half_width <= self.precision

    def stop(self, ratios: Sequence[Ratio], rounds: int, elapsed_seconds: float) -> str | None:
        """Why the rounds end now ("settled", "max_rounds", "budget"), or None to run another round."""
        if rounds >= self.max_rounds:
            return "max_rounds"
        if rounds >= self.min_rounds and all(self.settled(ratio) for ratio in ratios):
            return "settled"
        if rounds >= self.min_rounds and elapsed_seconds >= self.budget_seconds:
            return "budget"
        return None
