"""The memory floor of a profiled step, beside its FLOP floor: per kernel class and per normalization site, the DRAM
bytes Nsight Compute measured and the time they take at the device's measured copy bandwidth.

Memory-bound kernels (normalization, element-wise, reductions, casts, layout conversions) do almost no arithmetic, so
the FLOP floor says nothing about them; the bytes they move do. Per kernel of a Nsight Compute kernel table
(tables.from_ncu; one row per launch, `instances` 1, so nothing is weighted):

  bytes         dram_read_bytes + dram_write_bytes (ncu's dram__bytes_read.sum + dram__bytes_write.sum, in bytes)
  memory floor  bytes at the device's copy bandwidth (device_rates.json's copy_gb_per_s: a device-to-device copy, its
                read and its write counted, measurement.rates.copy_bandwidth)
  FLOP floor    instructions.kernel_flop (the roofline's FLOPs) at the device's measured bf16 matrix rate
                (bf16_matmul_tflops), the rate of the workflow's FLOP floor (bench, tab07, fig11): a lower bound for
                arithmetic in any precision; none where the FLOPs were not counted
  limit         the larger of the two floors (the memory floor alone where the FLOPs were not counted)

A kernel that moved its bytes faster than the copy does (its measured time below bytes / copy bandwidth: on the H200's
sampling steps a few large element-wise and GEMM kernels, at most 3 % faster) is at its memory limit: its memory
floor is its measured time, and `beyond_copy_kernels` counts it. So no floor exceeds the time it bounds.

A normalization site (norm_sites) is one pass of GroupNorm at one activation size: the normalization kernels of one
name and launch configuration (grid and block size) whose DRAM bytes lie within SITE_BYTES_TOLERANCE of the site's
smallest. Nsight Compute's export names no layer, so the layers of one size fall in one site, and without DRAM bytes
the sites are the launch configurations alone (a kernel that loops over tiles launches one grid at every size).

What the bytes are: Nsight Compute replays each kernel alone, serialised, with every cache flushed before each replay
(its default --cache-control all: profiling.ncu.build_command sets no cache control) and the clocks as found
(--clock-control none). So they are what one kernel moves from a cold L2; in the running step part of an activation
that the kernel before left in L2 need not come from DRAM, and there the floor overstates what the step must move.

`python3 -m profiling.memory_floor KERNELS.parquet DEVICE_RATES.json` prints both tables as Markdown.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .instructions import kernel_flop
from .kernels import CLASS_NAMES

BYTES_COLUMNS = ("dram_read_bytes", "dram_write_bytes")
NORMALIZATION = "normalization"
# Launch configuration of a kernel in the tidy table (ncu's launch__grid_size, launch__block_size).
LAUNCH_COLUMNS = ("launch_grid_size", "launch_block_size")
# Between the spread of one size and the gap between two: on the H200's sampling steps the norm kernels of 1 MB or more
# move their site's bytes to within 1.4 %, and two sizes of one kernel differ by 14 % or more. Below 1 MB the bytes step
# by DRAM sectors (ATen's per-channel ComputeFusedParamsCUDAKernel: 7.9 to 11.8 KB), and a site is a band of 10 %.
SITE_BYTES_TOLERANCE = 0.10

NO_EXPORT = "no memory floor: no Nsight Compute export"
# A metric set without dram__bytes_read.sum and dram__bytes_write.sum: the training steps' one-pass set.
NO_DRAM_BYTES = "no memory floor: no DRAM bytes in its Nsight Compute export"
NO_COPY_BANDWIDTH = "no memory floor: no measured copy bandwidth (device_rates.json)"

CLASS_COLUMNS = [
    "kernel_class",  # a class of kernels.CLASS_NAMES present in the step, then "all"
    "kernels",  # launches
    "time_ns",  # measured, summed over the launches
    "dram_bytes",  # read + written
    "memory_floor_ns",  # the launches' memory floors, summed
    "achieved_gb_per_s",  # dram_bytes / time_ns
    "time_over_memory_floor",  # how far from its memory limit (1: at the copy's rate)
    "beyond_copy_kernels",  # launches that moved their bytes faster than the copy (their floor: their time)
    "flop",  # instructions.kernel_flop, summed; NaN where some launch's FLOPs were not counted
    "flop_floor_ns",  # flop at the bf16 matrix rate; NaN with flop
    "limit_ns",  # per launch the larger floor, summed
    "time_over_limit",
    "binding",  # which floor holds most of limit_ns: memory, flop, or memory (FLOPs not counted)
]
SITE_COLUMNS = ["short_name", "grid_size", "block_size", "kernels", "time_ns", "dram_bytes", "bytes_per_launch",
                "memory_floor_ns", "achieved_gb_per_s", "time_over_memory_floor"]
UNCOUNTED = "memory (FLOPs not counted)"


def reason(kernels: pd.DataFrame | None, copy_gb_per_s: float | None) -> str | None:
    """Why a step has no memory floor (one of the NO_* lines), or None when it has one: `kernels` its Nsight Compute
    kernel table (None or empty: not profiled with Nsight Compute), `copy_gb_per_s` its device's copy bandwidth."""
    if kernels is None or kernels.empty:
        return NO_EXPORT
    missing = _bytes_missing(kernels)
    if missing:
        return missing
    if copy_gb_per_s is None or not math.isfinite(copy_gb_per_s) or copy_gb_per_s <= 0:
        return NO_COPY_BANDWIDTH
    return None


