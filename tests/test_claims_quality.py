"""The quality claim's rule (data/paper_claims.yaml, claim `quality`; reporting/equivalence.py and
reporting.claims.quality_judgement) on small study tables built here: paired differences by seed, the TOST interval
against a margin of the baseline's seed-to-seed SD, each outcome at its edges, the claim's verdict from the outcomes,
the not-measurable reasons in their order, the measured text, and the statistics against scipy's own t-tests."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from reporting import claims, equivalence

REPO = Path(__file__).resolve().parents[1]
CLAIMS = yaml.safe_load((REPO / "data" / "paper_claims.yaml").read_text())
CLAIM = next(c for c in CLAIMS["claims"] if c["id"] == "quality")
OPTIMIZED = CLAIMS["optimized_variants"]
SWITCHES = {"baseline": {"cudnn_tf32": False, "channels_last": False},
            "tf32": {"cudnn_tf32": True, "channels_last": False},
            "channels_last": {"cudnn_tf32": False, "channels_last": True},
            "tf32_channels_last": {"cudnn_tf32": True, "channels_last": True},
            "bf16": {"cudnn_tf32": True, "channels_last": False, "autocast": "bfloat16"}}
# The baseline's distances over seeds 0-4: sample SD 0.158, the margin at margin_factor 1.
BASE = [0.3, 0.4, 0.5, 0.6, 0.7]
EQUIVALENT = equivalence.EQUIVALENT


def study(ssim: float = 0.6, idle=(), **variants) -> pd.DataFrame:
    """Study rows (gpu g): `variant={seed: distance}` or `variant=[distance at seed 0, 1, ...]` (None: no value)."""
    effective = {"cudnn_tf32": True, "channels_last": True, "autocast": True} | {s: False for s in idle}
    rows = []
    for variant, values in variants.items():
        by_seed = values if isinstance(values, dict) else dict(enumerate(values))
        for seed, distance in by_seed.items():
            rows.append({"gpu": "g", "variant": variant, "seed": seed,
                         "wasserstein_vs_real": np.nan if distance is None else distance, "ssim_vs_real": ssim,
                         "optimizer_steps": 1200, "volume_shape": "32x32x32",
                         "switches": json.dumps(SWITCHES[variant]), "switches_effective": json.dumps(effective)})
    return pd.DataFrame(rows)


def shifted(differences) -> list[float]:
    """A variant whose paired differences from BASE are `differences`."""
    return [b + d for b, d in zip(BASE, differences)]


def judge(table: pd.DataFrame, claim: dict = CLAIM):
    return claims.quality_judgement(claim, "g", table, OPTIMIZED)


def verdict(table: pd.DataFrame, claim: dict = CLAIM) -> tuple[str, str]:
    return claims.quality_verdict(claim, "g", table, OPTIMIZED)


SMALL = [0.01, -0.01, 0.02, -0.02, 0.0]  # mean 0, tight: inside +-0.158 (the SD of BASE)


# -- the statistics ------------------------------------------------------------------------------------------------
def test_the_margin_is_the_baseline_seed_sd_and_differences_pair_by_seed():
    table = study(baseline=BASE, tf32=shifted(SMALL))
    assert equivalence.seed_spread(table, "wasserstein_vs_real") == pytest.approx(np.std(BASE, ddof=1))
    d = equivalence.paired_differences(table, "tf32", "wasserstein_vs_real")
    assert list(d.index) == [0, 1, 2, 3, 4] and list(d) == pytest.approx(SMALL)
    judgement = judge(table)
    assert judgement.margin == pytest.approx(CLAIM["margin_factor"] * np.std(BASE, ddof=1))


def test_only_seeds_both_trained_are_paired():
    """tf32 trained seeds 0, 1, 2 and 7 (the baseline 0-4), and has no value at seed 1: seeds 0 and 2 pair, and an
    outlier at the unpaired seed 7 changes nothing."""
    table = study(baseline=BASE, tf32={0: 0.31, 1: None, 2: 0.52, 7: 9.0})
    d = equivalence.paired_differences(table, "tf32", "wasserstein_vs_real")
    assert list(d.index) == [0, 2] and list(d) == pytest.approx([0.01, 0.02])
    assert judge(table).comparisons["tf32"].seeds == (0, 2)
    # Three paired seeds with the same unpaired outlier: judged on those three only.
    table = study(baseline=BASE, tf32={0: 0.31, 1: 0.39, 2: 0.52, 7: 9.0})
    found = judge(table).comparisons["tf32"]
    mean, low, high = equivalence.interval([0.01, -0.01, 0.02], CLAIM["alpha"])
    assert found.seeds == (0, 1, 2) and (found.mean, found.low, found.high) == pytest.approx((mean, low, high))


@pytest.mark.parametrize("seed", range(20))
def test_the_interval_and_outcome_agree_with_scipys_t_tests(seed):
    """The interval is scipy's 90 % confidence interval of the mean; equivalent exactly when both one-sided tests of
    TOST reject at alpha (p <= alpha); different exactly when the one-sided test beyond the margin rejects on one
    side."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9))
    d = rng.normal(rng.normal(0, 0.05), rng.uniform(0.005, 0.05), n)
    alpha = CLAIM["alpha"]
    mean, low, high = equivalence.interval(d, alpha)
    expected = stats.ttest_1samp(d, 0).confidence_interval(1 - 2 * alpha)
    assert (low, high) == pytest.approx((expected.low, expected.high), rel=1e-10, abs=1e-14)
    assert mean == pytest.approx(d.mean())
    for margin in (0.005, 0.02, 0.05, 0.1, 0.2):
        if min(abs(low - margin), abs(high - margin), abs(low + margin), abs(high + margin)) < 1e-9:
            continue  # on an edge: the inclusive edges are tested exactly elsewhere
        below = stats.ttest_1samp(d - margin, 0, alternative="less").pvalue  # H0: mean >= +margin
        above = stats.ttest_1samp(d + margin, 0, alternative="greater").pvalue  # H0: mean <= -margin
        outcome = equivalence.outcome(low, high, margin)
        assert (outcome == equivalence.EQUIVALENT) == (max(below, above) <= alpha)
        beyond = (stats.ttest_1samp(d - margin, 0, alternative="greater").pvalue < alpha
                  or stats.ttest_1samp(d + margin, 0, alternative="less").pvalue < alpha)
        assert (outcome == equivalence.DIFFERENT) == beyond


