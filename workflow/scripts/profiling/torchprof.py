"""Kernel rows from torch.profiler: a finished profile object, or the Chrome trace it exported."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pandas as pd

from .errors import ProfilingError

ROW_COLUMNS = ["name", "device", "start_us", "duration_us"]

# Not operators or kernels: the schedule's step markers (their self time is Python glue between operators) and
# copies/fills that the CUDA trace lists beside kernels (ncu and nsys's kernel summary list kernels only).
_PROFILER_STEP = re.compile(r"^ProfilerStep#")
_MEMORY_ACTIVITY = re.compile(r"^Mem(cpy|set)\b")
# Host-side trace categories whose nesting defines the self time of an operator.
_CPU_CATEGORIES = {"cpu_op", "user_annotation"}


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=ROW_COLUMNS)
    if len(frame):
        frame["start_us"] = frame["start_us"] - frame["start_us"].min()  # relative to the first row
    return frame.sort_values("start_us", kind="stable").reset_index(drop=True)


def _device_time_us(event: object) -> float:
    # torch >= 2.4 names it device_time_total; older releases cuda_time_total (same value for a device event).
    if hasattr(event, "device_time_total"):
        return float(event.device_time_total)  # type: ignore[attr-defined]
    return float(event.cuda_time_total)  # type: ignore[attr-defined]


def kernel_rows(prof: object) -> pd.DataFrame:
    """ROW_COLUMNS rows from a finished torch.profiler.profile.

    With CUDA activity: one row per device kernel (device "gpu"). Without: one row per CPU operator or
    record_function range (device "cpu") with its *self* CPU time, so nested operators are not counted twice.
    """
    from torch.autograd import DeviceType  # here, not at import: reading an exported trace needs no torch

    events = list(prof.events())  # type: ignore[attr-defined]
    kernels = [e for e in events if e.device_type == DeviceType.CUDA and not _MEMORY_ACTIVITY.match(e.name)]
    if kernels:
        rows = [
            {"name": e.name, "device": "gpu", "start_us": float(e.time_range.start), "duration_us": _device_time_us(e)}
            for e in kernels
        ]
    else:
        rows = [
            {
                "name": e.name,
                "device": "cpu",
                "start_us": float(e.time_range.start),
                "duration_us": float(e.self_cpu_time_total),
            }
            for e in events
            if e.device_type == DeviceType.CPU and not e.is_async and not _PROFILER_STEP.match(e.name)
        ]
    return _frame(rows)


def _self_times(events: list[dict]) -> dict[int, float]:
    """Self time of the complete events of one thread, by index, as torch.profiler's events() computes it.

    Self time is the duration less that of the direct children. Like events() (EventList._remove_dup_nodes), an
    operator that is the only child of an operator of the same name (a redispatch) is folded into its parent.
    """
    order = sorted(range(len(events)), key=lambda i: (events[i]["ts"], -events[i]["dur"]))
    parent: dict[int, int | None] = {}
    children: dict[int, list[int]] = {i: [] for i in order}
    stack: list[int] = []
    for index in order:
        while stack and events[stack[-1]]["ts"] + events[stack[-1]]["dur"] <= events[index]["ts"]:
            stack.pop()
        parent[index] = stack[-1] if stack else None
        if stack:
            children[stack[-1]].append(index)
        stack.append(index)
    self_time = {i: float(events[i]["dur"]) - sum(float(events[c]["dur"]) for c in children[i]) for i in order}
    folded = True
    while folded:
        folded = False
        for index in list(self_time):
            up = parent[index]
            if up is not None and events[up]["name"] == events[index]["name"] and len(children[up]) == 1:
                children[up] = children.pop(index)
                for child in children[up]:
                    parent[child] = up
                self_time[up] += self_time.pop(index)
                folded = True
    return self_time


def read_trace(path: str | Path) -> list[dict]:
    """The complete events ("ph": "X") of an exported Chrome trace (plain, or gzipped where its name ends in .gz, as
    the reference sets ship it), each with a name and numeric ts and dur.

    Raises ProfilingError with one line naming the file for a trace that is not JSON (cut short, or another file),
    not torch.profiler's Chrome trace, or holds an event without its times.
    """
    fix = f"fix: delete {path} and rerun its profile job (snakemake writes it again)"
    try:
        raw = Path(path).read_bytes()
        trace = json.loads(gzip.decompress(raw).decode() if str(path).endswith(".gz") else raw.decode())
    except (gzip.BadGzipFile, EOFError):
        why = "is not a whole gzip file (cut short, or not gzipped)"
        raise ProfilingError(f"torch trace {path} {why}; {fix}") from None
    except UnicodeDecodeError:
        raise ProfilingError(f"torch trace {path} is not text (a binary file?); {fix}") from None
    except json.JSONDecodeError as error:
        cut = error.pos >= len(error.doc.rstrip()) or error.msg.startswith("Unterminated string")
        what = "is cut short (the JSON ends early)" if cut else "is not valid JSON"
        raise ProfilingError(
            f"torch trace {path} {what}: {error.msg} at line {error.lineno}, column {error.colno}; {fix}"
        ) from None
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise ProfilingError(f"torch trace {path} has no traceEvents list: not a torch.profiler Chrome trace; {fix}")
    complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    for number, event in enumerate(complete):
        for key in ("ts", "dur"):
            value = event.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ProfilingError(
                    f"torch trace {path}: event {number} ({event.get('name', 'unnamed')}) has {key} {value!r}, "
                    f"not a number; {fix}"
                )
        if "name" not in event:
            raise ProfilingError(f"torch trace {path}: event {number} has no name; {fix}")
    return complete


def trace_rows(chrome_trace_json_path: str | Path) -> pd.DataFrame:
    """The rows of kernel_rows, rebuilt from an exported Chrome trace (prof.export_chrome_trace) without torch."""
    return event_rows(read_trace(chrome_trace_json_path))


def event_rows(complete: list[dict]) -> pd.DataFrame:
    """trace_rows of a trace's complete events (read_trace): one row per GPU kernel in start order, or without
    kernels one per CPU operator with its self time."""
    kernels = [e for e in complete if e.get("cat") == "kernel"]
    if kernels:
        rows = [
            {"name": e["name"], "device": "gpu", "start_us": float(e["ts"]), "duration_us": float(e["dur"])}
            for e in kernels
        ]
        return _frame(rows)
    by_thread: dict[tuple[object, object], list[dict]] = {}
    for event in complete:
        if event.get("cat") in _CPU_CATEGORIES:
            by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    rows = []
    for events in by_thread.values():
        for index, self_us in _self_times(events).items():
            event = events[index]
            if not _PROFILER_STEP.match(event["name"]):
                rows.append(
                    {"name": event["name"], "device": "cpu", "start_us": float(event["ts"]), "duration_us": self_us}
                )
    return _frame(rows)
