"""tab09: the sampler axis per hardware label: each fast sampler at each step count beside the T-step chain, with its
speed where it was timed (the sample_fast job of fast_sampling.variants, at the label's timing workload) and its
quality on the quality study's models (every run of fast_sampling.study_variants, at the study's workload), judged
against the chain of the same run by the quality claim's equivalence test and margin (reporting.sampler_judgements).
"""

from __future__ import annotations

import math

import pandas as pd

from ..claims import load_claims
from ..prose import Context, chain_speedup_words, join_words, num
from ..render import Table
from ..sampler_judgements import CHAIN, fastest_setting, fewest_equivalent, judgements

TIMING = ["timed_variant", "timed_shape", "evaluations", "seconds_per_volume", "volumes_per_hour_b1", "best_batch",
          "volumes_per_hour_best", "peak_memory_gib", "chain_speedup", "chain_speedup_low", "chain_speedup_high",
          "chain_speedup_verdict", "chain_speedup_rounds"]
QUALITY = ["study_variant", "seeds", "distance_mean", "chain_distance_mean", "mean_difference", "interval_low",
           "interval_high", "margin", "outcome"]
CAPTION = ("Fast samplers against Med-DDPM's T-step chain (ddpm). Speed, where the label timed them (its sample_fast "
           "job, on the variant named, at the volume named): a whole chain's seconds per volume at batch 1, volumes "
           "per hour at batch 1 and at the best batch size, peak memory at batch 1, and the speed-up over the T-step "
           "chain timed in the same rounds (the median of the rounds' ratios, its interval and verdict, as every "
           "paired speed-up); the chain's best batch from the variant's own throughput sweep. Quality, on the quality study's models (at the study's volume): the Wasserstein "
           "distance of the samples to the real images (the quality claim's metric), its mean over the seeds beside "
           "the same runs' T-step chains, the paired difference sampler - chain by seed with its 90 % interval, the "
           "margin (the baseline's seed-to-seed SD of its chains' distance, as the quality claim's) and the outcome "
           "(equivalent: the interval within +-margin; different: entirely outside; inconclusive: across an edge)")


def with_chain_throughput(runs: pd.DataFrame, samplers: pd.DataFrame) -> pd.DataFrame:
    """The T-step chain's rows (timed at batch 1 beside the fast samplers) with its best batch from the same variant's
    throughput sweep (sample.json), where the sweep chose among several sizes."""
    samplers = samplers.copy()
    for index in samplers.index[samplers["sampler"] == CHAIN]:
        run = runs[(runs["gpu"] == samplers.at[index, "gpu"]) & (runs["variant"] == samplers.at[index, "variant"])]
        if len(run) and pd.notna(run.iloc[0].get("sample_best_batch")):
            samplers.at[index, "best_batch"] = run.iloc[0]["sample_best_batch"]
            samplers.at[index, "volumes_per_hour_best"] = run.iloc[0]["sample_volumes_per_hour_best"]
    return samplers


def sampler_table(runs: pd.DataFrame, samplers: pd.DataFrame, study_samplers: pd.DataFrame,
                  claim: dict) -> pd.DataFrame:
    timed = with_chain_throughput(runs, samplers) if len(samplers) else samplers
    timed = timed.rename(columns={"variant": "timed_variant", "volume_shape": "timed_shape"})
    judged = judgements(study_samplers, claim).rename(columns={"variant": "study_variant"})
    keys = ["gpu", "sampler", "steps"]
    if timed.empty and judged.empty:
        return pd.DataFrame(columns=[*keys, *TIMING, *QUALITY])
    if judged.empty:
        frame = timed
    elif timed.empty:
        frame = judged
    else:
        frame = timed.merge(judged.drop(columns=["evaluations"]), on=keys, how="outer")
    frame = frame.reindex(columns=[*keys, *TIMING, *QUALITY])
    frame["evaluations"] = frame["evaluations"].fillna(frame["steps"]).astype(int)
    for column in ("best_batch", "seeds", "chain_speedup_rounds"):
        frame[column] = frame[column].astype(float).round().astype("Int64")
    for column in ("timed_variant", "timed_shape", "study_variant", "outcome", "chain_speedup_verdict"):  # text
        frame[column] = frame[column].astype(object).where(frame[column].notna(), "")
    order = {name: k for k, name in enumerate([CHAIN, "deis_ipndm", "deis_ipndm_as_shipped", "ddim",
                                               "dpm_solver_pp_2m"])}
    frame = frame.assign(_s=frame["sampler"].map(order).fillna(len(order)))
    return frame.sort_values(["gpu", "_s", "steps", "study_variant"], kind="stable").drop(columns="_s") \
        .reset_index(drop=True)


def smallest_notes(study_samplers: pd.DataFrame, claim: dict) -> list[str]:
    """Per label and study variant: each sampler's fewest steps judged equivalent to the chain, or that none is."""
    notes = []
    fewest = fewest_equivalent(judgements(study_samplers, claim))
    for (gpu, variant), rows in fewest.groupby(["gpu", "variant"], sort=False):
        said = [f"{row.sampler} {int(row.steps)} steps" if not math.isnan(row.steps)
                else f"{row.sampler}: {'none' if row.judged else 'not judged'}" for row in rows.itertuples()]
        notes.append(f"{gpu}, {variant}'s runs: fewest steps equivalent to the chain: {', '.join(said)}.")
    return notes


def build(job) -> Table:
    results = job.results
    claim = next(c for c in load_claims(job.files["claims"])["claims"] if c["id"] == "quality")
    study_samplers = results.table("study_samplers")
    table = sampler_table(results.table("runs"), results.table("samplers"), study_samplers, claim)
    return Table(table, CAPTION, notes=smallest_notes(study_samplers, claim))


ARTICLE_COLUMNS = [("gpu", "label"), ("sampler", "sampler"), ("steps", "steps"),
                   ("seconds_per_volume", "s/volume"), ("chain_speedup", "x chain"),
                   ("volumes_per_hour_best", "vol/h best"),
                   ("study_variant", "study runs"), ("mean_difference", "diff. vs chain"),
                   ("interval_low", "90 % low"), ("interval_high", "90 % high"), ("margin", "margin"),
                   ("outcome", "outcome")]


def describe(context: Context) -> str:
    table = context.inputs.table("tab09_samplers")
    if table.empty:
        return "No fast sampler was configured (fast_sampling.samplers)."
    said = []
    for gpu, rows in table.groupby("gpu", sort=False):
        chain = rows[rows["sampler"] == CHAIN]
        fast = rows[(rows["sampler"] != CHAIN) & rows["seconds_per_volume"].notna()]
        text = f"On {context.inputs.named(gpu)}"
        if len(chain) and len(fast):
            best, tied = fastest_setting(fast)
            text += (f" the T-step chain takes {num(chain['seconds_per_volume'].iloc[0])} s per volume and "
                     f"{best['sampler']} at {int(best['steps'])} steps {num(best['seconds_per_volume'])} s, "
                     f"{chain_speedup_words(best)}"
                     + (f" ({join_words(tied)} as fast within the intervals)" if tied else ""))
        judged = rows[rows["outcome"].notna()]
        equal = judged[judged["outcome"] == "equivalent"]
        if len(judged):
            text += (f"; of {len(judged)} sampler and step counts judged on the study's runs, "
                     + (join_words(sorted({f'{r.sampler} at {int(r.steps)}' for r in equal.itertuples()}))
                        + " are equivalent to the chain" if len(equal) else "none is equivalent to the chain"))
        said.append(text + ".")
    return " ".join(said) + " The speed and the quality come from different workloads (tab09 names both)."
