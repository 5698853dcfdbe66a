"""fig01: share of kernel time per kernel class, per variant, for the training and the sampling step."""

from __future__ import annotations

import numpy as np

from profiling.kernels import CLASS_NAMES

from ..panels import (CLASS_COLORS, TOOL_NAMES, TOOL_TAGS, bars_height, class_legend, panel_title, rows_figure,
                      say)
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
