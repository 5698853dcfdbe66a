"""fig04: DRAM traffic and L1/L2 hit rates per kernel class and variant."""

from __future__ import annotations

import math

import pandas as pd

from profiling.kernels import CLASS_NAMES

from ..derived import weighted_mean
from ..panels import (absent_reason, bars_height, grouped_barh, has, panel_title, rows_figure,
                      rows_with_data, say)
from ..prose import Context, class_words, num, pct


def memory_by_class(kernels: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (variant, kernel_class), group in kernels.groupby(["variant", "kernel_class"]):
        dram = sum(float(group[c].fillna(0).sum()) for c in ("dram_read_bytes", "dram_write_bytes") if c in group)
        rows.append({"variant": variant, "kernel_class": kernel_class, "dram_gb": dram / 1e9,
                     "l2_hit_pct": weighted_mean(group, "l2_hit_pct") if "l2_hit_pct" in group else math.nan,
                     "l1_hit_pct": weighted_mean(group, "l1_hit_pct") if "l1_hit_pct" in group else math.nan})
    return pd.DataFrame(rows)


PANELS = [("dram_gb", ["dram_read_bytes"], "DRAM traffic, read + write (GB)", "DRAM traffic counters"),
          ("l2_hit_pct", ["l2_hit_pct"], "L2 hit rate (%, time-weighted)", "L2 hit-rate counters"),
          ("l1_hit_pct", ["l1_hit_pct"], "L1 hit rate (%, time-weighted)", "L1 hit-rate counters")]


def build(job):
    results = job.results
    kernels = results.kernels(["ncu"])
    memory = ["dram_read_bytes", "l2_hit_pct", "l1_hit_pct"]
    rows, left_out = rows_with_data(results, lambda g, p: any(has(results.ncu_rows(g, p), [c]) for c in memory),
                                    "DRAM or cache counters")
    sizes = []
    for gpu, phase in rows:
        data = results.ncu_rows(gpu, phase)
        sizes.append(data["kernel_class"].nunique() * max(data["variant"].nunique(), 1) if len(data) else 1)
    fig, axes = rows_figure([panel_title(results, g, p) for g, p in rows], 3,
                            height=[bars_height(n, per=0.09) for n in sizes], left_out=left_out, sharey=True)
    for (gpu, phase), row in zip(rows, axes):
        data = results.ncu_rows(gpu, phase)
        table = memory_by_class(data) if len(data) else pd.DataFrame()
        drawn = [column for column, needs, _, _ in PANELS if has(data, needs)]
        for (column, needs, xlabel, what), ax in zip(PANELS, row):
            ax.set_title(xlabel.split(",")[0].split(" (")[0], loc="left")
            if not has(data, needs):
                say(ax, absent_reason(results, gpu, phase, what))
                continue
            classes = [c for c in CLASS_NAMES if c in set(table["kernel_class"])]
            # The variants' legend once per row, beside its last drawn panel.
            grouped_barh(ax, table, "kernel_class", column, classes, legend=column == drawn[-1])
            ax.set_xlabel(xlabel)
            if column != "dram_gb":
                ax.set_xlim(0, 100)
    return fig


def describe(context: Context) -> str:
    inputs = context.inputs
    rows = inputs.class_rows("sample")
    rows = rows[(rows["kernel_class"] != "all") & rows["dram_bytes"].notna()] if len(rows) else rows
    if rows.empty:
        return "No sampling step was profiled with Nsight Compute's memory counters."
    said = []
    for (gpu, variant), run in rows.groupby(["gpu", "variant"], sort=False):
        total = float(run["dram_bytes"].sum())
        top = run.loc[run["dram_bytes"].idxmax()]
        said.append(f"{variant} on {gpu} moves {num(total / 1e9)} GB to and from DRAM, "
                    f"{pct(top['dram_bytes'] / total)} of it in {class_words(top['kernel_class'])} kernels")
    return "Per sampling step: " + "; ".join(said) + "."
