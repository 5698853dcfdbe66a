"""fig01: share of kernel time per kernel class, per variant, for the training and the sampling step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiling.kernels import CLASS_NAMES

from ..panels import (CLASS_COLORS, TOOL_NAMES, TOOL_TAGS, bars_height, class_legend, panel_title, rows_figure,
                      say)
from ..prose import Context, PAPER_VARIANTS, class_words, join_words, pct
from ..results import SHIPPED, preferred_tool, variant_order


def build(job):
    results = job.results
    summaries = results.table("summaries")
    summaries = preferred_tool(summaries) if len(summaries) else summaries
    labels, phases = results.labels(), results.phases()
    counts = [len(set(summaries.loc[summaries["gpu"] == g, "variant"])) if len(summaries) else 0 for g in labels]
    fig, axes = rows_figure([panel_title(results, g) for g in labels], len(phases), width=6.4,
                            height=[bars_height(n) for n in counts])
    used = set()
    for gpu, row in zip(labels, axes):
        for phase, ax in zip(phases, row):
            data = summaries[(summaries["gpu"] == gpu) & (summaries["phase"] == phase)] if len(summaries) else summaries
            data = data[data["kernel_class"] != "all"] if len(data) else data
            if len(data) == 0:
                ax.set_title(f"{phase} step", loc="left")
                shipped = " in the shipped reference" if results.origin(gpu) == SHIPPED else ""
                say(ax, f"no {phase}-step profile for {gpu}{shipped}")
                continue
            order = variant_order(data["variant"])
            left = np.zeros(len(order))
            for kernel_class in CLASS_NAMES:
                shares = np.array([float(data[(data["variant"] == v) & (data["kernel_class"] == kernel_class)]
                                         ["time_share"].sum()) for v in order]) * 100
                if shares.any():
                    used.add(kernel_class)
                    ax.barh(range(len(order)), shares, left=left, height=0.7, color=CLASS_COLORS[kernel_class])
                    left += shares
            tools = [data[data["variant"] == v]["tool"].iloc[0] for v in order]
            ax.set_yticks(range(len(order)), [f"{v} [{TOOL_TAGS.get(t, t)}]" for v, t in zip(order, tools)],
                          fontsize=8)
            ax.set_ylim(len(order) - 0.5, -0.5)
            present = list(dict.fromkeys(tools))
            ax.set_title(f"{phase} step; " + ", ".join(f"[{TOOL_TAGS.get(t, t)}] {TOOL_NAMES.get(t, t)}"
                                                       for t in present), loc="left", fontsize=10)
            cpu = not results.gpu_device(gpu)
            ax.set_xlabel("share of CPU operator self time (%)" if cpu else "share of GPU kernel time (%)")
            ax.set_xlim(0, 100)
    class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig


def _top_classes(run: pd.DataFrame, n: int = 2) -> str:
    run = run[run["kernel_class"] != "all"].sort_values("time_share", ascending=False).head(n)
    return join_words([f"{class_words(row.kernel_class)} {pct(row.time_share)}" for row in run.itertuples()])


def describe(context: Context) -> str:
    inputs = context.inputs
    said = []
    for phase in ("train", "sample"):
        rows = inputs.class_rows(phase)
        for gpu, runs in rows.groupby("gpu", sort=False) if len(rows) else []:
            parts = []
            for variant in ("baseline", *PAPER_VARIANTS):
                run = runs[runs["variant"] == variant]
                if len(run):
                    parts.append(f"{variant}: {_top_classes(run)}")
            if parts:
                said.append(f"In a {'training' if phase == 'train' else 'sampling'} step on {gpu} "
                            f"({runs['tool'].iloc[0]}), the two largest classes are " + "; ".join(parts) + ".")
    return " ".join(said) or "No kernel profile was collected."
