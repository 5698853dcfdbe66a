"""fig07, the paper's headline: SM cycles, warp instructions and IPC of the training step relative to baseline,
tensor-pipe utilisation (Nsight Compute), and the end-to-end training speed-up, per hardware label."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..derived import ncu_headline, relative_to, speedup_verdict
from ..panels import absent_reason, bars_height, log_ticks, panel_title, rows_figure, say, variant_barh
from ..prose import Context, num, times
from ..results import variant_order

RATIOS = [("sm_cycles", "SM cycles"), ("warp_instructions", "warp instructions"), ("ipc", "IPC")]


def optimization_impact(summaries: pd.DataFrame) -> pd.DataFrame:
    """ncu training step: per (gpu, variant) the ratios of SM cycles, warp instructions and IPC to baseline, and
    the tensor-pipe utilisation (%)."""
    head = ncu_headline(summaries)
    rel = relative_to(head, [m for m, _ in RATIOS])
    return rel.assign(tensor_pipe_pct=head["tensor_pipe_pct"].astype(float))


# The ratios' marks: a shape and a grey per counter (no colour: the rows name the variants).
RATIO_MARKS = {"sm_cycles": ("o", "white"), "warp_instructions": ("s", "0.55"), "ipc": ("^", "black")}


def _ratios(ax, data: pd.DataFrame, order: list[str]) -> None:
    """One row per variant (as the tensor panel beside it), a mark per counter at its ratio to the baseline."""
    rows = data.set_index("variant").reindex(order)
    ratios = rows[[m for m, _ in RATIOS]].astype(float)
    ax.set_xscale("log")
    low = float(np.nanmin(ratios.to_numpy()))
    ax.set_xlim(low / 2, max(float(np.nanmax(ratios.to_numpy())), 1.0) * 2)
    ax.axvline(1, color="black", linewidth=0.8, zorder=1)
    for k, (metric, label) in enumerate(RATIOS):
        marker, face = RATIO_MARKS[metric]
        # A little apart within the row, so that equal ratios do not hide each other.
        ax.scatter(ratios[metric], np.arange(len(order)) + (k - 1) * 0.2, marker=marker, facecolor=face,
                   edgecolor="black", linewidths=0.8, s=30, zorder=3, label=label)
    ax.set_yticks(range(len(order)), order)
    ax.set_ylim(len(order) - 0.5, -0.5)
    log_ticks(ax)
    ax.set_xlabel("ratio to baseline (log scale; 1 = baseline)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, frameon=False, handletextpad=0.3,
              columnspacing=1.0)


def build(job):
    """Per hardware label: the Nsight Compute ratios and the tensor-pipe use over the end-to-end speed-up where the
    label has an Nsight Compute training-step profile, the speed-up alone where it cannot have one (a CPU, or no
    profile: said under the rows)."""
    results = job.results
    impact = optimization_impact(results.table("summaries"))
    runs = results.table("runs")
    labels = results.labels()
    profiled = {g: not (impact[impact["gpu"] == g].empty or impact.loc[impact["gpu"] == g, [m for m, _ in RATIOS]]
                        .isna().all().all()) for g in labels}
    left_out = ["Nsight Compute ratios and tensor use: " + (
        absent_reason(results, g, "train") if impact[impact["gpu"] == g].empty else
        f"no Nsight Compute training-step profile of baseline on {g}: nothing to compare with")
        for g in labels if not profiled[g]]
    mosaics, heights = [], []
    for gpu in labels:
        variants = int((runs["gpu"] == gpu).sum()) if len(runs) else 0
        speed = bars_height(variants)
        if profiled[gpu]:
            ncu = bars_height((impact["gpu"] == gpu).sum()) + 0.25  # and the counters' legend
            mosaics.append(([["ratios", "tensor"], ["speed", "speed"]], [ncu, speed]))
            heights.append(ncu + speed)
        else:
            mosaics.append(([["speed", "speed"]], [1]))
            heights.append(speed)
    fig, axes = rows_figure([panel_title(results, g) for g in labels], 1, height=heights, ratios=[1.2, 1],
                            mosaics=mosaics, left_out=left_out,
                            caveat="Each row is one hardware label and its own workload (its title): every number is "
                                   "relative to that row's own baseline.")
    for gpu, panels in zip(labels, axes):
        if profiled[gpu]:
            data = impact[impact["gpu"] == gpu]
            order = variant_order(data["variant"])
            panels["ratios"].set_title("Nsight Compute, training step", loc="left")
            panels["tensor"].set_title("tensor pipe, training step", loc="left")
            _ratios(panels["ratios"], data, order)
            panels["tensor"].sharey(panels["ratios"])
            variant_barh(panels["tensor"], order, data.set_index("variant").loc[order, "tensor_pipe_pct"],
                         fmt="{:.1f}", axis_in=2.5)
            panels["tensor"].tick_params(labelleft=False)
            panels["tensor"].set_xlabel("active, % of peak (time-weighted)")
        ax_speed = panels["speed"]
        ax_speed.set_title("end-to-end training", loc="left")
        run = runs[runs["gpu"] == gpu] if len(runs) else runs
        if len(run) == 0 or "baseline" not in set(run["variant"]):
            say(ax_speed, f"no baseline training run for {gpu}: no speed-up to compute")
            continue
        # The paired rounds' ratio and interval (reporting.derived.speedup_verdict), the verdict beside the bar.
        verdict = speedup_verdict(run).set_index("variant")
        order = variant_order(verdict.index)
        errors = (verdict.loc[order, "speedup"] - verdict.loc[order, "low"],
                  verdict.loc[order, "high"] - verdict.loc[order, "speedup"])
        variant_barh(ax_speed, order, verdict.loc[order, "speedup"].astype(float), fmt="{:.2f}x", axis_in=5.0,
                     errors=tuple(e.astype(float).clip(lower=0).to_numpy() for e in errors))
        ax_speed.axvline(1, color="black", linewidth=0.8)
        ax_speed.set_xlabel("speed-up vs baseline (x per sample); " + _interval_words(verdict, order))
    return fig


def _interval_words(verdict: pd.DataFrame, order: list[str]) -> str:
    """What the error bars are: the paired rounds' interval, the separate jobs' quartile range, or (a shipped set
    whose comparison holds some of its variants) which bars are which."""
    unpaired = [variant for variant in order if variant != "baseline" and not verdict.loc[variant, "paired"]]
    if not unpaired:
        return "paired rounds, their interval"
    if len(unpaired) == len(order) - ("baseline" in order):
        return "separate jobs, quartile range"
    return f"paired rounds' interval;\nseparate jobs' quartile range: {', '.join(unpaired)}"


def describe(context: Context) -> str:
    inputs = context.inputs
    table = inputs.table("tab04_optimization")
    rows = table[table["sm_cycles_rel"].notna() & (table["variant"] != "baseline")] \
        if len(table) and "sm_cycles_rel" in table else pd.DataFrame()
    if rows.empty:
        return "No label has Nsight Compute profiles of the baseline and another variant's training step."
    said = []
    for gpu, mine in rows.groupby("gpu", sort=False):  # each label against its own baseline only
        fewest = mine.loc[mine["warp_instructions_rel"].idxmin()]
        ipc = mine.loc[mine["ipc_rel"].idxmax()]
        tensor = mine.loc[mine["tensor_pipe_pct"].idxmax()]
        text = (f"On {gpu}, {fewest['variant']} executes the fewest warp instructions relative to the baseline "
                f"({times(1 / fewest['warp_instructions_rel'])} fewer, {times(1 / fewest['sm_cycles_rel'])} fewer SM "
                "cycles); ")
        text += (f"no variant raises IPC above the baseline's: the highest is {ipc['variant']}'s at "
                 f"{num(ipc['ipc_rel'])} of it" if ipc["ipc_rel"] <= 1 else
                 f"{ipc['variant']} raises IPC to {num(ipc['ipc_rel'])} of the baseline's")
        text += (f"; the Tensor pipe is busiest with {tensor['variant']} ({num(tensor['tensor_pipe_pct'])} % of the "
                 "step's time, weighted by kernel time).")
        said.append(text)
    return " ".join(said) + (
        " Fewer instructions with a lower IPC is what moving the convolutions' arithmetic onto the Tensor Cores looks "
        "like: each tensor instruction does the work of many FFMAs, and the remaining kernels (normalization, "
        "element-wise) issue at their own rate.")
