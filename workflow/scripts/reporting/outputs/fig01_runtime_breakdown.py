"""fig01: share of kernel time per kernel class, per variant, for the training and the sampling step."""

from __future__ import annotations

import numpy as np

from profiling.kernels import CLASS_NAMES

from ..panels import CLASS_COLORS, TOOL_NAMES, class_legend, rows_figure, say, xticks
from ..results import SHIPPED, preferred_tool, variant_order


def build(job):
    results = job.results
    summaries = results.table("summaries")
    summaries = preferred_tool(summaries) if len(summaries) else summaries
    labels, phases = results.labels(), results.phases()
    fig, axes = rows_figure([results.panel_label(g) for g in labels], len(phases))
    used = set()
    for gpu, row in zip(labels, axes):
        for phase, ax in zip(phases, row):
            data = summaries[(summaries["gpu"] == gpu) & (summaries["phase"] == phase)] if len(summaries) else summaries
            data = data[data["kernel_class"] != "all"] if len(data) else data
            ax.set_title(f"{phase} step", loc="left")
            if len(data) == 0:
                shipped = " in the shipped reference" if results.origin(gpu) == SHIPPED else ""
                say(ax, f"no {phase}-step profile for {gpu}{shipped}")
                continue
            order = variant_order(data["variant"])
            bottom = np.zeros(len(order))
            for kernel_class in CLASS_NAMES:
                shares = np.array([float(data[(data["variant"] == v) & (data["kernel_class"] == kernel_class)]
                                         ["time_share"].sum()) for v in order]) * 100
                if shares.any():
                    used.add(kernel_class)
                    ax.bar(range(len(order)), shares, bottom=bottom, color=CLASS_COLORS[kernel_class])
                    bottom += shares
            tools = [data[data["variant"] == v]["tool"].iloc[0] for v in order]
            xticks(ax, [f"{v}\n({TOOL_NAMES.get(t, t)})" for v, t in zip(order, tools)])
            cpu = not results.gpu_device(gpu)
            ax.set_ylabel("share of CPU operator self time (%)" if cpu else "share of GPU kernel time (%)")
            ax.set_ylim(0, 100)
    class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig
