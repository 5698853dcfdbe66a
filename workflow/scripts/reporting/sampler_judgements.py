"""The fast samplers judged against the T-step chain (tab09, fig12): on the quality study's trained models, each
sampler at each step count against the chain of the same run, by the quality claim's own test and margin
(data/paper_claims.yaml, claim `quality`; reporting.equivalence).

Each run of a study variant sampled the same held-out masks from the same initial noise with the chain (`ddpm`, T
steps) and with every fast sampler (medddpm.study.fast_samples), so d_k = distance(sampler, seed k) - distance(ddpm,
seed k) removes what the seed does to both. The margin is the study's: margin_factor x the baseline's seed-to-seed
SD of the distance of its chains, fixed by the claims file before any run; the outcome is TOST's (equivalent /
different / inconclusive), not judged below min_seeds pairs.
"""

from __future__ import annotations

import math

import pandas as pd

from . import equivalence

CHAIN = "ddpm"
COLUMNS = ["gpu", "variant", "sampler", "steps", "evaluations", "seeds", "distance_mean", "chain_distance_mean",
           "mean_difference", "interval_low", "interval_high", "margin", "outcome", "study_seconds_per_volume"]


def fastest_setting(timed: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """Of a label's timed fast-sampler settings (tab09's rows with seconds per volume, in tab09's order), the fastest
    and the others as fast as it as far as the paired rounds tell: as many U-Net evaluations, their speed-up
    intervals over the chain overlapping its. On a loaded machine which of those comes out ahead changes from run to
    run, so wherever the fastest is named, these are named beside it."""
    timed = timed.drop_duplicates(["sampler", "steps"])  # one row per study variant in tab09
    fastest = timed.loc[timed["seconds_per_volume"].astype(float).idxmin()]
    low, high = fastest.get("chain_speedup_low"), fastest.get("chain_speedup_high")
    if pd.isna(low) or pd.isna(high):
        return fastest, []
    others = timed.drop(index=fastest.name)
    tied = others[(others["evaluations"].astype(int) == int(fastest["evaluations"]))
                  & (others["chain_speedup_high"].astype(float) >= float(low))
                  & (others["chain_speedup_low"].astype(float) <= float(high))]
    return fastest, [f"{row.sampler} {int(row.steps)} steps" for row in tied.itertuples()]


def margin_of(study_samplers: pd.DataFrame, gpu: str, claim: dict) -> float | None:
    """margin_factor x the SD over the baseline's seeds of its chains' distance (None with fewer than two seeds)."""
    column = claim["distance"]
    chains = study_samplers[(study_samplers["gpu"] == gpu) & (study_samplers["sampler"] == CHAIN)]
    spread = equivalence.seed_spread(chains, column)  # the baseline's chains
    return None if spread is None else claim["margin_factor"] * spread


def judgements(study_samplers: pd.DataFrame, claim: dict) -> pd.DataFrame:
    """One row per (gpu, study variant, sampler, steps): its mean distance over the seeds, the chain's, the paired
    difference with its 1 - 2 alpha interval, the margin and the outcome (None where not judged)."""
    if study_samplers.empty:
        return pd.DataFrame(columns=COLUMNS)
    column = claim["distance"]
    rows = []
    for gpu, mine in study_samplers.groupby("gpu", sort=False):
        margin = margin_of(study_samplers, gpu, claim)
        for variant, runs in mine.groupby("variant", sort=False):
            chain = runs[runs["sampler"] == CHAIN]
            for (sampler, steps), group in runs[runs["sampler"] != CHAIN].groupby(["sampler", "steps"], sort=False):
                paired = pd.concat([group.assign(variant="fast"), chain.assign(variant=CHAIN)])
                compared = equivalence.compare(paired, "fast", column, margin, claim["alpha"], claim["min_seeds"],
                                               reference=CHAIN)
                rows.append({"gpu": gpu, "variant": variant, "sampler": sampler, "steps": int(steps),
                             "evaluations": int(group["evaluations"].iloc[0]), "seeds": compared.n,
                             "distance_mean": float(group[column].mean()),
                             "chain_distance_mean": float(chain[column].mean()) if len(chain) else math.nan,
                             "mean_difference": compared.mean, "interval_low": compared.low,
                             "interval_high": compared.high, "margin": margin, "outcome": compared.outcome,
                             "study_seconds_per_volume": float(group["seconds_per_volume"].mean())})
    return pd.DataFrame(rows, columns=COLUMNS)


def fewest_equivalent(judged: pd.DataFrame) -> pd.DataFrame:
    """Per (gpu, variant, sampler): the smallest step count judged equivalent to the chain (steps NaN: none is)."""
    rows = []
    for (gpu, variant, sampler), group in judged.groupby(["gpu", "variant", "sampler"], sort=False):
        equal = group[group["outcome"] == equivalence.EQUIVALENT]
        rows.append({"gpu": gpu, "variant": variant, "sampler": sampler,
                     "steps": int(equal["steps"].min()) if len(equal) else math.nan,
                     "judged": bool(group["outcome"].notna().any())})
    return pd.DataFrame(rows, columns=["gpu", "variant", "sampler", "steps", "judged"])
