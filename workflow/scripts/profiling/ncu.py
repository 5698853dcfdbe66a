"""Nsight Compute (ncu): command lines, CSV and report readers, and one-line diagnoses of failed runs."""

from __future__ import annotations

import ast
import csv
import io
import math
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd

from . import tables
from .csvpages import ragged_row, rows_from_header, without_bom
from .errors import ProfilingError
from .kernels import classify, short_name
from .units import scale_to_base

REPORT_SUFFIX = ".ncu-rep"
NCU_INSTALL_ROOT = Path("/opt/nvidia/nsight-compute")

# Launch-describing columns that ncu writes before the metrics (up to and including "CC"), renamed to snake
# case; everything after them in a raw page is a metric. The two NVTX columns appear when profiling with --nvtx,
# "Kernel Time" in some releases only.
IDENTITY_COLUMNS = {
    "ID": "id",
    "Process ID": "process_id",
    "Process Name": "process_name",
    "Host Name": "host_name",
    "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg": "nvtx_push_pop_ranges",
    "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg": "nvtx_start_end_ranges",
    "Kernel Name": "kernel_name",
    "Kernel Time": "kernel_time",
    "Context": "context",
    "Stream": "stream",
    "Block Size": "block_size",
    "Grid Size": "grid_size",
    "Device": "device",
    "CC": "cc",
}
RULE_COLUMNS = [
    "kernel_id",
    "kernel_name",
    "section",
    "rule",
    "rule_type",
    "description",
    "speedup_type",
    "estimated_speedup_pct",
]
_MISSING_VALUES = {"", "n/a", "N/A", "nan"}
# What ncu itself writes in a metric column (one with a unit) for a kernel it has no value of, e.g. in
# sass__inst_executed_register_spilling_mem_local of a --set full export: missing there, as "n/a" is.
_NO_DATA = "no data"
# Every time share is computed from it.
DURATION = "gpu__time_duration.sum"


# --- command lines ---------------------------------------------------------------------------------------------


def _report_base(report_path: str | Path) -> str:
    """ncu's -o takes the name without the suffix it appends itself."""
    text = str(report_path)
    return text[: -len(REPORT_SUFFIX)] if text.endswith(REPORT_SUFFIX) else text


def build_command(
    python_argv: Sequence[str],
    metrics: Sequence[str],
    nvtx_range: str | None,
    report_path: str | Path,
    extra: Sequence[str] = (),
    *,
    sections: Sequence[str] = (),
    ncu: str = "ncu",
) -> list[str]:
    """argv that profiles `python_argv` into `report_path` (.ncu-rep), limited to one process-wide NVTX range.

    `nvtx_range` names a torch.cuda.nvtx.range_start/range_end range and must not end in "/": that form matches
    push/pop ranges, which are thread-local, so autograd's backward kernels (own thread) would never be profiled.
    """
    if nvtx_range is not None and nvtx_range.endswith("/"):
        raise ValueError(
            f"NVTX range {nvtx_range!r} ends with '/', which matches thread-local push/pop ranges and loses the "
            "backward pass; use a range_start/range_end range and pass its name without the slash"
        )
    if not python_argv:
        raise ValueError("nothing to profile: python_argv is empty")
    argv = [ncu, "--clock-control", "none", "--target-processes", "all"]
    if nvtx_range is not None:
        argv += ["--nvtx", "--nvtx-include", nvtx_range]
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    for section in sections:
        argv += ["--section", section]
    argv += ["-o", _report_base(report_path), "-f", *extra, *python_argv]
    return argv


def export_command(report_path: str | Path, page: str, ncu: str = "ncu") -> list[str]:
    """argv that prints one page ("raw" or "details") of a report as CSV on stdout.

    Base units fix every column's unit ("ns", "byte", ...). Names are demangled but still simplified by ncu's
    kernel renaming (at::native:: dropped, "(anonymous namespace)" printed "<unnamed>", parameter types
    templated), so join them with torch.profiler/nsys names on kernels.short_name plus launch order.
    """
    if page not in {"raw", "details"}:
        raise ValueError(f"unknown ncu page {page!r}: use 'raw' or 'details'")
    return [
        ncu,
        "-i",
        str(report_path),
        "--csv",
        "--page",
        page,
        "--print-units",
        "base",
        "--print-kernel-base",
        "demangled",
    ]


