"""fig01: share of kernel time per kernel class, per variant, for the training and the sampling step."""

from __future__ import annotations

import pandas as pd

from profiling.kernels import CLASS_NAMES

from ..panels import (TOOL_NAMES, TOOL_TAGS, bars_height, class_legend, panel_title, rows_figure, say,
                      stacked_shares)
from ..prose import Context, PAPER_VARIANTS, class_words, join_words, pct
from ..results import SHIPPED, preferred_tool, variant_order


def build(job):
    """One row per hardware label and phase that has a profile (a label without one is named under the rows)."""
    results = job.results
    summaries = results.table("summaries")
    summaries = preferred_tool(summaries) if len(summaries) else summaries
    summaries = summaries[summaries["kernel_class"] != "all"] if len(summaries) else summaries

    def of(gpu: str, phase: str):
        return summaries[(summaries["gpu"] == gpu) & (summaries["phase"] == phase)] if len(summaries) else summaries

    rows = [(g, p) for g in results.labels() for p in results.phases() if len(of(g, p))]
    left_out = [f"no {p}-step profile for {g}{' in the shipped reference' if results.origin(g) == SHIPPED else ''}"
                for g in results.labels() for p in results.phases() if (g, p) not in rows]
    if not rows:  # nothing profiled anywhere: one row that says so
        rows, left_out = [(g, p) for g in results.labels()[:1] for p in results.phases()[:1]], left_out[1:]
    counts = [of(g, p)["variant"].nunique() for g, p in rows]
    fig, axes = rows_figure([panel_title(results, g, p) for g, p in rows], 1, height=[bars_height(n) for n in counts],
                            left_out=left_out)
    used = set()
    for (gpu, phase), (ax,) in zip(rows, axes):
        data = of(gpu, phase)
        if len(data) == 0:
            say(ax, f"no {phase}-step profile for {gpu}")
            continue
        order = variant_order(data["variant"])
        shares = data.pivot_table(index="variant", columns="kernel_class", values="time_share", aggfunc="sum") * 100
        tools = [data[data["variant"] == v]["tool"].iloc[0] for v in order]
        used.update(stacked_shares(ax, order, shares, [f"{v} [{TOOL_TAGS.get(t, t)}]" for v, t in zip(order, tools)]))
        ax.set_title(", ".join(f"[{TOOL_TAGS.get(t, t)}] {TOOL_NAMES.get(t, t)}" for t in dict.fromkeys(tools)),
                     loc="left")
        cpu = not results.gpu_device(gpu)
        ax.set_xlabel("share of CPU operator self time (%)" if cpu else "share of GPU kernel time (%)")
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