@pytest.mark.parametrize("low, high, outcome", [
    (-0.5, 0.5, EQUIVALENT),                # well inside
    (-1.0, 1.0, EQUIVALENT),                # exactly the band: edges included
    (-1.0, 0.2, EQUIVALENT),                # touching the lower edge
    (0.2, 1.0, EQUIVALENT),                 # touching the upper edge
    (0.5, 1.0000001, equivalence.INCONCLUSIVE),  # just across the upper edge
    (-1.0000001, 0.0, equivalence.INCONCLUSIVE),
    (1.0, 1.5, equivalence.INCONCLUSIVE),   # touching the band from outside: not entirely outside
    (-1.5, -1.0, equivalence.INCONCLUSIVE),
    (1.0000001, 1.5, equivalence.DIFFERENT),  # entirely above +margin
    (-1.5, -1.0000001, equivalence.DIFFERENT),  # entirely below -margin
    (-2.0, 2.0, equivalence.INCONCLUSIVE),  # across both edges
    (0.0, 0.0, EQUIVALENT),                 # a variant identical to the baseline at every seed
])
def test_outcome_at_each_edge_of_the_margin(low, high, outcome):
    assert equivalence.outcome(low, high, 1.0) == outcome


def test_an_interval_needs_two_differences():
    assert equivalence.interval([0.1], 0.05)[0] == 0.1
    assert all(math.isnan(v) for v in equivalence.interval([0.1], 0.05)[1:])
    assert all(math.isnan(v) for v in equivalence.interval([], 0.05))


