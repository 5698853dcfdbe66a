"""Runs the profiled program (profiling.target) under a profiler, with bounded time and one-line failures."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from measurement import conditions

from . import ncu, nsys, operators
from .errors import ProfilingError


def available_tools(device: str) -> list[str]:
    """What `auto` means for a label: torch.profiler always; ncu and nsys on GPUs where they are installed here.

    nsys must be a full install on PATH: the copy bundled inside Nsight Compute cannot write reports.
    """
    if device == "cpu":
        return ["torch"]
    tools = ["torch"]
    if ncu.locate_ncu():
        tools.append("ncu")
    if shutil.which("nsys"):
        tools.append("nsys")
    return tools


def target_argv(spec: dict, workdir: Path) -> list[str]:
    """The profiled program and its spec file (config, label, variant, phase, dataset)."""
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec, default=str))
    return [sys.executable, "-m", "profiling.target", str(spec_path)]


def run_tool(argv: Sequence[str], scripts_dir: Path, timeout_s: float, log: Path,
             diagnose: Callable[[str, int], str | None], tool: str) -> None:
    """Run `argv` with the workflow's packages importable; raise ProfilingError with one line on failure."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(scripts_dir), os.environ.get("PYTHONPATH")])))
    env.setdefault("PYTHONUNBUFFERED", "1")
    # A profiled program that dies of a signal (it happened once under ncu, 50 s into a compiled CUDA-graph step, and
    # not again) then leaves its Python stack in the tool log instead of only the shell's "Segmentation fault".
    env.setdefault("PYTHONFAULTHANDLER", "1")
    try:
        with open(log, "a") as out:
            out.write("$ " + " ".join(map(str, argv)) + "\n")
            out.flush()
            done = subprocess.run(list(map(str, argv)), stdout=out, stderr=subprocess.STDOUT, env=env,
                                  timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise ProfilingError(diagnose(f"{argv[0]}: command not found", 127) or f"{argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise ProfilingError(
            f"{tool} did not finish within {timeout_s / 60:g} minutes; fix: raise profiling.{tool}.timeout_minutes "
            "or collect fewer metrics (profiling.ncu.metrics) or kernels (profiling.ncu.launch_count)"
        ) from None
    text = log.read_text(errors="replace")
    problem = diagnose(text, done.returncode)
    if problem:
        raise ProfilingError(problem)
    if done.returncode != 0:
        fatal = [line for line in text.splitlines() if line.startswith("Fatal Python error:")]
        if fatal:
            raise ProfilingError(f"{tool} run failed with exit code {done.returncode}: the profiled program died "
                                 f"({fatal[-1].strip()}); its Python stack is in the tool output")
        last = [line for line in text.splitlines() if line.strip()][-1:] or ["(no output)"]
        raise ProfilingError(f"{tool} run failed with exit code {done.returncode}: {last[0].strip()}")


@contextlib.contextmanager
def tool_run_conditions(path: Path):
    """The machine's conditions around a profiler's whole run (measurement.conditions) written to `path`, its wall time
    as `wall_ms`: the CPU's load and speed probe, not the GPU's state, which nvidia-smi would read from beside the tool
    (this job holds no CUDA context of its own). The tool and the program it profiles are this job's work, not other
    load. The profiled step itself is replayed inside the run."""
    before, load = conditions.snapshot(), conditions.OtherLoad(own=conditions.own_and_childrens_cpu_seconds)
    load.start()
    started = time.perf_counter()
    yield
    record = {**conditions.measured(before, load), "wall_ms": 1000 * (time.perf_counter() - started),
              "scope": "the profiler's whole run"}
    path.write_text(json.dumps(record, indent=1))


def profile_torch(spec: dict, trace: Path, log: Path, conditions_file: Path) -> None:
    """torch.profiler in the job's own process: a library, unlike ncu and nsys, so no second interpreter (and no
    second import of torch) is needed; the profiled program's output goes to the tool log, the profiled step's
    conditions to `conditions_file` (profiling.target)."""
    from .target import run

    with open(log, "a") as out, contextlib.redirect_stdout(out):
        run({**spec, "torch_trace": str(trace), "conditions": str(conditions_file)})
    if not trace.exists():
        raise ProfilingError(f"torch.profiler wrote no trace {trace}; fix: see the job's log")


def configured_executable(executable: str, tool: str) -> str:
    """The profiler binary a config names (profiling.<tool>.executable, or an architecture's override): a path that
    must be an executable file, or a bare name found on PATH; ProfilingError naming it and the setting otherwise (a
    missing path is not "not on PATH")."""
    setting = f"profiling.{tool}.executable" + (" or its by_architecture override" if tool == "ncu" else "")
    if "/" not in executable:
        found = shutil.which(executable)
        if found:
            return found
        raise ProfilingError(f"{tool} executable {executable!r} ({setting}) is not on PATH; fix: give its full path "
                             f"there, or set it to null to use the {tool} found on PATH")
    path = Path(executable)
    if not path.is_file():
        where = "is a folder, not the binary" if path.is_dir() else "does not exist"
        raise ProfilingError(f"{tool} executable {executable} ({setting}) {where}; fix: correct the path (the {tool} "
                             f"binary of an install, e.g. /opt/nvidia/nsight-compute/<version>/ncu), or set it to null "
                             f"to use the {tool} found on PATH")
    if not os.access(path, os.X_OK):
        raise ProfilingError(f"{tool} executable {executable} ({setting}) is not executable by this user; fix: chmod "
                             f"+x {executable}, or name another {tool} there")
    return str(path)


def profile_ncu(spec: dict, scripts_dir: Path, settings: dict, report: Path, raw_csv: Path, details_csv: Path,
                log: Path, conditions_file: Path) -> None:
    configured = settings.get("executable")
    executable = configured_executable(configured, "ncu") if configured else ncu.locate_ncu()
    if not executable:
        raise ProfilingError(ncu.diagnose("ncu: command not found", 127))
    extra = []
    if settings.get("launch_count"):
        extra += ["--launch-count", str(settings["launch_count"])]
    extra += list(settings.get("extra_args", []))
    once = settings.get("repeated_operators", "every") == "once"
    if once:
        extra += ["--nvtx-exclude", operators.NCU_EXCLUDE]
    timeout_s = settings["timeout_minutes"] * 60
    with tempfile.TemporaryDirectory() as tmp:
        calls_file = Path(tmp) / "operators.json"
        marked = {**spec, "operators": str(calls_file)} if once else spec
        argv = ncu.build_command(target_argv(marked, Path(tmp)), settings["metrics"], spec["nvtx_range"], report,
                                 extra, sections=settings["sections"], ncu=executable)
        with tool_run_conditions(conditions_file):
            run_tool(argv, scripts_dir, timeout_s, log, ncu.diagnose, "ncu")
        if once and not calls_file.exists():
            raise ProfilingError(f"the profiled program under ncu wrote no list of its operator calls, so the kernels "
                                 f"of repeated operators cannot be put back in {report}'s pages; fix: see {log}")
        calls = operators.read_calls(calls_file) if once else None
    if not report.exists():
        raise ProfilingError(f"ncu wrote no report {report}; fix: see the job's log")
    pages = {}
    for page, out in (("raw", raw_csv), ("details", details_csv)):
        done = subprocess.run(ncu.export_command(report, page, ncu=executable), capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        problem = ncu.diagnose(done.stderr, done.returncode, done.stdout if page == "raw" else None,
                               settings["metrics"] if page == "raw" else ())
        if problem or done.returncode != 0:
            raise ProfilingError(problem or f"ncu export of the {page} page failed: {done.stderr.strip()[:200]}")
        if page == "raw":
            exported = ncu.exported_kernels(done.stdout)
            profiled = ncu.profiled_kernels(log.read_text(errors="replace"))
            ncu.check_kernel_count(exported, profiled, f"the raw page of {report}", f"its log {log}")
        pages[out] = done.stdout
    if calls is not None:
        try:
            expanded = {out: operators.expand(text, calls) for out, text in pages.items()}
        except operators.ExpansionError as error:
            raise ProfilingError(f"the pages of {report} do not fit the step's operator calls: {error}; fix: set "
                                 "profiling.ncu.repeated_operators: every (profiles every kernel)") from None
        pages = {out: text for out, (text, _) in expanded.items()}
        with open(log, "a") as out:  # what extraction checks the raw page's kernels against (ncu.copied_kernels)
            out.write(ncu.copied_line(expanded[raw_csv][1]) + "\n")
    for out, text in pages.items():
        out.write_text(text)


def profile_nsys(spec: dict, scripts_dir: Path, settings: dict, report: Path, kern_sum_csv: Path,
                 log: Path, conditions_file: Path) -> None:
    configured = settings.get("executable")
    executable = configured_executable(configured, "nsys") if configured else shutil.which("nsys")
    if not executable:
        raise ProfilingError(nsys.diagnose("nsys: command not found", 127))
    timeout_s = settings["timeout_minutes"] * 60
    with tempfile.TemporaryDirectory() as tmp:
        argv = nsys.build_command(target_argv(spec, Path(tmp)), report, nsys=executable)
        with tool_run_conditions(conditions_file):
            run_tool(argv, scripts_dir, timeout_s, log,
                     lambda text, code: nsys.diagnose(text, code, report_path=report), "nsys")
        prefix = Path(tmp) / "stats"
        errors = []
        for name in nsys.KERN_SUM_REPORTS:  # the current report name first, then the pre-2023 one
            done = subprocess.run(nsys.stats_command(report, prefix, name, nsys=executable), capture_output=True,
                                  text=True, timeout=timeout_s, check=False)
            produced = nsys.stats_csv_path(prefix, name)
            if done.returncode == 0 and produced.exists():
                text = produced.read_text()
                problem = nsys.diagnose(done.stderr, 0, csv_text=text)
                if problem:
                    raise ProfilingError(problem)
                kern_sum_csv.write_text(text)
                return
            errors.append(done.stderr.strip())
    raise ProfilingError(
        nsys.diagnose("\n".join(errors), 1) or "nsys stats produced no kernel summary under either report name"
    )