def _bytes_missing(kernels: pd.DataFrame) -> str | None:
    """NO_DRAM_BYTES where no launch has DRAM bytes, a line naming how many lack them where some do, else None."""
    if not set(BYTES_COLUMNS) <= set(kernels.columns) or kernels[list(BYTES_COLUMNS)].isna().all().all():
        return NO_DRAM_BYTES
    gaps = int(kernels[list(BYTES_COLUMNS)].isna().any(axis=1).sum())
    if gaps:
        return f"no memory floor: {gaps} of its {len(kernels)} kernels have no DRAM bytes in its Nsight Compute export"
    return None


def copy_floor(moved: pd.Series, duration_ns: pd.Series, copy_gb_per_s: float) -> tuple[pd.Series, pd.Series]:
    """Per launch, its memory floor (`moved` bytes at the copy bandwidth, never above its measured time) and whether it
    moved them faster than the copy (then at its limit: the floor is its time)."""
    at_copy_rate = moved / copy_gb_per_s  # bytes / (GB/s) = ns
    return np.minimum(at_copy_rate, duration_ns), at_copy_rate > duration_ns


def kernel_floors(kernels: pd.DataFrame, copy_gb_per_s: float, bf16_tflops: float | None) -> pd.DataFrame:
    """Per launch (the rows of `kernels`, same index): bytes, memory_floor_ns, beyond_copy, flop, flop_floor_ns,
    limit_ns and binding (module docstring). Raises ValueError with `reason`'s line where there is no memory floor."""
    why = reason(kernels, copy_gb_per_s)
    if why:
        raise ValueError(why)
    duration = kernels["duration_ns"].astype(float)
    moved = kernels[list(BYTES_COLUMNS)].astype(float).sum(axis=1)
    memory_floor, beyond_copy = copy_floor(moved, duration, copy_gb_per_s)
    flop = kernel_flop(kernels).astype(float)
    rate = bf16_tflops if bf16_tflops and math.isfinite(bf16_tflops) and bf16_tflops > 0 else math.nan
    flop_floor = flop / (rate * 1e3)  # 1 TFLOP/s is 1e3 FLOP per ns (and 1 GB/s one byte per ns)
    limit = np.fmax(memory_floor, flop_floor)  # fmax: the memory floor where the FLOPs were not counted
    binding = np.where(flop_floor.isna(), UNCOUNTED, np.where(flop_floor > memory_floor, "flop", "memory"))
    return pd.DataFrame({"kernel_class": kernels["kernel_class"], "instances": kernels["instances"].astype(int),
                         "duration_ns": duration, "bytes": moved, "memory_floor_ns": memory_floor,
                         "beyond_copy": beyond_copy, "flop": flop, "flop_floor_ns": flop_floor,
                         "limit_ns": limit, "binding": binding}, index=kernels.index)


def _class_row(name: str, floors: pd.DataFrame) -> dict:
    time_ns, moved, memory = (float(floors[c].sum()) for c in ("duration_ns", "bytes", "memory_floor_ns"))
    flop = float(floors["flop"].sum()) if floors["flop"].notna().all() else math.nan
    flop_floor = float(floors["flop_floor_ns"].sum()) if floors["flop_floor_ns"].notna().all() else math.nan
    limit = float(floors["limit_ns"].sum())
    by_binding = floors.groupby("binding")["limit_ns"].sum()
    return {"kernel_class": name, "kernels": int(floors["instances"].sum()), "time_ns": time_ns, "dram_bytes": moved,
            "memory_floor_ns": memory, "achieved_gb_per_s": moved / time_ns if time_ns > 0 else math.nan,
            "time_over_memory_floor": time_ns / memory if memory > 0 else math.nan,
            "beyond_copy_kernels": int(floors["beyond_copy"].sum()), "flop": flop, "flop_floor_ns": flop_floor,
            "limit_ns": limit, "time_over_limit": time_ns / limit if limit > 0 else math.nan,
            "binding": str(by_binding.idxmax()) if len(by_binding) else ""}


def class_floors(kernels: pd.DataFrame, copy_gb_per_s: float, bf16_tflops: float | None) -> pd.DataFrame:
    """One row per kernel class present (CLASS_NAMES order), then "all" (CLASS_COLUMNS). Raises ValueError with
    `reason`'s line where the step has no memory floor."""
    floors = kernel_floors(kernels, copy_gb_per_s, bf16_tflops)
    rows = [_class_row(name, floors[floors["kernel_class"] == name]) for name in CLASS_NAMES
            if (floors["kernel_class"] == name).any()]
    rows.append(_class_row("all", floors))
    return pd.DataFrame(rows, columns=CLASS_COLUMNS)


def site_of(kernels: pd.DataFrame) -> pd.Series:
    """The normalization site of each normalization launch (an integer, the same for the launches of one site; NA for
    the other classes): one name and launch configuration, and where the DRAM bytes were measured, bytes within
    SITE_BYTES_TOLERANCE of the site's smallest (module docstring)."""
    norm = kernels[kernels["kernel_class"] == NORMALIZATION]
    keys = ["short_name", *[c for c in LAUNCH_COLUMNS if c in norm.columns]]
    measured = not norm.empty and _bytes_missing(norm) is None
    moved = norm[list(BYTES_COLUMNS)].astype(float).sum(axis=1) if measured else pd.Series(0.0, index=norm.index)
    site = pd.Series(pd.NA, index=kernels.index, dtype="Int64")
    next_site = 0
    for _, group in norm.groupby(keys, sort=True, dropna=False):
        smallest = None
        for index, size in moved.loc[group.index].sort_values(kind="stable").items():
            if smallest is None or size > smallest * (1 + SITE_BYTES_TOLERANCE):
                smallest, next_site = size, next_site + 1
            site.loc[index] = next_site - 1
    return site