# -- the claim's verdict from the outcomes -------------------------------------------------------------------------
def test_every_paper_variant_equivalent_reproduces_the_claim():
    table = study(baseline=BASE, tf32=shifted(SMALL), channels_last=shifted([-d for d in SMALL]),
                  tf32_channels_last=BASE)
    judgement = judge(table)
    assert {v: c.outcome for v, c in judgement.comparisons.items()} == dict.fromkeys(
        ["tf32", "channels_last", "tf32_channels_last"], equivalence.EQUIVALENT)
    assert judgement.verdict == claims.REPRODUCED and judgement.reason is None


@pytest.mark.parametrize("shift, outcome", [(0.5, equivalence.DIFFERENT), (-0.5, equivalence.DIFFERENT),
                                            (0.158, equivalence.INCONCLUSIVE), (-0.158, equivalence.INCONCLUSIVE)])
def test_one_variant_entirely_outside_contradicts_and_one_across_an_edge_leaves_it_inconclusive(shift, outcome):
    """tf32 shifted by `shift` at every seed (with the small scatter of SMALL), channels_last equivalent. The margin
    is 0.158: a shift of 0.5 lies beyond it, one of 0.158 puts the interval across its edge."""
    table = study(baseline=BASE, tf32=shifted([shift + d for d in SMALL]), channels_last=shifted(SMALL))
    judgement = judge(table)
    assert judgement.comparisons["tf32"].outcome == outcome
    assert judgement.comparisons["channels_last"].outcome == equivalence.EQUIVALENT
    assert judgement.verdict == (claims.CONTRADICTED if outcome == equivalence.DIFFERENT else claims.INCONCLUSIVE)


def test_different_outweighs_inconclusive_and_variants_beyond_the_paper_never_count():
    table = study(baseline=BASE, tf32=shifted([0.158 + d for d in SMALL]), channels_last=shifted([0.5] * 5),
                  bf16=shifted([5.0 + d for d in SMALL]))
    judgement = judge(table)
    assert judgement.verdict == claims.CONTRADICTED
    assert judgement.judged == ("tf32", "channels_last")
    # bf16 is far off, but beyond the paper: the paper's variants alone decide.
    table = study(baseline=BASE, tf32=shifted(SMALL), bf16=shifted([5.0 + d for d in SMALL]))
    judgement = judge(table)
    assert judgement.comparisons["bf16"].outcome == equivalence.DIFFERENT
    assert judgement.verdict == claims.REPRODUCED


def test_the_margin_factor_and_alpha_come_from_the_claims_file():
    table = study(baseline=BASE, tf32=shifted([0.15 + d for d in SMALL]))
    assert judge(table).verdict == claims.INCONCLUSIVE
    assert judge(table, CLAIM | {"margin_factor": 2}).verdict == claims.REPRODUCED
    wide = judge(table, CLAIM | {"alpha": 0.001}).comparisons["tf32"]
    narrow = judge(table).comparisons["tf32"]
    assert wide.high - wide.low > narrow.high - narrow.low


# -- not measurable ------------------------------------------------------------------------------------------------
def test_fewer_than_min_seeds_paired_is_not_measurable_naming_each_variant():
    table = study(baseline=BASE, tf32={0: 0.3, 1: 0.4}, channels_last=shifted(SMALL))
    measured, got = verdict(table)
    assert got == claims.NOT_MEASURABLE
    assert measured == ("fewer than 3 seeds paired with the baseline on g: tf32 2 (seeds 0, 1); every variant "
                        "trains every seed of quality_study.seeds")
    # With three it is judged; min_seeds comes from the claims file.
    table = study(baseline=BASE, tf32={0: 0.3, 1: 0.4, 3: 0.6}, channels_last=shifted(SMALL))
    assert verdict(table)[1] == claims.REPRODUCED
    assert verdict(table, CLAIM | {"min_seeds": 4})[1] == claims.NOT_MEASURABLE
    # The old design (the baseline at two seeds, every variant at the first): one pair each.
    old = study(baseline=BASE[:2], tf32=[0.3], channels_last=[0.35])
    measured, got = verdict(old)
    assert got == claims.NOT_MEASURABLE and "tf32 1 (seed 0), channels_last 1 (seed 0)" in measured


