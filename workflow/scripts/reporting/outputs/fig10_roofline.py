"""fig10 (beyond the paper): the top kernels of each step on the device's roofline: the datasheet's ceilings and the
device-to-device copy bandwidth measured on the device (device_rates.json, as the memory floor uses it)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import yaml

from profiling.instructions import kernel_flop
from profiling.kernels import CLASS_NAMES

from matplotlib.lines import Line2D

from ..panels import (CLASS_COLORS, NOTE_CHARS_PER_INCH, absent_reason, class_legend, decade_ticks, fit, has, mark_as,
                      panel_title, rows_figure, rows_with_data, say)
from ..prose import Context, num, pct
from ..results import variant_order
from ..style import PRINT_WIDTH_IN

MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def peaks_for(peaks: dict, gpu: str, device: str, hardware: dict | None = None) -> dict | None:
    """Datasheet ceilings of a label: by label, else those of the listed label whose `name_pattern` (the config's
    `hardware`, the one home of the device-name patterns) matches the device name."""
    if gpu in peaks:
        return peaks[gpu]
    for label, entry in peaks.items():
        pattern = (hardware or {}).get(label, {}).get("name_pattern")
        if pattern and re.search(pattern, device or "", re.I):
            return entry
    return None


def roofline_points(kernels: pd.DataFrame, top: int = 12) -> pd.DataFrame:
    """Per variant, the `top` kernels by time (grouped by short name) whose FLOPs and DRAM bytes are known: FLOP,
    DRAM bytes read + written, intensity (FLOP/byte) and throughput (GFLOP/s)."""
    frame = kernels.assign(flop=kernel_flop(kernels))
    frame["bytes"] = sum(frame[c].astype(float) for c in ("dram_read_bytes", "dram_write_bytes") if c in frame)
    grouped = frame.groupby(["variant", "short_name", "kernel_class"], as_index=False).agg(
        flop=("flop", lambda v: v.sum(min_count=len(v))), bytes=("bytes", lambda v: v.sum(min_count=len(v))),
        duration_ns=("duration_ns", "sum"))
    grouped = grouped.sort_values(["variant", "duration_ns", "short_name"], ascending=[True, False, True])
    grouped = grouped.groupby("variant").head(top)
    grouped = grouped[(grouped["flop"] > 0) & (grouped["bytes"] > 0) & (grouped["duration_ns"] > 0)]
    grouped["intensity"] = grouped["flop"] / grouped["bytes"]
    grouped["gflops"] = grouped["flop"] / grouped["duration_ns"]
    return grouped.reset_index(drop=True)


def uncounted_share(kernels: pd.DataFrame) -> float:
    """Share of the kernel time whose FLOPs could not be counted (see kernel_flop)."""
    total = float(kernels["duration_ns"].sum())
    missing = float(kernels.loc[kernel_flop(kernels).isna(), "duration_ns"].sum())
    return missing / total if total > 0 else np.nan


CEILINGS = (("fp32_tflops", "FP32", "-."), ("tf32_tensor_tflops", "TF32 tensor", "--"),
            ("bf16_tensor_tflops", "BF16 tensor", ":"))
# A point more than this many decades below the rest is named under the panel instead of stretching its axis.
OUTLIER_DECADES = 1.0


def throughput_floor(gflops: pd.Series) -> float:
    """The y axis's lower end: below the lowest point, unless a few lowest points (at most a tenth) lie more than
    OUTLIER_DECADES below the next one; then below the lowest of the rest."""
    values = np.sort(np.log10(gflops[gflops > 0].to_numpy(dtype=float)))
    start = 0
    while start + 1 < len(values) and values[start + 1] - values[start] > OUTLIER_DECADES \
            and start + 1 <= len(values) // 10:
        start += 1
    return 10 ** (np.floor(values[start] * 2) / 2 - 0.25) if len(values) else 1.0


# The measured copy bandwidth's slope: grey, apart from the datasheet's black DRAM slope just above it.
COPY_COLOUR = "0.55"


def measured_copy(floors: pd.DataFrame, gpu: str) -> float | None:
    """The label's measured device-to-device copy bandwidth in GB/s (its device_rates.json, as the collected
    memory_floor table carries it), or None where it was not measured."""
    if floors.empty:
        return None
    values = floors.loc[floors["gpu"] == gpu, "copy_gb_per_s"].astype(float).dropna()
    return float(values.iloc[0]) if len(values) else None


def _ceilings(ax, ceiling: dict | None, copy_gbs: float | None, lo: float, hi: float) -> list:
    """The datasheet ceilings: the DRAM slope once (solid) and each compute peak flat from where the slope meets it;
    the measured copy bandwidth's slope (solid grey) where it was measured: every one a legend entry (no text in the
    panel, where it would cross lines or points). Returns the handles."""
    ceiling = ceiling or {}
    bw = ceiling.get("dram_bandwidth_gbs") or copy_gbs
    peaks = [(key, text, style, ceiling[key]) for key, text, style in CEILINGS if ceiling.get(key)]
    top = max([value for *_, value in peaks], default=hi * bw / 1e3) * 1e3  # GFLOP/s
    handles = []
    if ceiling.get("dram_bandwidth_gbs"):
        (slope,) = ax.plot([lo, top / bw], [lo * bw, top], "-", color="black", linewidth=1.2,
                           label=f"DRAM {bw:g} GB/s (slope)")
        handles.append(slope)
    if copy_gbs:
        (copy,) = ax.plot([lo, top / copy_gbs], [lo * copy_gbs, top], "-", color=COPY_COLOUR, linewidth=1.2,
                          label=f"copy {copy_gbs:.4g} GB/s, measured (slope)")
        handles.append(copy)
    for key, text, style, value in peaks:
        (flat,) = ax.plot([value * 1e3 / bw, hi], [value * 1e3] * 2, style, color="black", linewidth=1.2,
                          label=f"{text} peak {value:g} TFLOP/s")
        handles.append(flat)
    return handles


def build(job):
    results = job.results
    peaks = yaml.safe_load(job.files["peaks"].read_text())
    kernels = results.kernels(["ncu"])
    floors = results.table("memory_floor")
    needs = ["dram_read_bytes"]
    what = "FLOP or DRAM counters"

    def drawable(gpu: str, phase: str) -> bool:
        data = results.ncu_rows(gpu, phase)
        return has(data, needs) and not roofline_points(data).empty

    rows, left_out = rows_with_data(results, drawable, what)
    fig, axes = rows_figure([panel_title(results, g, p) for g, p in rows], 1, height=4.4, left_out=left_out)
    used = set()
    for (gpu, phase), (ax,) in zip(rows, axes):
        ceiling = peaks_for(peaks, gpu, results.hardware.set_index("gpu").loc[gpu, "device"],
                            job.settings.get("hardware"))
        ax.set_title("top kernels on the roofline, Nsight Compute", loc="left")
        data = results.ncu_rows(gpu, phase)
        if not has(data, needs):
            say(ax, absent_reason(results, gpu, phase, "DRAM counters"))
            continue
        points = roofline_points(data)
        if points.empty:
            say(ax, f"no kernel of the {phase} step on {gpu} with counted FLOPs and DRAM traffic")
            continue
        markers = []
        for k, variant in enumerate(variant_order(points["variant"])):
            part = points[points["variant"] == variant]
            marker = MARKERS[k % len(MARKERS)]
            for kernel_class, group in part.groupby("kernel_class", sort=False):
                used.add(kernel_class)
                dots = ax.scatter(group["intensity"], group["gflops"], marker=marker, s=30,
                                  color=CLASS_COLORS.get(kernel_class, "grey"), edgecolors="black", linewidths=0.4,
                                  label=variant)
                mark_as([dots], "class", kernel_class)
            markers.append(Line2D([], [], marker=marker, color="black", markerfacecolor="white", markeredgewidth=0.8,
                                  linestyle="none",
                                  label=variant))
        ax.set_xscale("log")
        ax.set_yscale("log")
        lo = min(points["intensity"].min() / 3, 0.1)
        hi = max(points["intensity"].max() * 3, 1000)
        floor = throughput_floor(points["gflops"])
        copy_gbs = measured_copy(floors, gpu)
        handles = _ceilings(ax, ceiling, copy_gbs, lo, hi) if ceiling or copy_gbs else []
        top = max([h.get_ydata().max() for h in handles] + [points["gflops"].max()])
        ax.set_xlim(lo, hi)
        ax.set_ylim(floor, top * 3)
        decade_ticks(ax.xaxis)
        decade_ticks(ax.yaxis)
        notes = []
        below = points[points["gflops"] < floor]
        if len(below):
            notes.append("below the axis: " + "; ".join(f"{row.kernel_class} ({row.variant}) at "
                                                        f"{row.gflops:.2g} GFLOP/s" for row in below.itertuples()))
        if not ceiling:
            notes.append(f"no datasheet ceilings for {gpu} in data/gpu_peaks.yaml")
        missing = {v: uncounted_share(run) for v, run in data.groupby("variant")}
        missing = {v: share for v, share in missing.items() if share > 0.005}
        if missing:
            text = ", ".join(f"{v} {share:.0%}" for v, share in sorted(missing.items()))
            notes.append(f"not drawn, FLOPs not counted (tensor kernels profiled without tensor-op counters): {text} "
                         "of kernel time")
        ax.set_xlabel(fit("\n".join(["arithmetic intensity (FLOP per DRAM byte)"] + notes), PRINT_WIDTH_IN - 1.0,
                          NOTE_CHARS_PER_INCH), loc="left")
        ax.set_ylabel("achieved GFLOP/s (tensor + FP32)")
        first = ax.legend(handles=markers, title="variant (marker)", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                          borderaxespad=0)
        if handles:
            ax.add_artist(first)
            ax.legend(handles=handles, title="ceilings (datasheet; copy measured)", loc="lower left",
                      bbox_to_anchor=(1.02, 0.0), borderaxespad=0, handlelength=2.5)
    class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig


def describe(context: Context) -> str:
    inputs = context.inputs
    rows = inputs.class_rows("sample")
    rows = rows[(rows["kernel_class"] == "all") & rows["fp32_flop"].notna()] if len(rows) else rows
    if rows.empty:
        return "No sampling step was profiled with the FLOP counters the roofline needs."
    said = []
    for row in rows.itertuples():
        rate = row.fp32_flop / (row.time_ns * 1e-9) / 1e12
        peak = context.peaks.get(row.gpu, {}).get("fp32_tflops")
        said.append(f"{row.variant} on {row.gpu} {num(rate)} TFLOP/s of FP32 arithmetic over the whole step"
                    + (f" ({pct(rate / peak, 0)} of the {num(peak)} TFLOP/s datasheet peak)" if peak else ""))
    return ("The roofline places each kernel class by its arithmetic intensity and achieved rate under the "
            "device's datasheet ceilings (not measurements). Averaged over a sampling step: " + "; ".join(said)
            + ". Tensor-core work appears where the tensor-op counters were collected.")