def norm_sites(kernels: pd.DataFrame, copy_gb_per_s: float | None) -> pd.DataFrame:
    """The normalization sites of a step (SITE_COLUMNS), longest first: launches, measured time, DRAM bytes (in all
    and per launch), memory floor, achieved bandwidth and time over floor. Without DRAM bytes or a copy bandwidth
    (`reason`), the sites of the launch configurations with their times, the byte columns NaN."""
    site = site_of(kernels)
    norm = kernels[site.notna()]
    measured = reason(norm, copy_gb_per_s) is None
    floors = kernel_floors(norm, copy_gb_per_s, None) if measured else None
    rows = []
    for number, group in norm.groupby(site[site.notna()], sort=True):
        time_ns = float(group["duration_ns"].sum())
        first = group.iloc[0]
        row = {"short_name": first["short_name"], "grid_size": first.get("launch_grid_size", math.nan),
               "block_size": first.get("launch_block_size", math.nan), "kernels": int(group["instances"].sum()),
               "time_ns": time_ns, **dict.fromkeys(SITE_COLUMNS[5:], math.nan)}
        if floors is not None:
            mine = floors.loc[group.index]
            moved, memory = float(mine["bytes"].sum()), float(mine["memory_floor_ns"].sum())
            row.update(dram_bytes=moved, bytes_per_launch=float(mine["bytes"].median()), memory_floor_ns=memory,
                       achieved_gb_per_s=moved / time_ns if time_ns > 0 else math.nan,
                       time_over_memory_floor=time_ns / memory if memory > 0 else math.nan)
        rows.append(row)
    sites = pd.DataFrame(rows, columns=SITE_COLUMNS)
    return sites.sort_values(["time_ns", "short_name"], ascending=[False, True], kind="stable").reset_index(drop=True)


def _number(value: float, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def markdown(kernels: pd.DataFrame, rates: dict, top_sites: int = 8) -> str:
    """The per-class table and the `top_sites` longest normalization sites of one step, as Markdown."""
    copy, bf16 = rates.get("copy_gb_per_s"), rates.get("bf16_matmul_tflops")
    lines = [f"Copy bandwidth {_number(copy, '.4g')} GB/s, bf16 matrix rate {_number(bf16, '.4g')} TFLOP/s "
             "(device_rates.json).", ""]
    why = reason(kernels, copy)
    if why:
        lines += [why + ".", ""]
    else:
        lines += ["| class | kernels | time (ms) | DRAM (GB) | memory floor (ms) | achieved TB/s | time / floor | "
                  "FLOP floor (ms) | limit (ms) | binding |", "|---|---|---|---|---|---|---|---|---|---|"]
        for row in class_floors(kernels, copy, bf16).itertuples(index=False):
            beyond = f" ({row.beyond_copy_kernels} beyond the copy)" if row.beyond_copy_kernels else ""
            lines.append(
                f"| {row.kernel_class} | {row.kernels:,} | {row.time_ns / 1e6:.2f} | {row.dram_bytes / 1e9:.2f} | "
                f"{row.memory_floor_ns / 1e6:.2f} | {row.achieved_gb_per_s / 1e3:.2f}{beyond} | "
                f"{row.time_over_memory_floor:.1f} | {_number(row.flop_floor_ns / 1e6, '.2f')} | "
                f"{row.limit_ns / 1e6:.2f} | {row.binding} |")
        lines.append("")
    sites = norm_sites(kernels, copy).head(top_sites)
    if len(sites):
        lines += ["| normalization site | launches | time (ms) | MB per launch | achieved TB/s | memory floor (ms) | "
                  "time / floor |", "|---|---|---|---|---|---|---|"]
        for row in sites.itertuples(index=False):
            lines.append(
                f"| {row.short_name} (grid {_number(row.grid_size, '.0f')}, block {_number(row.block_size, '.0f')}) "
                f"| {row.kernels} | {row.time_ns / 1e6:.2f} | {_number(row.bytes_per_launch / 1e6, '.0f')} | "
                f"{_number(row.achieved_gb_per_s / 1e3, '.2f')} | {_number(row.memory_floor_ns / 1e6, '.2f')} | "
                f"{_number(row.time_over_memory_floor, '.1f')} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The memory floor of a profiled step, per kernel class and per "
                                     "normalization site, as Markdown.")
    parser.add_argument("kernels", type=Path, help="a step's ncu_kernels.parquet")
    parser.add_argument("rates", type=Path, help="its label's device_rates.json")
    parser.add_argument("--sites", type=int, default=8, help="how many normalization sites to list, longest first")
    args = parser.parse_args(argv)
    print(markdown(pd.read_parquet(args.kernels), json.loads(args.rates.read_text()), args.sites))


if __name__ == "__main__":
    main()
