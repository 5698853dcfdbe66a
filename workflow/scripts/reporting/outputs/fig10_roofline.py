"""fig10 (beyond the paper): the top kernels of each step on the device's roofline."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import yaml

from profiling.kernels import CLASS_NAMES

from ..panels import CLASS_COLORS, absent_reason, class_legend, has, ncu_rows, rows_figure, rows_with_data, say
from ..results import variant_order

MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def peaks_for(peaks: dict, gpu: str, device: str) -> dict | None:
    """Datasheet ceilings of a label: by label, else by a name pattern matched against the device name."""
    if gpu in peaks:
        return peaks[gpu]
    for entry in peaks.values():
        if isinstance(entry, dict) and entry.get("name_pattern") and re.search(entry["name_pattern"], device or "", re.I):
            return entry
    return None


def roofline_points(kernels: pd.DataFrame, top: int = 12) -> pd.DataFrame:
    """Per variant, the `top` kernels by time (grouped by short name): FP32 FLOP from thread-level FFMA x 2 + FADD +
    FMUL, DRAM bytes read + written, intensity (FLOP/byte) and throughput (GFLOP/s)."""
    frame = kernels.copy()
    for column in ("thread_inst_ffma", "thread_inst_fadd", "thread_inst_fmul", "dram_read_bytes", "dram_write_bytes"):
        frame[column] = frame[column].fillna(0) if column in frame else 0.0
    frame["flop"] = 2 * frame["thread_inst_ffma"] + frame["thread_inst_fadd"] + frame["thread_inst_fmul"]
    frame["bytes"] = frame["dram_read_bytes"] + frame["dram_write_bytes"]
    grouped = frame.groupby(["variant", "short_name", "kernel_class"], as_index=False)[["flop", "bytes", "duration_ns"]].sum()
    grouped = grouped.sort_values(["variant", "duration_ns", "short_name"], ascending=[True, False, True])
    grouped = grouped.groupby("variant").head(top)
    grouped = grouped[(grouped["flop"] > 0) & (grouped["bytes"] > 0) & (grouped["duration_ns"] > 0)]
    grouped["intensity"] = grouped["flop"] / grouped["bytes"]
    grouped["gflops"] = grouped["flop"] / grouped["duration_ns"]
    return grouped.reset_index(drop=True)


def build(job):
    results = job.results
    peaks = yaml.safe_load(job.files["peaks"].read_text())
    kernels = results.kernels(["ncu"])
    needs = ["thread_inst_ffma", "dram_read_bytes"]
    what = "FP32 instruction or DRAM counters"
    rows, left_out = rows_with_data(results, lambda g, p: has(ncu_rows(kernels, g, p), needs), what)
    fig, axes = rows_figure([f"{results.panel_label(g)} - {p} step" for g, p in rows], 1, width=7.5, height=5,
                            left_out=left_out)
    used = set()
    for (gpu, phase), (ax,) in zip(rows, axes):
        ceiling = peaks_for(peaks, gpu, results.hardware.set_index("gpu").loc[gpu, "device"])
        ax.set_title("top kernels on the roofline, Nsight Compute", loc="left")
        data = ncu_rows(kernels, gpu, phase)
        if not has(data, needs):
            say(ax, absent_reason(results, gpu, phase, what))
            continue
        points = roofline_points(data)
        if points.empty:
            say(ax, f"no kernel with FP32 FLOP and DRAM traffic in the {phase} step on {gpu}")
            continue
        for k, variant in enumerate(variant_order(points["variant"])):
            part = points[points["variant"] == variant]
            used.update(part["kernel_class"])
            ax.scatter(part["intensity"], part["gflops"], marker=MARKERS[k % len(MARKERS)], s=30,
                       c=[CLASS_COLORS.get(c, "grey") for c in part["kernel_class"]], edgecolors="black",
                       linewidths=0.4, label=variant)
        ax.set_xscale("log")
        ax.set_yscale("log")
        lo = min(points["intensity"].min() / 3, 0.1)
        hi = max(points["intensity"].max() * 3, 1000)
        if ceiling:
            xs = np.logspace(np.log10(lo), np.log10(hi), 200)
            bw = ceiling["dram_bandwidth_gbs"]
            for value, text, style in ((ceiling.get("fp32_tflops"), "FP32", "-"),
                                       (ceiling.get("tf32_tensor_tflops"), "TF32 tensor", "--")):
                if value:
                    ax.plot(xs, np.minimum(xs * bw, value * 1e3), style, color="black", linewidth=1)
                    ax.annotate(f"{text} peak {value:g} TFLOP/s (datasheet)", (hi, value * 1e3),
                                ha="right", va="bottom", fontsize=7)
            ax.annotate(f"DRAM {bw:g} GB/s (datasheet)", (lo * 1.5, lo * 1.5 * bw), fontsize=7, va="bottom")
        else:
            ax.annotate(f"no datasheet ceilings for {gpu} in data/gpu_peaks.yaml", (0.02, 0.95),
                        xycoords="axes fraction", fontsize=8, va="top")
        ax.set_xlim(lo, hi)
        ax.set_xlabel("arithmetic intensity (FP32 FLOP per DRAM byte)")
        ax.set_ylabel("achieved FP32 throughput (GFLOP/s)")
        legend = ax.legend(fontsize=8, title="variant (marker)", loc="lower right")
        for handle in legend.legend_handles:
            handle.set_facecolor("white")
    class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig
