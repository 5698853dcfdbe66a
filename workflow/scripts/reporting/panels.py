"""Building blocks shared by the figures: one row of panels per hardware label (and phase), colours per kernel
class and variant, grouped bars, and the sentence a panel without data shows instead."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from profiling.kernels import CLASS_NAMES

from .results import SHIPPED, Results, variant_order
from .style import note

TOOL_NAMES = {"ncu": "Nsight Compute", "nsys": "Nsight Systems", "torch": "torch.profiler"}
# tab10 holds ten colours and there are eleven classes: the eleventh ("other", last) is a light grey unlike any of them.
_PALETTE = plt.get_cmap("tab10").colors + ("#c7c7c7",)
CLASS_COLORS = {name: _PALETTE[k % len(_PALETTE)] for k, name in enumerate(CLASS_NAMES)}
_VARIANT_COLORS = dict(zip(["baseline", "torch_defaults", "tf32", "channels_last", "tf32_channels_last"],
                           plt.get_cmap("Set2").colors))


def variant_color(variant: str, k: int):
    return _VARIANT_COLORS.get(variant, plt.get_cmap("Dark2").colors[k % 8])


def say(ax, text: str) -> None:
    note(ax, "\n".join(textwrap.wrap(text, 42)))


def xticks(ax, labels) -> None:
    ax.set_xticks(range(len(labels)), labels, rotation=25, ha="right")


def has(frame: pd.DataFrame, columns) -> bool:
    return len(frame) > 0 and all(c in frame.columns and frame[c].notna().any() for c in columns)


def ncu_rows(kernels: pd.DataFrame, gpu: str, phase: str) -> pd.DataFrame:
    if kernels.empty:
        return kernels
    return kernels[(kernels["gpu"] == gpu) & (kernels["phase"] == phase) & (kernels["tool"] == "ncu")]


def absent_reason(results: Results, gpu: str, phase: str, what: str = "") -> str:
    """Why a label has no Nsight Compute numbers for `phase` (or why `what` is missing from its ncu profile)."""
    tools = results.tools(gpu, phase)
    shipped = ", shipped reference" if results.origin(gpu) == SHIPPED else ""
    if "ncu" in tools:
        return (f"Nsight Compute profile of the {phase} step on {gpu} has no {what}: not collected for that "
                f"phase (profiling.ncu.by_phase)")
    if not tools:
        return f"no Nsight Compute data for {gpu} ({phase}{shipped}): no {phase}-step profile"
    names = " and ".join(TOOL_NAMES.get(t, t) for t in tools)
    verb = "measures" if len(tools) == 1 else "measure"
    return f"no Nsight Compute data for {gpu} ({phase}{shipped}): {names} {verb} durations only"


def rows_figure(titles: list[str], ncols: int, width: float = 5.2, height: float = 3.9, ratios=None,
                left_out: list[str] = ()):
    """One subfigure per row (titled), `ncols` axes in each; `left_out` (rows not drawn, with the reason) goes into
    a last, short row, so a figure never hides a label or phase without saying why."""
    chars = int(width * ncols * 12)  # about what fits across the figure at 9 pt
    notes = [line for text in left_out for line in textwrap.wrap(f"- {text}", chars, subsequent_indent="  ")]
    extra = 0.35 + 0.2 * len(notes) if notes else 0
    fig = plt.figure(figsize=(width * ncols, height * len(titles) + extra), layout="constrained")
    heights = [height] * len(titles) + ([extra] if notes else [])
    subfigs = fig.subfigures(len(heights), 1, squeeze=False, height_ratios=heights)[:, 0]
    axes = []
    for subfig, title in zip(subfigs, titles):
        subfig.suptitle(title, x=0.01, ha="left", fontsize=11, fontweight="bold")
        axes.append(subfig.subplots(1, ncols, squeeze=False, width_ratios=ratios)[0])
    if notes:
        subfigs[-1].text(0.01, 0.5, "Not drawn:\n" + "\n".join(notes), ha="left", va="center", fontsize=9)
    return fig, axes


def rows_with_data(results: Results, has_data, what: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(gpu, phase) rows for which has_data(gpu, phase) holds, and the reasons for the others. When no row has
    data, every row is kept (each then states its reason on its own panels)."""
    rows = [(g, p) for g in results.labels() for p in results.phases()]
    kept = [row for row in rows if has_data(*row)]
    if not kept:
        return rows, []
    return kept, [absent_reason(results, gpu, phase, what) for gpu, phase in rows if (gpu, phase) not in kept]


def class_legend(fig, classes) -> None:
    handles = [plt.Rectangle((0, 0), 1, 1, color=CLASS_COLORS.get(c, "grey")) for c in classes]
    if handles:
        per_row = max(2, int(fig.get_figwidth() / 1.7))  # class names are up to 17 characters at 9 pt
        fig.legend(handles, classes, loc="outside lower center", ncol=min(per_row, len(handles)),
                   title="kernel class", fontsize=9)


def grouped_barh(ax, frame: pd.DataFrame, category: str, value: str, categories: list) -> None:
    """One horizontal bar per variant for each of `categories` (bottom to top), side by side."""
    order = variant_order(frame["variant"])
    height = 0.8 / len(order)
    for k, variant in enumerate(order):
        values = frame[frame["variant"] == variant].set_index(category).reindex(categories)[value]
        ax.barh(np.arange(len(categories)) + (k - (len(order) - 1) / 2) * height, values, height=height,
                color=variant_color(variant, k), label=variant)
    ax.set_yticks(range(len(categories)), categories, fontsize=8)


def grouped_bars(ax, frame: pd.DataFrame, column: str, categories: list[str], ylabel: str) -> None:
    """One vertical bar per variant for each kernel class of `categories`, side by side."""
    order = variant_order(frame["variant"])
    width = 0.8 / max(len(order), 1)
    for k, variant in enumerate(order):
        values = frame[frame["variant"] == variant].set_index("kernel_class").reindex(categories)[column]
        ax.bar(np.arange(len(categories)) + (k - (len(order) - 1) / 2) * width, values, width=width,
               color=variant_color(variant, k), label=variant)
    xticks(ax, categories)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def variant_bars(ax, order: list[str], values, fmt: str | None = None) -> None:
    """One bar per variant in its colour, optionally annotated with `fmt`."""
    ax.bar(range(len(order)), values, color=[variant_color(v, k) for k, v in enumerate(order)])
    if fmt:
        for x, value in enumerate(values):
            if not pd.isna(value):
                ax.annotate(fmt.format(value), (x, value), ha="center", va="bottom", fontsize=8)
    xticks(ax, order)