def locate_ncu() -> str | None:
    """Path of the ncu binary: PATH first, then the newest /opt/nvidia/nsight-compute/<version>/ncu."""
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(NCU_INSTALL_ROOT.glob("*/ncu"), key=lambda p: _version_key(p.parent.name), reverse=True)
    return str(candidates[0]) if candidates else None


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


# --- CSV pages -------------------------------------------------------------------------------------------------


def _csv_rows(text: str) -> list[list[str]]:
    """CSV rows from the header on; ncu's own "==PROF==" / "==WARNING==" lines and blank rows are dropped.

    Raises csv.Error where the text stops inside a quoted field (strict parsing: a cut file must not pass).
    """
    lines = [line for line in io.StringIO(without_bom(text)) if not line.startswith("==")]
    return rows_from_header(lines, lambda row: row[0] == "ID")


def _raw_rows(text: str, source: str = "ncu raw CSV") -> tuple[list[list[str]], str | None]:
    """The raw page's rows from the header on, and one line naming what makes them unusable (no header, no units
    row, short rows, kernel IDs that do not run 0, 1, 2, ...), or None. `source` names the file in the line."""
    fix = "fix: export again with ncu -i REPORT --csv --page raw and keep the whole output"
    try:
        rows = _csv_rows(text)
    except csv.Error as error:
        return [], f"{source} is truncated or malformed ({error}); {fix}"
    if not rows:
        return rows, f"{source} has no header row (empty or failed export); {fix}"
    if _is_details(rows[0]):
        return rows, (f"{source} is a details page (it has the 'Section Name' and 'Metric Name' columns of --page "
                      f"details), not a raw page: saved under the other page's name?; {fix}")
    if len(rows) < 2 or rows[1][0] != "":
        return rows, f"{source} has no units row after the header (truncated or not a --page raw export); {fix}"
    ragged = ragged_row(rows)
    if ragged:
        return rows, f"{source} is truncated: {ragged}; {fix}"
    gap = _id_gap([row[0] for row in rows[2:]])
    return rows, (f"{source} is incomplete: {gap}; {fix}" if gap else None)


def _id_gap(ids: list[str]) -> str | None:
    """Where ncu's kernel IDs stop running 0, 1, 2, ... in file order (rows lost or cut), or None.

    ncu numbers the profiled kernels of a report from 0 and exports them in that order, so a cut at the top or rows
    missing in the middle show here; a cut at a row boundary at the end does not (profiled_kernels catches that).
    """
    for position, text in enumerate(ids):
        if text.strip() != str(position):
            found = repr(text.strip()) if text.strip() else "an empty ID"
            where = f"after kernel {position - 1}" if position else "as the first kernel"
            return f"kernel IDs must run 0, 1, 2, ...; line {position + 3} holds {found} {where}"
    return None


# ncu's progress line per profiled kernel: '==PROF== Profiling "NAME" - ID: 0%....50%....100% - N passes', and with
# --launch-count N: '==PROF== Profiling "NAME" - ID (K/N): 0%....' (recorded on the H200, ncu 2025.3.1).
_PROFILED = re.compile(r'^==PROF== Profiling "(?P<name>.*)" - (?P<id>\d+)(?: \(\d+/\d+\))?:', re.M)


def profiled_kernels(log_text: str) -> int | None:
    """The number of kernels ncu says it profiled, from its log (one '==PROF== Profiling' line per kernel); None
    when the log holds none of ncu's own '==PROF==' lines (not ncu's output, or ncu run with --quiet/--log-file)."""
    if "==PROF==" not in log_text:
        return None
    return len(_PROFILED.findall(log_text))


# The profile job's own line in ncu's log after the pages were expanded (profiling.operators): the raw page then holds
# the profiled kernels and these copies.
_COPIED = re.compile(r"^==MEDDDPM== (\d+) kernels of repeated operators copied", re.M)


