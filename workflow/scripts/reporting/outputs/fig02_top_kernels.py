"""fig02: the kernels that dominate a step's time (the training step where profiled), with class and precision."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from profiling.kernels import CLASS_NAMES

from ..panels import (TOOL_NAMES, bars_height, class_color, class_legend, mark_as, panel_title, rows_figure,
                      say)
from ..prose import Context, class_words, pct
from ..results import preferred_tool, variant_order


def focus_variant(variants) -> str | None:
    """The variant a single-variant panel shows: tf32 (what most users run), else baseline, else the first."""
    variants = list(variants)
    for choice in ("tf32", "baseline"):
        if choice in variants:
            return choice
    return variant_order(variants)[0] if variants else None


def top_kernels(kernels: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The `n` kernels (by short name, class and precision) with the largest summed time."""
    grouped = (kernels.groupby(["short_name", "kernel_class", "precision"], dropna=False)
               .agg(time_ns=("duration_ns", "sum"), launches=("instances", "sum")).reset_index())
    return grouped.sort_values(["time_ns", "short_name"], ascending=[False, True]).head(n).reset_index(drop=True)


def kernel_label(name: str, width: int = 56) -> str:
    """A kernel's short name cut to `width` characters, keeping its tile size (what tells cuDNN kernels apart)."""
    name = str(name)
    if len(name) <= width:
        return name
    tile = re.search(r"tilesize\w+?(?=_|$)", name)
    tail = "..." + tile.group(0) if tile else "..."
    return name[: width - len(tail)] + tail


def build(job, n: int = 10):
    results = job.results
    kernels = results.kernels()
    labels = results.labels()
    fig, axes = rows_figure([panel_title(results, g) for g in labels], 1, height=bars_height(n))
    used = set()
    for gpu, (ax,) in zip(labels, axes):
        data = kernels[kernels["gpu"] == gpu] if len(kernels) else kernels
        phase = "train" if len(data) and (data["phase"] == "train").any() else (
            data["phase"].iloc[0] if len(data) else "train")
        data = data[data["phase"] == phase] if len(data) else data
        variant = focus_variant(data["variant"].unique()) if len(data) else None
        if variant is None:
            ax.set_title("top kernels", loc="left")
            say(ax, f"no per-kernel profile for {gpu}")
            continue
        data = preferred_tool(data[data["variant"] == variant])
        tool = data["tool"].iloc[0]
        top = top_kernels(data, n)
        used.update(top["kernel_class"])
        names = [f"{kernel_label(s)}{'' if p in ('unknown', None) else f' [{p}]'} x{l}"
                 for s, p, l in zip(top["short_name"], top["precision"], top["launches"])]
        y = np.arange(len(top))[::-1]
        for yi, width, kernel_class in zip(y, top["time_ns"] / 1e6, top["kernel_class"]):
            mark_as(ax.barh([yi], [width], color=class_color(kernel_class)), "class", kernel_class)
        ax.set_yticks(y, names)
        what = "CPU operator self time" if not results.gpu_device(gpu) else "summed kernel time"
        ax.set_xlabel(f"{what} in one {phase} step (ms)\nkernels as name [precision] x launches")
        ax.set_title(f"top {len(top)}: {variant}, {phase} step, {TOOL_NAMES.get(tool, tool)}", loc="left")
    class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig


def describe(context: Context) -> str:
    inputs = context.inputs
    kernels = inputs.result("kernels")
    if kernels.empty:
        return "The top kernels are read from the collected kernel table, which this article was not given."
    said = []
    for (gpu, variant), run in kernels[kernels["phase"] == "train"].groupby(["gpu", "variant"], sort=False):
        if variant != "baseline" and variant != "tf32":
            continue
        tool = "ncu" if "ncu" in set(run["tool"]) else run["tool"].iloc[0]
        run = run[run["tool"] == tool]
        per_name = run.groupby(["short_name", "kernel_class"], as_index=False)["duration_ns"].sum()
        total = float(run["duration_ns"].sum())
        if total <= 0 or per_name.empty:
            continue
        top = per_name.sort_values("duration_ns", ascending=False).iloc[0]
        top5 = per_name.sort_values("duration_ns", ascending=False).head(5)["duration_ns"].sum() / total
        said.append(f"on {gpu} with {variant}, `{str(top['short_name'])[:60]}` ({class_words(top['kernel_class'])}) "
                    f"takes {pct(top['duration_ns'] / total)} of the training step and the five longest kernels "
                    f"{pct(top5)}")
    return ("Few kernels carry most of the time: " + "; ".join(said) + ".") if said else \
        "No training step has a kernel profile."
