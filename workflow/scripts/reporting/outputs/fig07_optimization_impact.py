"""fig07, the paper's headline: SM cycles, warp instructions and IPC of the training step relative to baseline,
tensor-pipe utilisation (Nsight Compute), and the end-to-end training speed-up, per hardware label."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..derived import ncu_headline, relative_to, speedup
from ..panels import absent_reason, rows_figure, say, variant_bars, variant_color
from ..results import variant_order

RATIOS = [("sm_cycles", "SM cycles"), ("warp_instructions", "warp instructions"), ("ipc", "IPC")]


def optimization_impact(summaries: pd.DataFrame) -> pd.DataFrame:
    """ncu training step: per (gpu, variant) the ratios of SM cycles, warp instructions and IPC to baseline, and
    the tensor-pipe utilisation (%)."""
    head = ncu_headline(summaries)
    rel = relative_to(head, [m for m, _ in RATIOS])
    return rel.assign(tensor_pipe_pct=head["tensor_pipe_pct"].astype(float))


def _ratios(ax, data: pd.DataFrame) -> None:
    order = variant_order(data["variant"])
    width = 0.8 / len(order)
    for k, variant in enumerate(order):
        row = data[data["variant"] == variant].iloc[0]
        xs = np.arange(len(RATIOS)) + (k - (len(order) - 1) / 2) * width
        values = [row[m] for m, _ in RATIOS]
        ax.bar(xs, values, width=width, color=variant_color(variant, k), label=variant)
        for x, value in zip(xs, values):
            if not pd.isna(value):
                ax.annotate(f"{value:.2g}", (x, value), ha="center", va="bottom", fontsize=7)
    ratios = data[[m for m, _ in RATIOS]].astype(float).to_numpy()
    ax.set_yscale("log")
    ax.set_ylim(np.nanmin(ratios) / 2, max(np.nanmax(ratios), 1) * 1.6)
    ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.axhline(1, color="black", linewidth=0.8)
    ax.set_xticks(range(len(RATIOS)), [label for _, label in RATIOS])
    ax.set_ylabel("ratio to baseline (log scale; 1 = baseline)")
    ax.legend(fontsize=8)


def build(job):
    results = job.results
    impact = optimization_impact(results.table("summaries"))
    runs = results.table("runs")
    labels = results.labels()
    fig, axes = rows_figure([results.panel_label(g) for g in labels], 3, ratios=[1.6, 1, 1])
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
            variant_bars(ax_tensor, order, data.set_index("variant").loc[order, "tensor_pipe_pct"])
            ax_tensor.set_ylabel("tensor pipe active (% of peak, time-weighted)")
        run = runs[runs["gpu"] == gpu] if len(runs) else runs
        if len(run) == 0 or "baseline" not in set(run["variant"]):
            say(ax_speed, f"no baseline training run for {gpu}: no speed-up to compute")
            continue
        run = run.assign(speedup=speedup(run)).set_index("variant")
        order = variant_order(run.index)
        variant_bars(ax_speed, order, run.loc[order, "speedup"], fmt="{:.2f}x")
        ax_speed.axhline(1, color="black", linewidth=0.8)
        ax_speed.set_ylabel("speed-up vs baseline (x, per sample)")
    return fig
