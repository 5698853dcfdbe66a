"""The bytes a step's kernels must move, from the tensors torch.profiler recorded: a memory floor without DRAM counters.

Every profile_torch job records the shapes of each operator's tensors (profiling.target: record_shapes=True), and the
Chrome trace ties each GPU kernel to the operator that launched it (its "External id"). Where that operator launched
one kernel, the kernel's **argument bytes** are the bytes of the tensors the operator was handed, each counted once:

  per tensor   element size x its distinct elements (the sizes of its dimensions of non-zero stride: a broadcast
               dimension adds nothing), and for a kernel that torch.compile generated (inductor's "triton_*"
               kernels) no more elements than the kernel's iteration space (the product of the element counts
               inductor passes it last, e.g. xnumel and r0_numel: a kernel handed a whole activation of which it
               reads a slice of channels iterates over the slice);
  per kernel   the sum over the operator's tensors.

An inductor kernel is handed every buffer it reads or writes, so its argument bytes count its output too
(`counts_output`), once: a buffer it reads and writes in place (x += y) is counted once, though it crosses the memory
twice. An in-place ATen operator's bytes (a name ending in "_": add_, copy_, the foreach updates) count its output
too. Any other ATen operator's recorded tensors are its inputs alone: its floor counts what it reads. Either way the
bytes are a lower bound on what the kernel moves, as long as it reads or writes every tensor it is handed, which
inductor's kernels and these operators' single kernels do.

Not attributed (argument_bytes NaN): a kernel whose operator launched several (a convolution's transposes and
matrix kernels, the NDHWC norm op's three passes: the operator's tensors are shared by kernels of different kinds),
and one whose operator holds a TensorList (the trace records no element type for a list's tensors).

A CUDA graph's replay launches its kernels without their operators, so a graph-replayed step has no argument bytes:
the same compiled step run without the graph (frontier_ndhwc for frontier_graphed) launches the same kernels.

Per launch the memory floor is its argument bytes at the device's measured copy bandwidth (device_rates.json's
copy_gb_per_s), and never above its measured time (a kernel faster than the copy, as in profiling.memory_floor, is
at its limit). Per kernel class: what was attributed, its floor and how far the attributed time lies above it.

`python3 -m profiling.argument_bytes TORCH_TRACE.json[.gz] DEVICE_RATES.json` prints the per-class table and the
kernels furthest above their floors as Markdown.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import ProfilingError
from .kernels import CLASS_NAMES
from .memory_floor import copy_floor
from .tables import from_torch
from .torchprof import event_rows, read_trace

# Element sizes of the types torch.profiler records for a tensor ("Input type": c10's spellings of the scalar types).
ELEMENT_BYTES = {
    "double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16,
}
# Recorded arguments that are no tensor: numbers, lists of numbers, None.
NOT_TENSORS = {"", "Scalar", "ScalarList", "GenericList", "None"}
INDUCTOR_PREFIX = "triton_"
# Convolutions and matrix products do enough arithmetic per byte that the FLOP floor holds them; their argument bytes
# are in the class table (a bound all the same), but the list of kernels furthest above their floors leaves them out.
ARITHMETIC_CLASSES = ("conv_fprop", "conv_dgrad", "conv_wgrad", "gemm")

LAUNCH_COLUMNS = ["launch", "name", "short_name", "kernel_class", "duration_ns", "operator", "operator_kernels",
                  "argument_bytes", "counts_output", "unattributed"]
# Why a launch has no argument bytes (its `unattributed` cell; empty where it has them).
SHARED = "its operator launched other kernels too"
UNTYPED = "its operator was handed a tensor of no recorded element type (a TensorList)"
NO_OPERATOR = "no operator of the trace launched it"
CLASS_COLUMNS = ["kernel_class", "kernels", "time_ns", "attributed_kernels", "attributed_time_ns", "argument_bytes",
                 "memory_floor_ns", "achieved_gb_per_s", "time_over_floor", "beyond_copy_kernels"]
KERNEL_COLUMNS = ["operator", "short_name", "kernel_class", "kernels", "time_ns", "argument_bytes", "memory_floor_ns",
                  "achieved_gb_per_s", "time_over_floor", "above_floor_ns"]


def _distinct_elements(dims: list, strides: list | None) -> int:
    """Elements a tensor of these sizes and strides holds: a dimension of stride 0 (a broadcast) repeats them."""
    strides = strides if strides and len(strides) == len(dims) else [1] * len(dims)
    return int(np.prod([size for size, stride in zip(dims, strides) if stride != 0], dtype=np.int64))


def _iteration_space(concrete: list) -> int | None:
    """An inductor kernel's iteration space: the product of the element counts it is passed last (its trailing
    integer arguments), None where it has none."""
    counts = []
    for value in reversed(concrete or []):
        if isinstance(value, str) and value.isdigit():
            counts.append(int(value))
        else:
            break
    return int(np.prod(counts, dtype=np.int64)) if counts else None


def operator_bytes(operator: dict) -> float:
    """Argument bytes of one operator event of the trace (module docstring); NaN where a tensor's element type is not
    recorded (a TensorList, an unknown type)."""
    args = operator.get("args", {})
    types, dims, strides = args.get("Input type", []), args.get("Input Dims", []), args.get("Input Strides", [])
    limit = _iteration_space(args.get("Concrete Inputs", [])) if operator["name"].startswith(INDUCTOR_PREFIX) else None
    total = 0
    for index, kind in enumerate(types):
        if kind in NOT_TENSORS:
            continue
        if kind not in ELEMENT_BYTES or index >= len(dims):
            return math.nan
        elements = _distinct_elements(dims[index], strides[index] if index < len(strides) else None)
        total += ELEMENT_BYTES[kind] * (min(elements, limit) if limit else elements)
    return float(total)


def _counts_output(operator_name: str) -> bool:
    return operator_name.startswith(INDUCTOR_PREFIX) or operator_name.endswith("_")


def kernel_operators(events: list[dict]) -> list[tuple[dict, dict | None]]:
    """The trace's GPU kernels in start order (the kernel table's order: event_rows sorts them by start, stable, as
    this sort does), each with the operator event that launched it (None where the trace holds none)."""
    operators = {e["args"]["External id"]: e for e in events
                 if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: float(e["ts"]))
    return [(kernel, operators.get(kernel.get("args", {}).get("External id"))) for kernel in kernels]


def launches(events: list[dict], source: str = "the trace") -> pd.DataFrame:
    """LAUNCH_COLUMNS, one row per GPU kernel of the trace's complete events (torchprof.read_trace): the rows of its
    kernel table (tables.from_torch, as the profile job's torch_kernels.parquet), each with its operator and argument
    bytes. Raises ProfilingError naming `source` where the trace has no GPU kernel or no kernel's operator recorded
    tensor shapes (a graph replay, or a trace without record_shapes)."""
    paired = kernel_operators(events)
    if not paired:
        raise ProfilingError(f"{source} holds no GPU kernel: no argument bytes (a CPU-only profile)")
    if not any(op is not None and "Input Dims" in op["args"] for _, op in paired):
        raise ProfilingError(f"{source}: no operator recorded its tensors' shapes (a CUDA graph's replay, or a trace "
                             "recorded without record_shapes): no argument bytes")
    keys = [kernel.get("args", {}).get("External id") for kernel, _ in paired]
    launched = collections.Counter(keys)
    table = from_torch(event_rows(events))[["launch", "name", "short_name", "kernel_class", "duration_ns"]]
    found = [op for _, op in paired]
    moved = [operator_bytes(op) if op is not None and launched[key] == 1 else math.nan for op, key in zip(found, keys)]
    table["operator"] = [op["name"] if op is not None else "" for op in found]
    table["operator_kernels"] = [launched[key] if op is not None else 0 for op, key in zip(found, keys)]
    table["argument_bytes"] = moved
    table["counts_output"] = [op is not None and _counts_output(op["name"]) for op in found]
    table["unattributed"] = [NO_OPERATOR if op is None else SHARED if launched[key] > 1 else UNTYPED if math.isnan(b)
                             else "" for op, key, b in zip(found, keys, moved)]
    return table[LAUNCH_COLUMNS]


def read_launches(path: str | Path) -> pd.DataFrame:
    """`launches` of an exported Chrome trace (plain or gzipped JSON)."""
    return launches(read_trace(path), source=f"torch trace {path}")


def _floors(table: pd.DataFrame, copy_gb_per_s: float) -> pd.DataFrame:
    """Per launch with argument bytes: its memory floor (bytes at the copy bandwidth, at most its time) and whether it
    moved them faster than the copy."""
    if not math.isfinite(copy_gb_per_s) or copy_gb_per_s <= 0:
        raise ProfilingError(f"copy bandwidth {copy_gb_per_s} GB/s is no measured bandwidth (device_rates.json)")
    attributed = table[table["argument_bytes"].notna()].copy()
    attributed["memory_floor_ns"], attributed["beyond_copy"] = copy_floor(
        attributed["argument_bytes"], attributed["duration_ns"], copy_gb_per_s)
    return attributed


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.nan


def class_floors(table: pd.DataFrame, copy_gb_per_s: float) -> pd.DataFrame:
    """CLASS_COLUMNS: per kernel class present (CLASS_NAMES order), then "all": launches and time, those with argument
    bytes, their bytes, memory floor, achieved bandwidth and attributed time over floor."""
    attributed = _floors(table, copy_gb_per_s)
    rows = []
    for name in [*[c for c in CLASS_NAMES if (table["kernel_class"] == c).any()], "all"]:
        mine = table if name == "all" else table[table["kernel_class"] == name]
        got = attributed if name == "all" else attributed[attributed["kernel_class"] == name]
        time_ns, floor_ns, moved = (float(got[c].sum()) for c in ("duration_ns", "memory_floor_ns", "argument_bytes"))
        rows.append({"kernel_class": name, "kernels": len(mine), "time_ns": float(mine["duration_ns"].sum()),
                     "attributed_kernels": len(got), "attributed_time_ns": time_ns, "argument_bytes": moved,
                     "memory_floor_ns": floor_ns, "achieved_gb_per_s": _ratio(moved, time_ns),
                     "time_over_floor": _ratio(time_ns, floor_ns),
                     "beyond_copy_kernels": int(got["beyond_copy"].sum())})
    return pd.DataFrame(rows, columns=CLASS_COLUMNS)


def kernel_floors(table: pd.DataFrame, copy_gb_per_s: float) -> pd.DataFrame:
    """KERNEL_COLUMNS: the attributed launches of the memory-bound classes (not ARITHMETIC_CLASSES) grouped by
    operator and kernel (an inductor kernel is its own operator), furthest above their floor first (above_floor_ns:
    time less floor, summed over the launches)."""
    attributed = _floors(table, copy_gb_per_s)
    attributed = attributed[~attributed["kernel_class"].isin(ARITHMETIC_CLASSES)]
    grouped = attributed.groupby(["operator", "short_name", "kernel_class"], sort=False).agg(
        kernels=("launch", "size"), time_ns=("duration_ns", "sum"), argument_bytes=("argument_bytes", "sum"),
        memory_floor_ns=("memory_floor_ns", "sum")).reset_index()
    grouped["achieved_gb_per_s"] = grouped["argument_bytes"] / grouped["time_ns"]
    grouped["time_over_floor"] = grouped["time_ns"] / grouped["memory_floor_ns"]
    grouped["above_floor_ns"] = grouped["time_ns"] - grouped["memory_floor_ns"]
    return grouped.sort_values("above_floor_ns", ascending=False, kind="stable").reset_index(drop=True)[KERNEL_COLUMNS]


def markdown(table: pd.DataFrame, copy_gb_per_s: float, top_kernels: int = 12) -> str:
    """The per-class table and the `top_kernels` kernels furthest above their floors, as Markdown."""
    lines = [f"Copy bandwidth {copy_gb_per_s:.4g} GB/s (device_rates.json). Argument bytes: the tensors each kernel's "
             "operator was handed, each once (profiling.argument_bytes). Convolutions and matrix products are held by "
             "their FLOP floor, not by these bytes.", "",
             "| class | kernels | time (ms) | with argument bytes | their time (ms) | argument GB | "
             "memory floor (ms) | achieved TB/s | time / floor |", "|---|---|---|---|---|---|---|---|---|"]
    for row in class_floors(table, copy_gb_per_s).itertuples(index=False):
        beyond = f" ({row.beyond_copy_kernels} beyond the copy)" if row.beyond_copy_kernels else ""
        ratio = "-" if math.isnan(row.time_over_floor) else f"{row.time_over_floor:.1f}"
        achieved = "-" if math.isnan(row.achieved_gb_per_s) else f"{row.achieved_gb_per_s / 1e3:.2f}"
        lines.append(f"| {row.kernel_class} | {row.kernels:,} | {row.time_ns / 1e6:.2f} | {row.attributed_kernels:,} | "
                     f"{row.attributed_time_ns / 1e6:.2f} | {row.argument_bytes / 1e9:.2f} | "
                     f"{row.memory_floor_ns / 1e6:.2f} | {achieved}{beyond} | {ratio} |")
    lines += ["", "Memory-bound kernels furthest above their floors (convolutions and matrix products left out: the "
              "FLOP floor holds them):", "",
              "| kernel (operator) | class | launches | time (ms) | argument GB | memory floor (ms) | achieved TB/s | "
              "time / floor |", "|---|---|---|---|---|---|---|---|"]
    for row in kernel_floors(table, copy_gb_per_s).head(top_kernels).itertuples(index=False):
        who = row.short_name if row.operator == row.short_name else f"{row.short_name} ({row.operator})"
        lines.append(f"| {who} | {row.kernel_class} | {row.kernels} | {row.time_ns / 1e6:.3f} | "
                     f"{row.argument_bytes / 1e9:.3f} | {row.memory_floor_ns / 1e6:.3f} | "
                     f"{row.achieved_gb_per_s / 1e3:.2f} | {row.time_over_floor:.2f} |")
    return "\n".join(lines + [""])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The memory floor of a torch.profiler step from the tensors its "
                                     "kernels were handed, per kernel class and kernel, as Markdown.")
    parser.add_argument("trace", type=Path, help="a step's torch_trace.json (or .json.gz), recorded with shapes")
    parser.add_argument("rates", type=Path, help="its label's device_rates.json")
    parser.add_argument("--kernels", type=int, default=12, help="how many kernels to list, furthest above floor first")
    args = parser.parse_args(argv)
    rates = json.loads(args.rates.read_text())
    print(markdown(read_launches(args.trace), float(rates.get("copy_gb_per_s", math.nan)), args.kernels))


if __name__ == "__main__":
    main()
