"""One tidy kernel table for ncu, nsys and torch.profiler, its per-class summary, and table files."""

from __future__ import annotations

import csv
import gzip
import io
import math
import re
from pathlib import Path

import pandas as pd

from jobio.errors import writing

from . import instructions
from .csvpages import ragged_row, without_bom
from .errors import ProfilingError
from .kernels import CLASS_NAMES, classify, classify_cpu_op, precision_tag, short_name

# Columns every tidy table has, in this order; metric columns (ncu only) follow.
TIDY_COLUMNS = [
    "source",  # ncu | nsys | torch
    "device",  # gpu (a kernel) | cpu (a CPU operator: torch.profiler without CUDA)
    "launch",  # 0-based order within the run; nsys summary rows: rank in the summary (longest total first)
    "name",  # name as the tool exported it
    "short_name",  # kernels.short_name(name), for joins across tools
    "kernel_class",  # kernels.classify (gpu) / kernels.classify_cpu_op (cpu)
    "precision",  # kernels.precision_tag
    "instances",  # launches the row stands for: 1, except nsys summary rows (one row per kernel name)
    "duration_ns",  # time of those launches together (CPU rows: self time)
]
# ncu tables continue with their metric columns (METRIC_COLUMNS, the families, other numeric metrics under sanitised
# names; kept_metrics says which) and four derived columns: tensor_pipe_pct, tensor_pipe_metric (text),
# tensor_flop and fp32_flop.

# ncu metric -> tidy column. Values arrive in ncu base units (ncu.parse_raw converts with the units row).
METRIC_COLUMNS = {
    "gpu__time_duration.sum": "duration_ns",
    "sm__cycles_elapsed.max": "sm_cycles",
    "sm__cycles_active.avg": "sm_active_cycles_avg",
    "smsp__inst_executed.sum": "warp_instructions",
    "smsp__thread_inst_executed.sum": "thread_instructions",  # also counts threads whose predicate was off
    "smsp__thread_inst_executed_pred_on.sum": "thread_instructions_pred_on",
    "sm__inst_executed.avg.per_cycle_active": "ipc",
    # The tensor pipe utilisation as measured; tensor_pipe_pct is derived from one of them per run (TENSOR_PIPE).
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_hmma_pct",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor_all_pct",
    # Warp instructions on the tensor pipe (HMMA on gh100 includes HGMMA; all tensor-pipe instructions; wgmma only).
    "sm__inst_executed_pipe_tensor_op_hmma.sum": "tensor_hmma_instructions",
    "sm__inst_executed_pipe_tensor.sum": "tensor_instructions",
    "sm__inst_executed_pipe_tensor_op_gmma.sum": "tensor_gmma_instructions",
    # Tensor-core operations by source precision (ncu counts them as FLOPs; see instructions.tensor_flop).
    "sm__ops_path_tensor_src_tf32_dst_fp32.sum": "tensor_ops_tf32",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum": "tensor_ops_bf16",
    "sm__ops_path_tensor_src_fp16.sum": "tensor_ops_fp16",
    # Ampere's ncu (ga100) has no src_fp16 total: the two destinations, added into tensor_ops_fp16 (from_ncu).
    "sm__ops_path_tensor_src_fp16_dst_fp16.sum": "tensor_ops_fp16_dst_fp16",
    "sm__ops_path_tensor_src_fp16_dst_fp32.sum": "tensor_ops_fp16_dst_fp32",
    # Warp-level memory and branch instructions (the _WARP_MIX family would give the same names).
    "smsp__sass_inst_executed_op_global.sum": "inst_global",
    "smsp__sass_inst_executed_op_shared.sum": "inst_shared",
    "smsp__sass_inst_executed_op_ldgsts.sum": "inst_ldgsts",
    "smsp__sass_inst_executed_op_tma.sum": "inst_tma",
    "smsp__sass_inst_executed_op_branch.sum": "inst_branch",
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
    "l1tex__t_sector_hit_rate.pct": "l1_hit_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
}
# Families: warp-stall reasons, and the instruction mix at warp level (inst_<op>) and thread level
# (thread_inst_<op>, predicated-off threads excluded; see instructions.py for the unit and the mix built from them).
_STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
_WARP_MIX = re.compile(r"^smsp__sass_inst_executed_op_(\w+)\.sum$")
_THREAD_MIX = re.compile(r"^smsp__sass_thread_inst_executed_op_(\w+?)_pred_on\.sum$")
_FAMILIES = ((_STALL, "stall_"), (_WARP_MIX, "inst_"), (_THREAD_MIX, "thread_inst_"))
# ncu's raw page prints, next to a requested metric such as sm__inst_executed_pipe_tensor.sum, the other roll-ups of
# the same counter (.avg, .max, .min): the same name with another roll-up in second place.
_ROLLUP = re.compile(r"^(?P<counter>[^.]+)\.(?:sum|avg|max|min)(?P<rest>(?:\.\w+)*)$")

