"""fig07, the paper's headline: SM cycles, warp instructions and IPC of the training step relative to baseline,
tensor-pipe utilisation (Nsight Compute), and the end-to-end training speed-up, per hardware label."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..derived import ncu_headline, relative_to, speedup_verdict
from ..panels import (absent_reason, bars_height, grouped_barh, log_ticks, panel_title, rows_figure, say,
                      variant_barh)
from ..prose import Context, num, times
from ..results import variant_order

RATIOS = [("sm_cycles", "SM cycles"), ("warp_instructions", "warp instructions"), ("ipc", "IPC")]


def optimization_impact(summaries: pd.DataFrame) -> pd.DataFrame:
    """ncu training step: per (gpu, variant) the ratios of SM cycles, warp instructions and IPC to baseline, and
    the tensor-pipe utilisation (%)."""
    head = ncu_headline(summaries)
    rel = relative_to(head, [m for m, _ in RATIOS])
    return rel.assign(tensor_pipe_pct=head["tensor_pipe_pct"].astype(float))


def _ratios(ax, data: pd.DataFrame) -> None:
    long = data.melt(id_vars="variant", value_vars=[m for m, _ in RATIOS], var_name="metric", value_name="ratio")
    long["metric"] = long["metric"].map(dict(RATIOS))
    ratios = long["ratio"].astype(float)
    ax.set_xscale("log")
    ax.set_xlim(float(np.nanmin(ratios)) / 2, max(float(np.nanmax(ratios)), 1.0) * 1.3)
    grouped_barh(ax, long.assign(ratio=ratios), "metric", "ratio", [label for _, label in RATIOS], fmt="{:.2g}",
                 axis_in=4.0)
    log_ticks(ax)
    ax.axvline(1, color="black", linewidth=0.8)
    ax.set_xlabel("ratio to baseline (log scale; 1 = baseline)")


def build(job):
    results = job.results
    impact = optimization_impact(results.table("summaries"))
    runs = results.table("runs")
    labels = results.labels()
    counts = [max(len(runs[runs["gpu"] == g]) if len(runs) else 0, 3 * (impact["gpu"] == g).sum() * 0.8)
              for g in labels]
    fig, axes = rows_figure([panel_title(results, g) for g in labels], 3, width=5.2, ratios=[1.5, 1, 1],
                            height=[bars_height(n) for n in counts],
                            caveat="Each row is one hardware label and its own workload (its title): every number is "
                                   "relative to that row's own baseline.")
    for gpu, (ax_rel, ax_tensor, ax_speed) in zip(labels, axes):
        ax_rel.set_title("Nsight Compute, training step, vs baseline", loc="left")
        ax_tensor.set_title("Tensor Core use, training step", loc="left")
        ax_speed.set_title("end-to-end training", loc="left")
        data = impact[impact["gpu"] == gpu]
        if data.empty or data[[m for m, _ in RATIOS]].isna().all().all():
            reason = absent_reason(results, gpu, "train") if data.empty else \
                f"no Nsight Compute training-step profile of baseline on {gpu}: nothing to compare with"
            say(ax_rel, reason)
            say(ax_tensor, reason if data.empty or data["tensor_pipe_pct"].isna().all() else "")
        else:
            _ratios(ax_rel, data)
            order = variant_order(data["variant"])
            variant_barh(ax_tensor, order, data.set_index("variant").loc[order, "tensor_pipe_pct"], fmt="{:.1f}",
                         axis_in=2.4)
            ax_tensor.set_xlabel("tensor pipe active (% of peak, time-weighted)")
        run = runs[runs["gpu"] == gpu] if len(runs) else runs
        if len(run) == 0 or "baseline" not in set(run["variant"]):
            say(ax_speed, f"no baseline training run for {gpu}: no speed-up to compute")
            continue
        # The paired rounds' ratio and interval (reporting.derived.speedup_verdict), the verdict beside the bar.
        verdict = speedup_verdict(run).set_index("variant")
        order = variant_order(verdict.index)
        errors = (verdict.loc[order, "speedup"] - verdict.loc[order, "low"],
                  verdict.loc[order, "high"] - verdict.loc[order, "speedup"])
        variant_barh(ax_speed, order, verdict.loc[order, "speedup"].astype(float), fmt="{:.2f}x", axis_in=2.4,
                     errors=tuple(e.astype(float).clip(lower=0).to_numpy() for e in errors))
        ax_speed.axvline(1, color="black", linewidth=0.8)
        paired = bool(verdict["paired"].all())
        ax_speed.set_xlabel("speed-up vs baseline (x per sample)\n" + ("paired rounds, their interval" if paired else
                                                                        "separate jobs, quartile range"))
    return fig


def describe(context: Context) -> str:
    inputs = context.inputs
    table = inputs.table("tab04_optimization")
    rows = table[table["sm_cycles_rel"].notna() & (table["variant"] != "baseline")] \
        if len(table) and "sm_cycles_rel" in table else pd.DataFrame()
    if rows.empty:
        return "No label has Nsight Compute profiles of the baseline and another variant's training step."
    fewest = rows.loc[rows["warp_instructions_rel"].idxmin()]
    ipc = rows.loc[rows["ipc_rel"].idxmax()]
    tensor = rows.loc[rows["tensor_pipe_pct"].idxmax()]
    return (f"Relative to the baseline, {fewest['variant']} on {fewest['gpu']} executes the fewest warp instructions "
            f"({times(1 / fewest['warp_instructions_rel'])} fewer, {times(1 / fewest['sm_cycles_rel'])} fewer SM "
            f"cycles); no variant raises IPC above the baseline's: the highest is {ipc['variant']}'s at "
            f"{num(ipc['ipc_rel'])} of it. " if ipc["ipc_rel"] <= 1 else
            f"Relative to the baseline, {fewest['variant']} on {fewest['gpu']} executes the fewest warp instructions "
            f"({times(1 / fewest['warp_instructions_rel'])} fewer); {ipc['variant']} raises IPC to "
            f"{num(ipc['ipc_rel'])} of the baseline's. ") + (
            f"The Tensor pipe is busiest with {tensor['variant']} ({num(tensor['tensor_pipe_pct'])} % of the "
            "step's time, weighted by kernel time). Fewer instructions with a lower IPC is what moving the "
            "convolutions' arithmetic onto the Tensor Cores looks like: each tensor instruction does the work of "
            "many FFMAs, and the remaining kernels (normalization, element-wise) issue at their own rate.")
