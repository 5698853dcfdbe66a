"""fig06: Nsight Compute's rule results (estimated speedups) weighted by kernel time, by rule and kernel class."""

from __future__ import annotations

import math

import pandas as pd

from profiling.kernels import CLASS_NAMES, classify

from ..panels import (absent_reason, bars_height, grouped_barh, panel_title, rows_figure, rows_with_data,
                      say)
from ..prose import Context, class_words, num
from ..results import variant_order
from .fig02_top_kernels import focus_variant


def priority_scores(rules: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, rule, kernel class): estimated saving = sum over kernels of speedup % x kernel time, as % of the
    run's kernel time. Kernels are matched on ncu's kernel id (= launch order); unmatched ones count with zero time."""
    rules = rules[rules["estimated_speedup_pct"].notna()].copy()
    if rules.empty:
        return pd.DataFrame(columns=["variant", "rule", "kernel_class", "saving_pct"])
    rows = []
    for variant, run in rules.groupby("variant"):
        times = kernels.loc[kernels["variant"] == variant, ["launch", "duration_ns", "kernel_class"]] if len(kernels) \
            else None
        run = run.drop(columns=["kernel_class"], errors="ignore")
        if times is not None and len(times):
            run = run.merge(times.rename(columns={"launch": "kernel_id"}), on="kernel_id", how="left")
            total = float(times["duration_ns"].sum())
        else:
            run["duration_ns"], run["kernel_class"], total = math.nan, None, math.nan
        run["kernel_class"] = run["kernel_class"].fillna(run["kernel_name"].astype(str).map(classify))
        run["saving_pct"] = run["estimated_speedup_pct"].astype(float) * run["duration_ns"].fillna(0) / total
        rows.append(run.groupby(["rule", "kernel_class"], as_index=False)["saving_pct"].sum().assign(variant=variant))
    return pd.concat(rows, ignore_index=True)[["variant", "rule", "kernel_class", "saving_pct"]]


def build(job, top: int = 10):
    results = job.results
    rules, kernels = results.table("rules"), results.kernels(["ncu"])

    def rules_of(gpu: str, phase: str) -> pd.DataFrame:
        return rules[(rules["gpu"] == gpu) & (rules["phase"] == phase)] if len(rules) else rules

    def has_scores(gpu: str, phase: str) -> bool:
        frame = rules_of(gpu, phase)
        return "estimated_speedup_pct" in frame and bool(frame["estimated_speedup_pct"].notna().any())

    rows, left_out = rows_with_data(results, has_scores, "rule results (no sections)")
    counts = [rules_of(g, p)["variant"].nunique() if len(rules) else 1 for g, p in rows]
    fig, axes = rows_figure([panel_title(results, g, p) for g, p in rows], 2,
                            height=[bars_height(top * n, base=2.6, per=0.07) for n in counts], left_out=left_out,
                            sharey=True)
    for (gpu, phase), (ax_rule, ax_heat) in zip(rows, axes):
        ax_rule.set_title("estimated saving per rule (all kernel classes)", loc="left")
        if not has_scores(gpu, phase):
            reason = absent_reason(results, gpu, phase, "rule results (no sections)")
            say(ax_rule, reason)
            say(ax_heat, reason)
            continue
        scores = priority_scores(rules_of(gpu, phase), results.ncu_rows(gpu, phase))
        per_rule = scores.groupby(["variant", "rule"], as_index=False)["saving_pct"].sum()
        ranking = per_rule.groupby("rule")["saving_pct"].max().sort_values(ascending=False).index[:top]
        grouped_barh(ax_rule, per_rule, "rule", "saving_pct", list(ranking))
        ax_rule.set_xlabel("estimated saving (% of step kernel time)")
        variant = focus_variant(variant_order(per_rule["variant"]))
        heat = scores[scores["variant"] == variant].pivot_table(index="rule", columns="kernel_class",
                                                                 values="saving_pct", aggfunc="sum", fill_value=0)
        heat = heat.reindex(index=list(ranking), columns=[c for c in CLASS_NAMES if c in heat.columns]).fillna(0)
        image = ax_heat.imshow(heat.to_numpy(), aspect="auto", cmap="Reds")
        ax_heat.set_xticks(range(len(heat.columns)), heat.columns, rotation=90)
        ax_heat.grid(False)
        ax_heat.set_title(f"by kernel class: {variant}", loc="left")
        ax_heat.figure.colorbar(image, ax=ax_heat, label="estimated saving (% of step kernel time)")
    return fig


def describe(context: Context) -> str:
    inputs = context.inputs
    rules, kernels = inputs.result("rules"), inputs.result("ncu_kernels")
    if rules.empty or "estimated_speedup_pct" not in rules:
        return "No profile carries Nsight Compute's rule results."
    said = []
    for (gpu, phase), run in rules.groupby(["gpu", "phase"], sort=False):
        mine = kernels[(kernels["gpu"] == gpu) & (kernels["phase"] == phase)] if len(kernels) else kernels
        scores = priority_scores(run, mine)
        scores = scores[scores["variant"] == "baseline"] if "baseline" in set(scores["variant"]) else scores
        if scores.empty:
            continue
        top = scores.loc[scores["saving_pct"].idxmax()]
        said.append(f"for {top['variant']}'s {phase} step on {gpu}, the largest is {top['rule']} on "
                    f"{class_words(top['kernel_class'])} kernels ({num(top['saving_pct'])} % of the step)")
    return ("Nsight Compute's rules estimate what fixing each problem would save; weighted by kernel time, "
            + "; ".join(said) + ". These are the profiler's estimates, not measured gains.") if said else \
        "No rule result carries an estimated speedup."
