"""Nsight Systems (nsys): command lines, the kernel-summary CSV reader, and one-line diagnoses of failed runs."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from .csvpages import ragged_row, rows_from_header, without_bom
from .errors import ProfilingError

REPORT_SUFFIX = ".nsys-rep"
# The GPU kernel summary report: current name first, the name of older releases second.
KERN_SUM_REPORTS = ("cuda_gpu_kern_sum", "gpukernsum")
KERN_SUM_COLUMNS = ["name", "time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns"]

# Header words (unit suffix removed, lower case) of both column styles: "Avg (ns)" and older "Average".
_HEADER_ALIASES = {
    "time": "time_pct",
    "total time": "total_ns",
    "instances": "instances",
    "avg": "avg_ns",
    "average": "avg_ns",
    "med": "med_ns",
    "median": "med_ns",
    "min": "min_ns",
    "minimum": "min_ns",
    "max": "max_ns",
    "maximum": "max_ns",
    "stddev": "stddev_ns",
    "std dev": "stddev_ns",
    "name": "name",
}
_TIME_UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
_HEADER = re.compile(r"^\s*(?P<word>[^(]*?)\s*(?:\((?P<unit>[^)]*)\))?\s*$")


def _report_base(report_path: str | Path) -> str:
    text = str(report_path)
    return text[: -len(REPORT_SUFFIX)] if text.endswith(REPORT_SUFFIX) else text


def build_command(
    python_argv: Sequence[str],
    report_path: str | Path,
    extra: Sequence[str] = (),
    *,
    trace: str = "cuda,nvtx,cudnn,cublas",
    nsys: str = "nsys",
) -> list[str]:
    """argv that records `python_argv` into `report_path` (.nsys-rep) between cudaProfilerStart and Stop.

    The program opens and closes the capture with torch.cuda.profiler.start()/stop() around the measured steps.
    """
    if not python_argv:
        raise ValueError("nothing to profile: python_argv is empty")
    return [
        nsys,
        "profile",
        "-t",
        trace,
        "--capture-range=cudaProfilerApi",
        "-o",
        _report_base(report_path),
        "-f",
        "true",
        *extra,
        *python_argv,
    ]


def stats_command(report: str | Path, prefix: str | Path, report_name: str, nsys: str = "nsys") -> list[str]:
    """argv that writes one `nsys stats` report of `report` as CSV to stats_csv_path(prefix, report_name)."""
    return [nsys, "stats", "--report", report_name, "--format", "csv", "--output", str(prefix), str(report)]


def stats_csv_path(prefix: str | Path, report_name: str) -> Path:
    """File that `nsys stats --output PREFIX --report NAME --format csv` writes."""
    return Path(f"{prefix}_{report_name}.csv")


def _is_header(row: list[str]) -> bool:
    return "Name" in row and any(cell.strip().startswith("Instances") for cell in row)


def _checked_rows(text: str) -> tuple[list[list[str]], str | None]:
    """The kernel summary's rows from its header on (nsys may print notices before the table when its output goes
    to stdout), and one line naming what makes them unusable (empty, no header, short rows), or None."""
    fix = "fix: run nsys stats again (try the report names cuda_gpu_kern_sum, then gpukernsum)"
    try:
        rows = rows_from_header(io.StringIO(without_bom(text)), _is_header)
    except csv.Error as error:
        return [], f"nsys kernel-summary CSV is truncated or malformed ({error}); {fix}"
    if not rows:
        return rows, (
            "nsys kernel-summary CSV is empty or has no header: the report name is unknown to this nsys or no "
            f"kernels were captured (the cudaProfilerApi capture range never opened); {fix}"
        )
    ragged = ragged_row(rows)
    return rows, (f"nsys kernel-summary CSV is truncated: {ragged}; {fix}" if ragged else None)


def check_csv(text: str) -> str | None:
    """One line naming what makes a kernel-summary CSV unusable (empty, no header, short rows), or None."""
    return _checked_rows(text)[1]


def parse_kern_sum(csv_path: str | Path) -> pd.DataFrame:
    """One row per kernel name (KERN_SUM_COLUMNS, times in ns) from a cuda_gpu_kern_sum / gpukernsum CSV."""
    text = Path(csv_path).read_text()
    rows, problem = _checked_rows(text)
    if problem:
        raise ProfilingError(f"{csv_path}: {problem}")
    frame = pd.DataFrame(rows[1:], columns=rows[0], dtype=str)
    out = pd.DataFrame(index=frame.index)
    for column in rows[0]:
        match = _HEADER.match(column)
        word = match.group("word").strip().lower() if match else ""
        target = _HEADER_ALIASES.get(word)
        if target is None:
            continue  # columns of other nsys releases that this table does not carry
        if target == "name":
            out[target] = frame[column]
            continue
        unit = (match.group("unit") or "").strip().lower()
        # Columns without a unit are nanoseconds in every release (percent for Time).
        factor = _TIME_UNIT_NS.get(unit, 1.0)
        values = pd.to_numeric(frame[column].str.strip().str.replace(",", "", regex=False), errors="coerce")
        if values.isna().any() and target in ("total_ns", "instances"):
            row = int(values.isna().to_numpy().nonzero()[0][0])
            name = frame["Name"].iloc[row]  # the header has a Name column (_is_header)
            raise ProfilingError(
                f"{csv_path}: kernel {str(name)[:80]!r} has {frame[column].iloc[row]!r} in column {column!r}, not a "
                "number; a summary over it would be NaN; fix: export the kernel summary again with nsys stats"
            )
        out[target] = values * factor
    missing = [c for c in ("name", "total_ns", "instances") if c not in out.columns]
    if missing:
        raise ProfilingError(f"{csv_path}: nsys kernel-summary CSV lacks {missing}; fix: export cuda_gpu_kern_sum")
    out["instances"] = out["instances"].astype(int)
    shares = next((frame[c] for c in rows[0] if _HEADER_ALIASES.get(_header_word(c)) == "time_pct"), None)
    problem = missing_time(out["total_ns"], shares)
    if problem:
        raise ProfilingError(f"{csv_path}: nsys kernel-summary CSV {problem}; fix: run nsys stats again on the report")
    if shares is None:
        print(f"{csv_path}: no Time (%) column, so this kernel summary cannot be checked against nsys's own shares "
              "(a summary cut at a row boundary would pass)")
    return out.reindex(columns=KERN_SUM_COLUMNS)


def _header_word(column: str) -> str:
    match = _HEADER.match(column)
    return match.group("word").strip().lower() if match else ""


def missing_time(total_ns: pd.Series, shares: pd.Series | None) -> str | None:
    """What nsys's own Time (%) column says is missing from a kernel summary, or None.

    nsys prints each kernel's share of the whole summary's time, rounded to the decimals it shows. The largest
    kernel's share gives the whole (to half a unit of the last decimal): rows cut at a row boundary leave the
    summary's time short of it by more than that rounding, rows added leave it beyond. None where there are no
    shares to check against (the caller says so)."""
    if shares is None:
        return None
    printed = shares.astype(str).str.strip()
    values = pd.to_numeric(printed.str.replace(",", "", regex=False), errors="coerce")
    if values.isna().any() or total_ns.isna().any() or not len(values) or values.max() <= 0:
        return None
    largest = int(values.to_numpy().argmax())
    decimals = len(printed.iloc[largest].partition(".")[2])
    half_unit = 0.5 * 10.0 ** -decimals
    share, time_ns = float(values.iloc[largest]), float(total_ns.iloc[largest])
    low, high = time_ns * 100 / (share + half_unit), time_ns * 100 / max(share - half_unit, 1e-12)
    held = float(total_ns.sum())
    if held < low * (1 - 1e-9):
        return (f"holds {held:.6g} ns of kernel time in {len(values)} rows, but its largest kernel's share "
                f"({share:g} % of {time_ns:.6g} ns) gives a whole of at least {low:.6g} ns: at least "
                f"{1 - held / low:.2%} of the time is missing (cut short at a row boundary)")
    if held > high * (1 + 1e-9):
        return (f"holds {held:.6g} ns of kernel time in {len(values)} rows, more than its largest kernel's share "
                f"({share:g} % of {time_ns:.6g} ns) allows (at most {high:.6g} ns): rows of another summary added")
    return None


# The shell's message, and Python's FileNotFoundError for the binary (not for a report path).
_NOT_FOUND = re.compile(r"nsys: (command )?not found|No such file or directory: '(?:[^']*/)?nsys'")
_IMPORTER = re.compile(r"QdstrmImporter|\.qdstrm\b")
_UNKNOWN_REPORT = re.compile(r"[Rr]eport\W+(\w+)\W+(?:could not be found|not found|is not a known report)")


def diagnose(
    stderr_text: str,
    returncode: int,
    report_path: str | Path | None = None,
    csv_text: str | None = None,
) -> str | None:
    """One line naming why an nsys run or export is unusable, and the fix; None when nothing known is wrong.

    `report_path` (the .nsys-rep asked for) lets a .qdstrm left beside a missing report be recognised;
    `csv_text` is a kernel-summary CSV to check for emptiness or truncation.
    """
    if returncode == 127 or _NOT_FOUND.search(stderr_text):
        return (
            "nsys not found: Nsight Systems is not installed or not on PATH; fix: use a full Nsight Systems "
            "install (the copy bundled inside Nsight Compute cannot write reports) or the torch.profiler path"
        )
    stranded = False
    if report_path is not None:
        base = Path(_report_base(report_path))
        stranded = Path(f"{base}.qdstrm").exists() and not Path(f"{base}{REPORT_SUFFIX}").exists()
    if stranded or (_IMPORTER.search(stderr_text) and returncode != 0):
        return (
            "nsys left a .qdstrm but no .nsys-rep: its QdstrmImporter is missing (containers and the nsys bundled "
            "with ncu lack it); fix: convert the .qdstrm with the QdstrmImporter of a full Nsight Systems install, "
            "or use the torch.profiler path"
        )
    unknown = _UNKNOWN_REPORT.search(stderr_text)
    if unknown:
        return (
            f"this nsys has no stats report {unknown.group(1)}; fix: try the other kernel-summary name "
            f"({' or '.join(KERN_SUM_REPORTS)})"
        )
    if csv_text is not None:
        return check_csv(csv_text)
    return None