# The tensor pipe utilisation of a run: the first of these columns that holds a value in some row, the same for every
# row of the run (never mixed per kernel); tensor_pipe_metric names the ncu metric it came from.
TENSOR_PIPE = [
    ("tensor_hmma_pct", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("tensor_all_pct", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"),
]

SUMMARY_COLUMNS = [
    "source",
    "kernel_class",  # a class of kernels.CLASS_NAMES present in the run, then "all"
    "kernels",  # launches (sum of instances)
    "time_ns",
    "time_share",  # of the run's summed kernel time
    "sm_cycles",  # sum
    "warp_instructions",  # sum
    "thread_instructions",  # sum
    "ipc",  # mean weighted by duration
    "tensor_pipe_pct",  # mean weighted by duration
    "dram_bytes",  # sum of read + write
    "layout_conversion_share",  # "all" row only: layout-conversion time / all time
    "dtype_cast_share",  # "all" row only: dtype-cast time / all time
    "tensor_pipe_metric",  # the ncu metric tensor_pipe_pct was read from (empty where none was measured)
    "tensor_flop",  # sum of instructions.tensor_flop (NaN where not collected)
    "fp32_flop",  # sum of instructions.fp32_flop (NaN where not collected)
    # "all" row only, from the profiled step's recorded conditions (profiling.target; NaN in summaries made before
    # they were recorded): its wall time, the cores other processes kept busy during it, the speed probe's time (the
    # mean of before and after), and what changed on the machine meanwhile.
    "profiled_wall_ms",
    "other_load_cores",
    "speed_probe_ms",
    "condition_changes",
]


# The tidy columns the per-class summary sums or averages (and the tensor FLOPs it derives): a missing value in one
# of them would make its class's figure NaN, so the parsers refuse one (ncu.parse_raw names kernel, column, file).
SUMMARY_INPUTS = frozenset(
    ["duration_ns", "sm_cycles", "warp_instructions", "thread_instructions", "ipc", "tensor_hmma_pct",
     "tensor_all_pct", "dram_read_bytes", "dram_write_bytes", *instructions.TENSOR_OPS_COLUMNS,
     *instructions.FP32_COLUMNS]
)


# Derived per kernel from the inputs above (NaN in every row where their counters were not collected).
DERIVED_INPUTS = frozenset(["tensor_pipe_pct", "tensor_flop", "fp32_flop"])


def maps_metric(metric: str) -> bool:
    """Whether the tidy table maps this ncu metric on purpose (METRIC_COLUMNS or a family): its values are numbers."""
    return _mapped(metric) is not None


def _mapped(metric: str) -> str | None:
    """Tidy name of a metric the table maps on purpose (METRIC_COLUMNS or a family), else None."""
    if metric in METRIC_COLUMNS:
        return METRIC_COLUMNS[metric]
    for pattern, prefix in _FAMILIES:
        match = pattern.match(metric)
        if match:
            return prefix + match.group(1)
    return None


def metric_column(metric: str) -> str:
    """Tidy column name of an ncu metric: METRIC_COLUMNS, stall_<reason>, inst_<op>, else a sanitised name."""
    return _mapped(metric) or re.sub(r"[^0-9a-z]+", "_", metric.lower()).strip("_")


def _rollup_key(metric: str) -> tuple[str, str] | None:
    match = _ROLLUP.match(metric)
    return (match.group("counter"), match.group("rest")) if match else None


def kept_metrics(metrics: list[str]) -> list[str]:
    """The metrics of a raw page that the tidy table keeps, in their order.

    The raw page does not say which metrics were requested. It adds launch statistics, device attributes and, for
    most requested counters, their other roll-ups (.avg/.max/.min next to a requested .sum). Kept: every mapped
    metric (METRIC_COLUMNS, the stall and instruction-mix families) and every metric that is no other roll-up of a
    mapped metric present on the page, under its sanitised name. Dropped: the other roll-ups of mapped metrics
    (sm__inst_executed_pipe_tensor.avg next to sm__inst_executed_pipe_tensor.sum), which would otherwise sit in
    the table as near-duplicates of the requested value under unrelated names.
    """
    mapped_keys = {_rollup_key(m) for m in metrics if _mapped(m) is not None} - {None}
    return [m for m in metrics if _mapped(m) is not None or _rollup_key(m) not in mapped_keys]


def _tidy(source: str, device: object, names: pd.Series, instances: object, duration_ns: object) -> pd.DataFrame:
    """Identity columns of TIDY_COLUMNS; device, instances and duration_ns are scalars or arrays as long as names."""
    names = names.astype(str).reset_index(drop=True)
    frame = pd.DataFrame({"source": source, "device": device, "launch": range(len(names)), "name": names})
    frame["short_name"] = names.map(short_name)
    on_cpu = frame["device"] == "cpu"
    frame["kernel_class"] = [
        classify_cpu_op(name) if cpu else classify(name) for name, cpu in zip(frame["name"], on_cpu)
    ]
    frame["precision"] = names.map(precision_tag)
    frame["instances"] = pd.Series(instances, index=frame.index).astype(int)
    frame["duration_ns"] = pd.Series(duration_ns, index=frame.index).astype(float)
    return frame


FP16_DESTINATIONS = ("tensor_ops_fp16_dst_fp16", "tensor_ops_fp16_dst_fp32")


def from_ncu(kernels: pd.DataFrame) -> pd.DataFrame:
    """Tidy table from ncu.parse_raw / ncu.read_report output.

    Numeric metrics of kept_metrics become renamed columns (text metrics are left out). Derived, in every table:
    tensor_pipe_pct with tensor_pipe_metric (TENSOR_PIPE), tensor_flop and fp32_flop (instructions.py).
    """
    kernels = kernels.sort_values("id", kind="stable").reset_index(drop=True)
    # From the dtypes, not column by column: selecting a column copies the frame's attrs (the units of every column
    # of a --set full page), which made this quadratic in the number of columns.
    numeric = [
        column
        for column, dtype in kernels.dtypes.items()
        if column not in {"id", "kernel_name"} and pd.api.types.is_numeric_dtype(dtype)
    ]
    metrics = {column: metric_column(column) for column in kept_metrics(numeric)}
    duration = kernels.get("gpu__time_duration.sum", pd.Series(math.nan, index=kernels.index))
    frame = _tidy("ncu", "gpu", kernels["kernel_name"], 1, duration.to_numpy())
    extra = kernels[[c for c in metrics if metrics[c] != "duration_ns"]].rename(columns=metrics)
    frame = pd.concat([frame, extra.reset_index(drop=True)], axis=1)
    units = {metrics[m]: u for m, u in kernels.attrs.get("units", {}).items() if m in metrics}
    if "tensor_ops_fp16" not in frame.columns and set(FP16_DESTINATIONS) <= set(frame.columns):
        frame["tensor_ops_fp16"] = frame[list(FP16_DESTINATIONS)].sum(axis=1, min_count=len(FP16_DESTINATIONS))
    frame["tensor_pipe_pct"], frame["tensor_pipe_metric"] = math.nan, ""
    for column, metric in TENSOR_PIPE:
        if column in frame.columns and frame[column].notna().any():
            frame["tensor_pipe_pct"], frame["tensor_pipe_metric"] = frame[column], metric
            units["tensor_pipe_pct"] = units.get(column, "%")
            break
    frame["tensor_flop"] = instructions.tensor_flop(frame)
    frame["fp32_flop"] = instructions.fp32_flop(frame)
    frame.attrs["units"] = {**units, "tensor_flop": "flop", "fp32_flop": "flop"}
    return frame


def from_nsys(kern_sum: pd.DataFrame) -> pd.DataFrame:
    """Tidy table from nsys.parse_kern_sum output: one row per kernel name, instances and total time."""
    return _tidy("nsys", "gpu", kern_sum["name"], kern_sum["instances"].to_numpy(), kern_sum["total_ns"].to_numpy())


def from_torch(rows: pd.DataFrame) -> pd.DataFrame:
    """Tidy table from torchprof.kernel_rows / torchprof.trace_rows output."""
    rows = rows.sort_values("start_us", kind="stable").reset_index(drop=True)
    return _tidy("torch", rows["device"].to_numpy(), rows["name"], 1, (rows["duration_us"] * 1e3).to_numpy())


def _strict_sum(values: pd.Series) -> float:
    # A sum over kernels with a missing value would understate the total; report it as unknown instead.
    if values.empty or values.isna().any():
        return math.nan
    return float(values.sum())


def _weighted_mean(values: pd.Series, weights: pd.Series) -> float:
    if values.empty or values.isna().any() or weights.isna().any() or weights.sum() <= 0:
        return math.nan
    return float((values * weights).sum() / weights.sum())


def _summary_row(group: pd.DataFrame, total_ns: float) -> dict[str, float]:
    def column(name: str) -> pd.Series:
        # Metrics the source does not measure (torch, nsys: durations only) stay NaN.
        return group[name] if name in group.columns else pd.Series(math.nan, index=group.index)

    time_ns = _strict_sum(group["duration_ns"])
    return {
        "kernels": int(group["instances"].sum()),
        "time_ns": time_ns,
        "time_share": time_ns / total_ns if total_ns > 0 else math.nan,
        "sm_cycles": _strict_sum(column("sm_cycles")),
        "warp_instructions": _strict_sum(column("warp_instructions")),
        "thread_instructions": _strict_sum(column("thread_instructions")),
        "ipc": _weighted_mean(column("ipc"), group["duration_ns"]),
        "tensor_pipe_pct": _weighted_mean(column("tensor_pipe_pct"), group["duration_ns"]),
        "dram_bytes": _strict_sum(column("dram_read_bytes") + column("dram_write_bytes")),
        "tensor_flop": _strict_sum(column("tensor_flop")),
        "fp32_flop": _strict_sum(column("fp32_flop")),
    }


def _class_share(df: pd.DataFrame, kernel_class: str, total_ns: float) -> float:
    durations = df.loc[df["kernel_class"] == kernel_class, "duration_ns"]
    class_ns = _strict_sum(durations) if len(durations) else 0.0
    return class_ns / total_ns if total_ns > 0 else math.nan


def _first_gap(df: pd.DataFrame) -> str | None:
    """'launch N (name) has no COLUMN' for the first missing value in a column the summary reads, or None.

    A metric the source does not measure (torch.profiler and nsys: durations only; FLOPs where their counters were
    not collected) is absent or empty in every row, and its summary value is NaN by design; a column with gaps
    would make it NaN for its classes without a word. Durations are never missing.
    """
    for column in ["duration_ns", *sorted((SUMMARY_INPUTS | DERIVED_INPUTS) & set(df.columns) - {"duration_ns"})]:
        missing = df[column].isna().to_numpy()
        if missing.any() and (column == "duration_ns" or not missing.all()):
            position = int(missing.nonzero()[0][0])
            row = df.iloc[position]
            name = row.get("short_name", row.get("name", row.get("kernel_class", "")))
            return (f"launch {row.get('launch', position)} ({name}) has no {column} "
                    f"({int(missing.sum())} of {len(df)} rows lack it)")
    return None


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Per-run summary (SUMMARY_COLUMNS): one row per kernel class present, in CLASS_NAMES order, then "all".

    Refused (ProfilingError) where a column it reads has gaps: the summary holds NaN only for what the source does
    not measure (SUMMARY_COLUMNS says which)."""
    sources = df["source"].unique()
    if len(sources) != 1:
        raise ValueError(f"summarise takes one run of one source, got sources {list(sources)}")
    gap = _first_gap(df)
    if gap:
        raise ProfilingError(f"{sources[0]} kernel table: {gap}; a summary over it would be NaN; fix: profile again")
    total_ns = _strict_sum(df["duration_ns"])
    rows = []
    for kernel_class in CLASS_NAMES:
        group = df[df["kernel_class"] == kernel_class]
        if len(group):
            rows.append({"kernel_class": kernel_class, **_summary_row(group, total_ns)})
    rows.append(
        {
            "kernel_class": "all",
            **_summary_row(df, total_ns),
            "layout_conversion_share": _class_share(df, "layout_conversion", total_ns),
            "dtype_cast_share": _class_share(df, "dtype_cast", total_ns),
        }
    )
    summary = pd.DataFrame(rows)
    summary.insert(0, "source", sources[0])
    metrics = set(df["tensor_pipe_metric"]) - {""} if "tensor_pipe_metric" in df.columns else set()
    summary["tensor_pipe_metric"] = metrics.pop() if len(metrics) == 1 else ""
    return summary.reindex(columns=SUMMARY_COLUMNS)


def save_frame(df: pd.DataFrame, path: str | Path) -> None:
    """Write a table as Parquet (.parquet) or CSV (.csv), without the index."""
    path = Path(path)
    if path.suffix not in (".parquet", ".csv"):
        raise ValueError(f"{path}: table files end in .parquet or .csv")
    with writing(path):
        if path.suffix == ".parquet":
            df.to_parquet(path, index=False)
        else:
            df.to_csv(path, index=False)


def load_csv(path: str | Path) -> pd.DataFrame:
    """A CSV table (gzipped where its name ends in .gz), refused (ValueError) where it is cut short: its text ends
    inside a line or a quoted field, or a row is narrower or wider than the header. pandas alone reads a cut table,
    its last row padded with NaN."""
    data = Path(path).read_bytes()
    if Path(path).suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise ValueError(f"cut short or damaged: {error}") from None
    text = without_bom(data.decode())
    if text and not text.endswith("\n"):
        raise ValueError("cut short: its last line ends without a newline")
    try:
        rows = [row for row in csv.reader(io.StringIO(text), strict=True) if row]
    except csv.Error as error:
        raise ValueError(f"cut short or damaged: {error}") from None
    if not rows:
        raise ValueError("empty: no header row")
    ragged = ragged_row(rows)
    if ragged:
        raise ValueError(f"cut short or damaged: {ragged}")
    return pd.read_csv(io.StringIO(text))


def with_conditions(summary: pd.DataFrame, record: dict) -> pd.DataFrame:
    """The summary with its profiled step's conditions (a conditions file of profiling.target) in its "all" row."""
    probes = [side.get("speed_probe_ms") for side in (record.get("before") or {}, record.get("after") or {})]
    probes = [float(p) for p in probes if p is not None]
    values = {"profiled_wall_ms": record.get("wall_ms"), "other_load_cores": record.get("other_load_cores"),
              "speed_probe_ms": sum(probes) / len(probes) if probes else None,
              "condition_changes": "; ".join(record.get("changes") or [])}
    summary = summary.copy()
    total = summary["kernel_class"] == "all"
    for column, value in values.items():
        summary[column] = summary[column].astype(object)
        summary.loc[total, column] = math.nan if value is None else value
    return summary.infer_objects()


def summary_problem(summary: pd.DataFrame) -> str | None:
    """What shows that a per-class summary (summarise's table) is not whole, or None: its last row must be the one
    "all" row, and its class rows must add up to it (launches exactly, time to rounding). A summary cut at a row
    boundary parses; its own total says what is missing."""
    if "kernel_class" not in summary.columns or summary.empty:
        return "no kernel_class rows: not a per-class summary of this workflow"
    total = summary[summary["kernel_class"] == "all"]
    if len(total) != 1 or summary["kernel_class"].iloc[-1] != "all":
        return ("its last row is not the one 'all' row that every summary ends with (its total): cut short at a row "
                "boundary" if total.empty else "its 'all' row, the total, is not its one last row: rows added or moved")
    classes, total = summary.iloc[:-1], total.iloc[0]
    launches = int(classes["kernels"].sum())
    if launches != int(total["kernels"]):
        return (f"its kernel classes hold {launches:,} launches but its 'all' row {int(total['kernels']):,}: rows "
                "cut or edited")
    time_ns = float(classes["time_ns"].sum())
    if not math.isclose(time_ns, float(total["time_ns"]), rel_tol=1e-9):
        return (f"its kernel classes hold {time_ns:.6g} ns of kernel time but its 'all' row "
                f"{float(total['time_ns']):.6g} ns: rows cut or edited")
    return None


def load_summary(path: str | Path) -> pd.DataFrame:
    """A per-class summary (<tool>_summary.csv), refused (ValueError) where it is cut (load_csv) or its rows do not
    add up to its own 'all' row (summary_problem)."""
    summary = load_csv(path)
    problem = summary_problem(summary)
    if problem:
        raise ValueError(problem)
    return summary


def load_frame(path: str | Path) -> pd.DataFrame:
    """Read a table written by save_frame (a cut CSV refused: load_csv)."""
    path = Path(path)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix == ".csv":
        return load_csv(path)
    raise ValueError(f"{path}: table files end in .parquet or .csv")