def copied_line(copied: int) -> str:
    return (f"==MEDDDPM== {copied} kernels of repeated operators copied from their first calls into the exported "
            "pages (profiling.operators)")


def copied_kernels(log_text: str) -> int:
    """The kernels the profile job copied into the pages (0 where the log says none)."""
    found = _COPIED.findall(log_text)
    return int(found[-1]) if found else 0


def checked_kernels(raw_csv: Path, tool_log: Path, details_csv: Path) -> pd.DataFrame:
    """The raw page's kernels, refused unless it holds every kernel ncu's log says it profiled and the same kernels
    as the details page of the same report."""
    text = raw_csv.read_text(errors="replace")
    raw = parse_raw(text, source=f"ncu raw CSV {raw_csv}")
    log_text = tool_log.read_text(errors="replace")
    profiled = profiled_kernels(log_text)
    if profiled is None:
        print(f"{tool_log} holds no ==PROF== lines: {raw_csv} is checked against the details page only")
    else:  # with the kernels of repeated operators copied from their first calls (profiling.operators)
        profiled += copied_kernels(log_text)
    check_kernel_count(len(raw), profiled, f"ncu raw CSV {raw_csv}", f"its log {tool_log}")
    check_pages_agree(text, raw_csv, details_csv.read_text(errors="replace"), details_csv)
    return tables.from_ncu(raw)


def check_kernel_count(kernels: int, profiled: int | None, source: str, log: str = "its log") -> None:
    """Raise ProfilingError unless a raw page of `kernels` rows holds every kernel ncu profiled (`profiled`, from
    profiled_kernels; None: unknown, not checked). A page cut at a row boundary parses, and would otherwise be
    summarised as if it were the whole step."""
    if profiled is None or kernels == profiled:
        return
    state = "cut short" if kernels < profiled else "not the export of this run"
    raise ProfilingError(
        f"{source} holds {kernels} kernels but ncu profiled {profiled} (says {log}): the export is {state}; "
        "fix: delete it and export it again from the report (ncu -i REPORT --csv --page raw --print-units base "
        "--print-kernel-base demangled), or rerun the profile job"
    )


def exported_kernels(text: str) -> int:
    """The number of kernel rows of a raw page (0 where it has no header and units row)."""
    return max(len(_raw_rows(text)[0]) - 2, 0)


def check_raw_csv(text: str, source: str = "ncu raw CSV") -> str | None:
    """One line naming what makes a raw-page CSV unusable (no header, no units row, short rows, IDs), or None."""
    return _raw_rows(text, source)[1]