def test_a_baseline_whose_seeds_agree_exactly_leaves_no_margin():
    table = study(baseline=[0.25] * 5, tf32=[0.25] * 5)
    judgement = judge(table)
    assert judgement.margin == 0 and judgement.comparisons["tf32"].outcome is None
    assert verdict(table) == ("the baseline's seeds agree exactly on g (wasserstein_vs_real 0.25 at seeds 0-4): no "
                              "seed-to-seed spread, so no margin to judge by", claims.NOT_MEASURABLE)
    assert judgement.shown("tf32") == "not measurable here (the baseline's seeds agree exactly: no margin)"


def test_samples_that_are_not_brain_like_are_named_before_the_seeds_are_counted():
    """The CPU miniature (two seeds, noise for samples): its answer is that the samples are not brain-like."""
    table = study(ssim=0.12, baseline=BASE[:2], channels_last=BASE[:2])
    measured, got = verdict(table)
    assert got == claims.NOT_MEASURABLE
    assert measured == ("the baseline's samples are not brain-like: 3D SSIM against the held-out real images "
                        "0.12 / 0.12 (seeds 0 / 1) < 0.3 after 1200 optimizer steps at 32x32x32")
    assert verdict(study(ssim=0.3, baseline=BASE, tf32=BASE))[1] == claims.REPRODUCED  # the threshold is inclusive
    missing = study(baseline=BASE, tf32=BASE)
    missing.loc[1, "ssim_vs_real"] = np.nan
    assert "not brain-like" in verdict(missing)[0]


@pytest.mark.parametrize("table, reason", [
    (pd.DataFrame(), "no quality study on g"),
    (study(baseline=[0.25] * 5, bf16=BASE), "no optimized variant (tf32, channels_last, tf32_channels_last) in the "
     "quality study on g"),
    (study(tf32=BASE, channels_last=BASE), "no baseline in the quality study on g"),
    (study(baseline=BASE, tf32=BASE, channels_last=BASE, idle=["cudnn_tf32"]),
     "cudnn_tf32 had no effect on this device (tf32 ran as baseline does)"),
])
def test_quality_without_a_study_a_paper_variant_or_switches_that_act_is_not_measurable(table, reason):
    assert verdict(table) == (reason, claims.NOT_MEASURABLE)
    assert claims.evaluate(CLAIM, "g", {"study": table, "optimized": OPTIMIZED}) == (reason, claims.NOT_MEASURABLE)


def test_a_study_of_a_rung_beyond_the_paper_still_gets_its_outcome_by_the_claims_rule():
    """The baseline and one's own rung alone: the claim (about the paper's variants) is not measurable, and the rung
    is still judged against the baseline's margin, in the measured text and in what tab06 and fig09 show."""
    table = study(baseline=BASE, bf16=shifted(SMALL))
    judgement = judge(table)
    bf16 = judgement.comparisons["bf16"]
    assert judgement.verdict == claims.NOT_MEASURABLE and judgement.short is None and bf16.outcome == EQUIVALENT
    assert judgement.shown("bf16") == EQUIVALENT
    assert verdict(table) == (
        "no optimized variant (tf32, channels_last, tf32_channels_last) in the quality study on g; beyond the paper, "
        f"wasserstein_vs_real, variant - baseline paired by seed, mean [90 % interval] against the margin "
        f"+-{judgement.margin:.3f} (1 x the SD of the baseline's 5 seeds): bf16 {bf16.mean:+.3f} [{bf16.low:+.3f}, "
        f"{bf16.high:+.3f}] equivalent", claims.NOT_MEASURABLE)
    assert judge(study(baseline=BASE, bf16=shifted([0.5] * 5))).shown("bf16") == equivalence.DIFFERENT


