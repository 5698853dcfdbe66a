"""fig05: warp stall reasons (time-weighted over kernels) and achieved occupancy per variant."""

from __future__ import annotations

import math

import pandas as pd

from ..derived import weighted_mean
from ..panels import (absent_reason, bars_height, grouped_barh, has, panel_title, rows_figure,
                      rows_with_data, say, variant_barh)
from ..prose import Context, num, present
from ..results import variant_order


def warp_states(kernels: pd.DataFrame, top: int = 8) -> pd.DataFrame:
    """Per variant and stall reason: the time-weighted mean of stall_<reason> over kernels; reasons beyond the
    `top` largest are summed into 'other reasons'."""
    stalls = [c for c in kernels.columns if c.startswith("stall_") and kernels[c].notna().any()]
    rows = [{"variant": v, "reason": c.removeprefix("stall_"), "value": weighted_mean(run, c)}
            for v, run in kernels.groupby("variant") for c in stalls]
    frame = pd.DataFrame(rows, columns=["variant", "reason", "value"])
    if frame.empty:
        return frame
    ranking = frame.groupby("reason")["value"].max().sort_values(ascending=False)
    keep = list(ranking.index[:top])
    frame.loc[~frame["reason"].isin(keep), "reason"] = "other reasons"
    return frame.groupby(["variant", "reason"], as_index=False)["value"].sum()


def build(job):
    results = job.results
    kernels = results.kernels(["ncu"])

    def has_states(gpu: str, phase: str) -> bool:
        data = results.ncu_rows(gpu, phase)
        return has(data, ["achieved_occupancy_pct"]) or any(has(data, [c]) for c in data.columns
                                                             if c.startswith("stall_"))

    rows, left_out = rows_with_data(results, has_states, "stall-reason or occupancy counters")
    counts = [results.ncu_rows(g, p)["variant"].nunique() if len(kernels) else 1 for g, p in rows]
    fig, axes = rows_figure([panel_title(results, g, p) for g, p in rows], 2, ratios=[1.5, 1],
                            height=[bars_height(9 * n, per=0.08) for n in counts], left_out=left_out)
    for (gpu, phase), (ax_stall, ax_occ) in zip(rows, axes):
        data = results.ncu_rows(gpu, phase)
        ax_stall.set_title("warp stall reasons, time-weighted", loc="left")
        ax_occ.set_title("achieved occupancy", loc="left")
        stalls = [c for c in data.columns if c.startswith("stall_")] if len(data) else []
        if not stalls or not has(data, stalls[:1]):
            say(ax_stall, absent_reason(results, gpu, phase, "stall-reason counters"))
        else:
            states = warp_states(data)
            reasons = list(states.groupby("reason")["value"].max().sort_values(ascending=False).index)
            grouped_barh(ax_stall, states, "reason", "value", reasons)
            ax_stall.set_xlabel("warps stalled per issued instruction (cycles)")
        if not has(data, ["achieved_occupancy_pct"]):
            say(ax_occ, absent_reason(results, gpu, phase, "occupancy counters"))
            continue
        order = variant_order(data["variant"].unique())
        variant_barh(ax_occ, order, [weighted_mean(data[data["variant"] == v], "achieved_occupancy_pct")
                                     for v in order], fmt="{:.0f}")
        ax_occ.set_xlabel("active warps (% of peak)")
        ax_occ.set_xlim(0, 115)
    return fig


def describe(context: Context) -> str:
    inputs = context.inputs
    kernels = inputs.result("ncu_kernels")
    if kernels.empty:
        return "No kernel was profiled with Nsight Compute's warp-state counters."
    said = []
    for (gpu, variant, phase), run in kernels.groupby(["gpu", "variant", "phase"], sort=False):
        stalls = {c: weighted_mean(run, c) for c in run.columns if c.startswith("stall_")}
        stalls = {c: v for c, v in stalls.items() if present(v)}
        occupancy = weighted_mean(run, "achieved_occupancy_pct") if "achieved_occupancy_pct" in run \
            else math.nan
        if not stalls or variant not in ("baseline", "tf32"):
            continue
        top = max(stalls, key=stalls.get)
        said.append(f"{variant}'s {phase} step on {gpu}: {top.removeprefix('stall_').replace('_', ' ')} "
                    f"({num(stalls[top])} cycles per issued instruction)"
                    + (f", achieved occupancy {num(occupancy)} %" if present(occupancy) else ""))
    return ("The largest stall reason, weighted by kernel time: " + "; ".join(said) + ".") if said else \
        "No profile carries warp-state counters."