def _numeric(values: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(numbers, bad, no_data) from ncu's printed numbers ("1,245,312"), column by column: floats with NaN where a
    value is missing ("n/a", empty) or not a number; `bad` marks the values that are present but not numbers,
    `no_data` those of them that are ncu's own "no data" (missing where the column has a unit: parse_raw decides).
    All columns in one pass over their cells (a raw page has hundreds of metric columns; column by column, pandas'
    per-call overhead was most of the parse)."""
    cells = pd.Series(values.to_numpy().ravel(order="F"), dtype=str)
    cleaned = cells.str.strip().str.replace(",", "", regex=False)
    missing = cleaned.isin(_MISSING_VALUES)
    numbers = pd.to_numeric(cleaned.where(~missing), errors="coerce").astype(float)
    bad = numbers.isna() & ~missing
    no_data = cleaned == _NO_DATA
    return tuple(mask.to_numpy().reshape(values.shape, order="F") for mask in (numbers, bad, no_data))


def _identity_columns(header: list[str]) -> list[str]:
    return header[: header.index("CC") + 1] if "CC" in header else [c for c in header if c in IDENTITY_COLUMNS]


def _snake(text: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_")


def _kernel(frame: pd.DataFrame, row: int) -> str:
    name = frame["Kernel Name"].iloc[row] if "Kernel Name" in frame.columns else ""
    return f"kernel {frame['ID'].iloc[row].strip()} ({short_name(name) if name else 'unnamed'})"


def parse_raw(text: str, source: str = "ncu raw CSV") -> pd.DataFrame:
    """One row per profiled kernel launch from `ncu -i X --csv --page raw`; `source` names the file in errors.

    Identity columns are renamed by IDENTITY_COLUMNS; metric columns keep ncu's metric names and are converted
    to base units (nanoseconds, bytes, counts) using the units row; metrics that are not numbers (device names,
    cache configs: no unit, not a metric the tidy table maps) stay text. df.attrs["units"] maps each metric to the
    unit of its values after conversion (the printed unit, unconverted, where it is not understood).

    Refused with one line naming the kernel, the column and the file: a value that is not a number in a metric
    column (one with a unit, or one the tidy table maps), and a missing value ("n/a", empty) in the duration or in
    a metric the per-class summary sums or averages (tables.SUMMARY_INPUTS), which would make it NaN. Elsewhere a
    missing value stays NaN: ncu prints "n/a" where a metric does not apply to a kernel, and "no data" in a metric
    column (one with a unit) where it collected nothing (a --set full export's register-spilling counters).
    """
    rows, problem = _raw_rows(text, source)
    if problem:
        raise ProfilingError(problem)
    header, units = rows[0], rows[1]
    if DURATION not in header:
        raise ProfilingError(
            f"{source} has no {DURATION} column, which every time share is computed from; fix: keep it in the "
            "metric set (profiling.ncu.metrics) and profile again"
        )
    frame = pd.DataFrame(rows[2:], columns=header, dtype=str)
    columns: dict[str, pd.Series] = {}
    unit_of: dict[str, str] = {}
    identity = _identity_columns(header)
    all_numbers, all_bad, all_no_data = _numeric(frame)
    for position, (column, unit) in enumerate(zip(header, units)):
        if column in identity:
            columns[IDENTITY_COLUMNS.get(column, _snake(column))] = frame[column]
            continue
        numbers, bad = pd.Series(all_numbers[:, position]), all_bad[:, position]
        if unit.strip():
            bad = bad & ~all_no_data[:, position]  # ncu's "no data" in a metric column: a missing value
        is_metric = bool(unit.strip()) or tables.maps_metric(column)
        if bad.any() and not is_metric:
            columns[column] = frame[column]  # a text metric (device name, cache configuration)
            continue
        if bad.any():
            row = int(bad.nonzero()[0][0])
            raise ProfilingError(
                f"{source}: {_kernel(frame, row)} has {frame[column].iloc[row]!r} in column {column}, which is not "
                "a number; fix: export the raw page again from the report (ncu -i REPORT --csv --page raw), "
                "an edited or damaged export cannot be summarised"
            )
        if column == DURATION or tables.metric_column(column) in tables.SUMMARY_INPUTS:
            gaps = numbers.isna().to_numpy().nonzero()[0]
            if len(gaps):
                row = int(gaps[0])
                raise ProfilingError(
                    f"{source}: {_kernel(frame, row)} has no value ({frame[column].iloc[row].strip()!r}) in column "
                    f"{column}, and {len(gaps)} of {len(frame)} kernels lack it; a summary over them would be NaN; "
                    "fix: profile the step again, or leave the metric out of profiling.ncu.metrics where this "
                    "GPU cannot collect it"
                )
        factor, base = scale_to_base(unit) or (1.0, unit)
        columns[column] = numbers * factor
        unit_of[column] = base
    out = pd.DataFrame(columns)  # built at once: a raw page with sections has hundreds of columns
    out["id"] = out["id"].astype(int)
    out = out.sort_values("id", kind="stable").reset_index(drop=True)
    out.attrs["units"] = unit_of
    return out


def _is_details(header: list[str]) -> bool:
    """A details page's header (one row per kernel and metric); a raw page has one column per metric instead."""
    return "Section Name" in header and "Metric Name" in header


def _details_rows(text: str, source: str) -> list[list[str]]:
    """The details page's rows from the header on, refused in one line where it is cut inside a row or empty."""
    try:
        rows = _csv_rows(text)
    except csv.Error as error:
        raise ProfilingError(
            f"{source} is truncated or malformed ({error}); "
            "fix: export it again with ncu -i REPORT --csv --page details"
        ) from None
    if not rows:
        raise ProfilingError(
            f"{source} has no header row (empty or failed export); "
            "fix: export again with ncu -i REPORT --csv --page details"
        )
    if not _is_details(rows[0]) and len(rows) > 1 and rows[1][0] == "" and "Kernel Name" in rows[0]:
        raise ProfilingError(
            f"{source} is a raw page (a units row under its header, no 'Section Name' and 'Metric Name' columns), not "
            "a details page: saved under the other page's name?; fix: export it again with ncu -i REPORT --csv "
            "--page details"
        )
    return rows


def page_kernels(text: str, page: str, source: str | None = None) -> list[tuple[str, str]]:
    """(ID, kernel name) of each kernel of an exported page ("raw" or "details"), in file order, each kernel once;
    a page that cannot be read is refused in one line naming `source`.

    A details page holds many rows per kernel (one per metric, section and rule), all of one kernel together."""
    if page == "raw":
        rows, problem = _raw_rows(text, source or "ncu raw CSV")
        if problem:
            raise ProfilingError(problem)
        header, rows = rows[0], rows[2:]
    else:
        rows = _details_rows(text, source or "ncu details CSV")
        header, rows = rows[0], rows[1:]
    name = header.index("Kernel Name") if "Kernel Name" in header else None
    kernels: dict[str, str] = {}
    for row in rows:
        kernels.setdefault(row[0].strip(), row[name] if name is not None and name < len(row) else "")
    return list(kernels.items())


def _export_fix(path: Path, page: str) -> str:
    """The command that writes `path` again from the report beside it (the profile job keeps ncu.ncu-rep)."""
    report = path.parent / "ncu.ncu-rep"
    return shlex.join(export_command(report, page)) + f" > {shlex.quote(str(path))}"


def check_pages_agree(raw_text: str, raw_path: str | Path, details_text: str, details_path: str | Path) -> None:
    """Raise ProfilingError unless the raw and details pages of one report hold the same kernels, in the same order.

    ncu exports both pages from one report, so a page cut at a row boundary (which parses: its rows are whole) holds
    fewer kernels than the other; the shorter one is the cut one. Checked whatever ncu's log says (it may hold no
    ==PROF== lines: ncu run with --quiet or --log-file, or a log from elsewhere). Within the details page, a last
    kernel whose metric rows stop before those of the kernels like it is cut too (details_cut_in_last_kernel).
    """
    raw_path, details_path = Path(raw_path), Path(details_path)
    raw = page_kernels(raw_text, "raw", f"ncu raw CSV {raw_path}")
    details = page_kernels(details_text, "details", f"ncu details CSV {details_path}")
    if len(raw) != len(details):
        cut, cut_page, whole = (raw_path, "raw", details_path) if len(raw) < len(details) else (
            details_path, "details", raw_path)
        raise ProfilingError(
            f"ncu {cut_page} CSV {cut} holds {min(len(raw), len(details))} kernels but the other page of the same "
            f"report, {whole}, holds {max(len(raw), len(details))}: {cut.name} is cut short; fix: export it again "
            f"from the report: {_export_fix(cut, cut_page)} (or delete {cut} and rerun: the profile job profiles "
            "and exports again)"
        )
    for (raw_id, raw_name), (details_id, details_name) in zip(raw, details):
        if raw_id != details_id or raw_name.strip() != details_name.strip():
            raise ProfilingError(
                f"ncu raw CSV {raw_path} and details CSV {details_path} are not pages of one report: kernel "
                f"{raw_id} is {short_name(raw_name) or 'unnamed'} in one and kernel {details_id} "
                f"{short_name(details_name) or 'unnamed'} in the other; fix: export both again from the report: "
                f"{_export_fix(raw_path, 'raw')}; {_export_fix(details_path, 'details')}"
            )
    cut = details_cut_in_last_kernel(details_text)
    if cut:
        raise ProfilingError(
            f"ncu details CSV {details_path} is cut short: {cut}; fix: export it again from the report: "
            f"{_export_fix(details_path, 'details')} (or delete {details_path} and rerun: the profile job profiles "
            "and exports again)"
        )


def details_cut_in_last_kernel(text: str) -> str | None:
    """Where a details page cut at a row boundary inside its last kernel shows: that kernel's (section, metric) rows
    are a strict beginning of those of an earlier kernel, and equal to none (kernels of one report share the
    sections and metrics asked for; a few metric sets occur). None otherwise. Rule rows after the last metric row
    vary per kernel, so a cut among them does not show."""
    rows = _details_rows(text, "ncu details CSV")
    header = rows[0]
    if "Section Name" not in header or "Metric Name" not in header:
        return None
    section, metric = header.index("Section Name"), header.index("Metric Name")
    signatures: dict[str, list[tuple[str, str]]] = {}
    for row in rows[1:]:
        if len(row) > metric and row[metric].strip():
            signatures.setdefault(row[0].strip(), []).append((row[section], row[metric]))
    if len(signatures) < 2:
        return None
    *earlier, (last_id, last) = signatures.items()
    others = {tuple(rows_) for _, rows_ in earlier}
    if tuple(last) in others:
        return None
    longer = [other for other in others if len(other) > len(last) and other[: len(last)] == tuple(last)]
    if not longer:
        return None
    return (f"its last kernel ({last_id}) has {len(last)} metric rows, where kernels like it have "
            f"{min(map(len, longer))}")


def parse_details(text: str, source: str = "ncu details CSV") -> pd.DataFrame:
    """Rules table (RULE_COLUMNS) from `ncu -i X --csv --page details`; rows that carry no rule are ignored.

    A report collected with an explicit --metrics list and no sections has no rule columns at all: that gives an
    empty table, which means "no rules ran", not "no problems found".
    """
    rows = _details_rows(text, source)
    header = rows[0]
    for column in ("Kernel Name", "Section Name"):
        if column not in header:
            raise ProfilingError(f"{source} lacks the {column!r} column; fix: export with --page details")
    if "Rule Name" not in header:
        return pd.DataFrame(columns=RULE_COLUMNS)
    width = len(header)
    if any(len(row) > width for row in rows):
        raise ProfilingError(f"{source} has rows longer than its header; fix: export it again")
    # Metric rows may stop before the (empty) rule columns; pad them.
    frame = pd.DataFrame([row + [""] * (width - len(row)) for row in rows[1:]], columns=header, dtype=str)
    frame = frame[frame["Rule Name"].str.strip() != ""]
    speedup = frame.get("Estimated Speedup", pd.Series("", index=frame.index))
    rules = pd.DataFrame(
        {
            "kernel_id": frame["ID"].astype(int),
            "kernel_name": frame["Kernel Name"],
            "section": frame["Section Name"],
            "rule": frame["Rule Name"],
            "rule_type": frame.get("Rule Type", ""),
            "description": frame.get("Rule Description", ""),
            "speedup_type": frame.get("Estimated Speedup Type", ""),
            "estimated_speedup_pct": pd.to_numeric(speedup.str.replace(",", "", regex=False), errors="coerce"),
        }
    )
    return rules.reset_index(drop=True)


# --- .ncu-rep through NVIDIA's ncu_report module (optional; GPU machines only) ---------------------------------


def import_ncu_report() -> ModuleType | None:
    """NVIDIA's ncu_report module, found on sys.path or in an Nsight Compute install's extras/python; else None."""
    try:
        import ncu_report  # type: ignore[import-not-found]

        return ncu_report
    except ImportError:
        pass
    ncu = locate_ncu()
    folders = [Path(ncu).resolve().parent / "extras" / "python"] if ncu else []
    folders += sorted(
        NCU_INSTALL_ROOT.glob("*/extras/python"), key=lambda p: _version_key(p.parent.parent.name), reverse=True
    )
    for folder in folders:
        if (folder / "ncu_report.py").is_file():
            sys.path.insert(0, str(folder))
            import ncu_report  # type: ignore[import-not-found]

            return ncu_report
    return None


def _as_dict(value: object) -> dict:
    # Some ncu releases hand nested rule fields over as the text of a Python dict.
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (SyntaxError, ValueError):
            return {}
    return value if isinstance(value, dict) else {}


def _enum_names(enum: object) -> dict[int, str]:
    return {int(getattr(enum, name)): name for name in dir(enum) if name.isupper()}


def _action_rules(module: ModuleType, kernel_id: int, kernel_name: str, action: object) -> list[dict]:
    # The report gives message and speedup types as numbers of ncu_report.MsgType / SpeedupType. Rule types are
    # named in full ("OPTIMIZATION", where the details CSV prints "OPT"); speedup types as the CSV prints them.
    message_types = _enum_names(module.MsgType)
    speedup_types = {**_enum_names(module.SpeedupType), 0: ""}
    rows = []
    for result in action.rule_results_as_dicts():  # type: ignore[attr-defined]
        message = _as_dict(result.get("rule_message"))
        speedup = _as_dict(result.get("speedup_estimation"))
        value = speedup.get("speedup")
        rows.append(
            {
                "kernel_id": kernel_id,
                "kernel_name": kernel_name,
                "section": result.get("section_identifier", ""),
                "rule": result.get("rule_identifier", ""),
                "rule_type": message_types.get(message.get("type", 0), ""),
                "description": message.get("message", ""),
                "speedup_type": speedup_types.get(speedup.get("type", 0), "").lower(),
                "estimated_speedup_pct": float(value) if value is not None else math.nan,
            }
        )
    return rows


def read_report(path: str | Path, metrics: Sequence[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kernels, rules) from a .ncu-rep, shaped like parse_raw / parse_details output, via ncu_report.

    `metrics` None reads every numeric metric of each kernel. Values are ncu's base units (ns, bytes); their
    unit names are not read because IMetric.unit() crashed the interpreter (ncu_report 2025.3.1, H200).
    """
    module = import_ncu_report()
    if module is None:
        raise ProfilingError(
            "ncu_report Python module not found; fix: run where Nsight Compute is installed "
            f"({NCU_INSTALL_ROOT}/<version>/extras/python) or export CSV with ncu -i ... --csv instead"
        )
    context = module.load_report(str(path))
    kernels: list[dict] = []
    rules: list[dict] = []
    for range_index in range(context.num_ranges()):
        profiled_range = context.range_by_idx(range_index)
        for action_index in range(profiled_range.num_actions()):
            action = profiled_range.action_by_idx(action_index)
            kernel_id = len(kernels)
            name = action.name(module.IAction.NameBase_DEMANGLED)
            row: dict[str, object] = {"id": kernel_id, "kernel_name": name}
            for metric_name in metrics if metrics is not None else action.metric_names():
                metric = action.metric_by_name(metric_name)
                if metric is None:
                    row[metric_name] = math.nan
                    continue
                if metric.kind() == module.IMetric.ValueKind_STRING:
                    continue
                row[metric_name] = metric.as_double()
            kernels.append(row)
            rules += _action_rules(module, kernel_id, name, action)
    return pd.DataFrame(kernels), pd.DataFrame(rules, columns=RULE_COLUMNS)


# --- diagnosis -------------------------------------------------------------------------------------------------

# The shell's message, and Python's FileNotFoundError for the binary (not for a report path).
_NOT_FOUND = re.compile(r"ncu: (command )?not found|No such file or directory: '(?:[^']*/)?ncu'")
_PERMISSION = re.compile(r"ERR_NVGPUCTRPERM")
_LIBRARY = re.compile(r"LibraryNotLoaded")
_CHIP = re.compile(r"Invalid chip\W*(\w*)|[Uu]nsupported (?:GPU|device|chip)|[Dd]evice\b.*\bnot supported")
# The second form is what `ncu --query-metrics-mode suffix --metrics NAME` prints for an unknown NAME.
_METRIC = re.compile(
    r"Failed to find metric\W*(?:regex:)?(?P<name>[\w.:]*)|metrics are either invalid[^\n]*\n\s*(?P<listed>[\w.:]*)"
)
_NO_KERNELS = re.compile(r"No kernels were profiled")


def diagnose(
    stderr_text: str,
    returncode: int,
    csv_text: str | None = None,
    metrics: Sequence[str] = (),
) -> str | None:
    """One line naming why an ncu run or export is unusable, and the fix; None when nothing known is wrong.

    `csv_text`, when given, is the exported raw page: checked for truncation and, with `metrics` (the names
    asked for), for metrics that ncu left out of it.
    """
    if returncode == 127 or _NOT_FOUND.search(stderr_text):
        return (
            "ncu not found: Nsight Compute is not on PATH; fix: add /opt/nvidia/nsight-compute/<version> to PATH "
            "or pass the binary's full path, on a machine with an NVIDIA GPU"
        )
    if _PERMISSION.search(stderr_text):
        return (
            "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM: restricted to admin users); "
            "fix: run as root or with CAP_SYS_ADMIN, or set the NVIDIA driver option "
            "NVreg_RestrictProfilingToAdminUsers=0"
        )
    if _LIBRARY.search(stderr_text):
        return (
            "ncu could not load its profiling library (LibraryNotLoaded; seen in gVisor sandboxes); "
            "fix: profile on a machine or VM with direct access to the GPU driver"
        )
    chip = _CHIP.search(stderr_text)
    if chip:
        named = f" ({chip.group(1)})" if chip.group(1) else ""
        return (
            f"this ncu does not support the GPU{named}; fix: use an ncu release that supports it "
            "(Volta/V100 needs ncu 2024 or older) and check the metric names for that architecture"
        )
    metric = _METRIC.search(stderr_text)
    if metric:
        return (
            f"ncu does not know the metric {metric.group('name') or metric.group('listed') or '(unnamed)'} on this "
            "GPU/ncu; fix: correct it or "
            "override it for this architecture in the config (check with ncu --query-metrics-mode suffix "
            "--metrics NAME --chip gh100)"
        )
    if _NO_KERNELS.search(stderr_text):
        return (
            "ncu profiled no kernels: the NVTX filter never matched; fix: check the range name, open it with "
            "torch.cuda.nvtx.range_start/range_end (process-wide) and pass --nvtx-include NAME without a "
            "trailing slash"
        )
    if csv_text is not None:
        rows, problem = _raw_rows(csv_text)
        return problem or _missing_metrics(rows[0], metrics)
    return None


def _missing_metrics(header: list[str], metrics: Sequence[str]) -> str | None:
    # ncu 2025.3.1 was seen to drop an unknown --metrics name silently (no error, exit code 0).
    missing = [m for m in metrics if m not in set(header)]
    if not missing:
        return None
    return (
        f"ncu did not collect {', '.join(missing)}: unknown to this GPU/ncu; fix: correct the names or override "
        "them for this architecture in the config (check with ncu --query-metrics-mode suffix --metrics NAME "
        "--chip gh100)"
    )


def validate_kernels(frame: pd.DataFrame) -> None:
    """Raise ProfilingError unless a training-step profile holds conv data-grad and weight-grad kernels.

    Reads the "name" column (tidy table) or "kernel_name" (parse_raw / read_report output).
    """
    names = frame["name"] if "name" in frame.columns else frame["kernel_name"]
    classes = set(names.map(classify))
    missing = [label for label, cls in (("dgrad", "conv_dgrad"), ("wgrad", "conv_wgrad")) if cls not in classes]
    if missing:
        raise ProfilingError(
            f"backward pass missing: no {' or '.join(missing)} kernel among {len(frame)} profiled kernels; "
            "an NVTX push/pop range is thread-local and autograd runs backward on its own thread; "
            "fix: use torch.cuda.nvtx.range_start/range_end and --nvtx-include NAME without a trailing slash"
        )