@pytest.mark.parametrize("table, short", [
    (study(ssim=0.12, baseline=BASE, bf16=BASE), "the baseline's samples are not brain-like"),
    (study(baseline=[0.25] * 5, bf16=BASE), "the baseline's seeds agree exactly: no margin"),
    (study(bf16=BASE), "no baseline"),
])
def test_a_rung_beyond_the_paper_is_not_judged_where_the_study_allows_no_outcome(table, short):
    judgement = judge(table)
    assert judgement.short == short and judgement.shown("bf16") == f"not measurable here ({short})"
    assert verdict(table) == ("no optimized variant (tf32, channels_last, tf32_channels_last) in the quality study "
                              "on g", claims.NOT_MEASURABLE)


# -- what is written -----------------------------------------------------------------------------------------------
def test_the_measured_text_gives_each_variant_its_difference_interval_and_outcome_and_the_margin():
    table = study(baseline=BASE, tf32=shifted([0.01, 0.03, 0.02, 0.01, 0.03]), channels_last={0: 0.3, 1: 0.4, 2: 0.5},
                  bf16=shifted([0.5] * 5))
    judgement = judge(table)
    tf32, channels_last = judgement.comparisons["tf32"], judgement.comparisons["channels_last"]
    measured, got = verdict(table)
    assert got == claims.REPRODUCED
    assert measured == (
        f"wasserstein_vs_real, variant - baseline paired by seed, mean [90 % interval] against the margin "
        f"+-{judgement.margin:.3f} (1 x the SD of the baseline's 5 seeds): tf32 +0.020 [{tf32.low:+.3f}, "
        f"{tf32.high:+.3f}] equivalent; channels_last (3 seeds) +0.000 [+0.000, +0.000] equivalent; beyond the "
        "paper: bf16 +0.500 [+0.500, +0.500] different")
    assert channels_last.n == 3


def test_the_rerun_of_the_baseline_seed_is_reported():
    table = study(baseline=BASE, tf32=shifted(SMALL))
    table["rerun_seed"] = np.where(table["variant"].eq("baseline") & table["seed"].eq(0), 0, np.nan)
    table["rerun_weights_identical"] = True
    table["rerun_max_abs_weight_difference"] = 0.0
    table["rerun_wasserstein_vs_real"] = 0.3
    table["rerun_ssim_vs_real"] = 0.6
    rerun = judge(table).rerun
    assert (rerun.seed, rerun.weights_identical, rerun.difference, rerun.distance) == (0, True, 0.0, 0.3)
    assert verdict(table)[0].endswith("; rerun of seed 0: weights bit-identical, wasserstein_vs_real +0.000 "
                                      "against the first training")
    table["rerun_weights_identical"] = False
    table["rerun_max_abs_weight_difference"] = 3.1e-5
    table["rerun_wasserstein_vs_real"] = 0.35
    assert verdict(table)[0].endswith("; rerun of seed 0: weights differ (largest difference 3.1e-05), "
                                      "wasserstein_vs_real +0.050 against the first training")


def test_decimals_follow_the_margin():
    assert claims.decimals(0.158) == 3 and claims.decimals(0.0137) == 4 and claims.decimals(2.5) == 2
    assert claims.decimals(None) == 3 and claims.decimals(0.0) == 3


def test_the_rule_states_the_claims_files_numbers():
    """The rule (the note under tab05) is words; the numbers it states are the keys' values."""
    rule = CLAIM["rule"]
    assert CLAIM["distance"] == "wasserstein_vs_real" and "Wasserstein distance" in rule
    assert f"two-sided {100 * (1 - 2 * CLAIM['alpha']):.3g} % t-interval" in rule
    assert f"TOST at alpha {CLAIM['alpha']}" in rule
    assert f"margin = {CLAIM['margin_factor']} x the standard deviation of the baseline's distance" in rule
    assert f"fewer than {CLAIM['min_seeds']} seeds" in rule and f"< {CLAIM['trained_ssim_min']} for some" in rule
    for word in ("equivalent", "different", "inconclusive", "edges included", "margin 0"):
        assert word in rule
    assert claims.INCONCLUSIVE in claims.VERDICTS
    assert re.search(r"\bbaseline\b", rule) and all(re.search(rf"\b{v}\b", rule) for v in OPTIMIZED)
