"""Subprocesses of the tests, stopped by what they do, not by the clock.

A fixed wall-clock limit measures the machine as much as the work: on the 2-core machine with other work running the
same Snakemake run takes two to four times as long, and a limit sized on a quiet machine failed 48 tests at once. So a
watched command has no wall-clock limit. It is stopped when it is stuck or runs away:

- stuck: for `stall_seconds` neither its process tree used CPU time nor any file under its folder changed (a slow
  machine still makes progress; a deadlock or a wait for something that never comes makes none). A job that the job
  server forked for the command (job_server.py) is not in that tree, nor is a SLURM job: their files are their
  progress, and their CPU time counts toward neither rule;
- runaway: its process tree used more than `cpu_seconds` of CPU time (CPU time grows with the work, not with the load:
  on a loaded machine a process waits for a core but is not charged while it waits).

The message says which, with the command, the time it ran and the CPU time it used.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

import job_server

POLL_SECONDS = 2.0


class Stopped(RuntimeError):
    """A watched command was stopped: stuck or runaway (the message says which)."""


def tree_cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds of a process and of every descendant, living or reaped: a living process's own time plus what its
    reaped children used (children_user/children_system), summed over the living tree. A child that ends moves its
    total into its parent's children_* fields, so the sum never goes back."""
    total = 0.0
    for member in [process, *process.children(recursive=True)]:
        try:
            times = member.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def newest_change(folder: Path) -> float:
    """The latest modification time of any file or folder under `folder` (0 where there is none)."""
    newest = 0.0
    for root, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            try:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
            except OSError:
                continue
    return newest


def _ended_within(process: subprocess.Popen, seconds: float) -> bool:
    """Whether the process ended within `seconds`: a wait, not a sleep, so that its end is seen at once (a sleep
    between polls held every watched command up to a poll's length after it had ended)."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def _stop(process: subprocess.Popen, interrupt_first: bool) -> None:
    """SIGINT first where asked (Snakemake then cancels its cluster jobs and removes incomplete outputs), then the
    whole process group killed."""
    if interrupt_first:
        try:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=30)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


class _Forked:
    """What run_watched uses of subprocess.Popen (pid, returncode, poll, wait), for a command that the Snakemake server
    forked: its exit code arrives in a status file."""

    def __init__(self, cmd: list[str], pid: int, status: Path) -> None:
        self.args, self.pid, self.status, self.returncode = cmd, pid, status, None

    def poll(self) -> int | None:
        if self.returncode is None and self.status.exists():
            self.returncode = int(self.status.read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        waited = time.monotonic()
        while self.poll() is None:
            if timeout is not None and time.monotonic() - waited >= timeout:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode


_server: subprocess.Popen | None = None
_job_server: subprocess.Popen | None = None
_job_shim: str | None = None


def _is_snakemake(cmd: list[str], snakemake_api: bool = False) -> bool:
    """`python -m snakemake ...` with this interpreter (with snakemake_api, `python -c PROGRAM ...` as well), unless
    TESTS_FORK_SNAKEMAKE=0 asks for a process of its own."""
    return ((list(cmd[:3]) == [sys.executable, "-m", "snakemake"]
             or (snakemake_api and list(cmd[:2]) == [sys.executable, "-c"] and len(cmd) > 2))
            and os.environ.get("TESTS_FORK_SNAKEMAKE", "1") != "0")


def _job_interpreter() -> str | None:
    """The shim that hands a forked command's jobs to this process's job server (job_server.py; started on first use),
    unless TESTS_FORK_JOBS=0 asks for a process of its own per job."""
    global _job_server, _job_shim
    if os.environ.get("TESTS_FORK_JOBS", "1") == "0":
        return None
    if _job_server is None or _job_server.poll() is not None:
        _job_server, _job_shim = job_server.start(sys.executable)
    return _job_shim


def _fork_snakemake(cmd: list[str], cwd: Path, env: dict, stdin: Path | None, stdout: Path, stderr: Path | None,
                    status: Path) -> _Forked:
    """`cmd` forked by this process's Snakemake server (snakemake_server.py; started on first use)."""
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("snakemake_server.py"))],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    request = {"args": list(map(str, cmd[3:])), "cwd": str(cwd), "env": env, "stdin": stdin and str(stdin),
               "stdout": str(stdout), "stderr": stderr and str(stderr), "status": str(status),
               "job_interpreter": _job_interpreter(), "code": str(cmd[2]) if cmd[1] == "-c" else None}
    _server.stdin.write(json.dumps(request) + "\n")
    _server.stdin.flush()
    answer = _server.stdout.readline()
    if not answer.strip().isdigit():
        raise RuntimeError(f"the Snakemake server (tests/snakemake_server.py) did not start {cmd}: {answer!r}")
    return _Forked(cmd, int(answer), status)


def start_snakemake(args: list[str], cwd: Path, log: Path) -> subprocess.Popen | _Forked:
    """`python -m snakemake *args` in cwd, started and not waited for, both streams into log: forked by the Snakemake
    server as run_watched's commands are (unless TESTS_FORK_SNAKEMAKE=0), its pid the command's own. For a test that
    acts on a command while it runs; wait() for its end."""
    cmd = [sys.executable, "-m", "snakemake", *map(str, args)]
    if _is_snakemake(cmd):
        return _fork_snakemake(cmd, Path(cwd), dict(os.environ), None, log, None, log.with_name(log.name + ".status"))
    with open(log, "w") as out:
        return subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def run_watched(cmd: list[str], cwd: Path, *, env: dict | None = None, stall_seconds: float = 600,
                cpu_seconds: float = 3600, merge_output: bool = False, interrupt_first: bool = False,
                log: Path | None = None, input: str | None = None,
                snakemake_api: bool = False) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)` without a wall-clock limit, stopped (Stopped)
    when stuck or runaway (module docstring). `merge_output`: stderr into stdout; `log`: stdout written there as it
    comes (and returned); `input`: text for its standard input; `snakemake_api`: cmd is `python -c PROGRAM ARGS`, a
    program of Snakemake's API that imports nothing of the workflow before parsing it, forked by the Snakemake server
    as `python -m snakemake` is (snakemake_server.py)."""
    cwd = Path(cwd)
    with tempfile.TemporaryDirectory() as scratch:
        out_path = log or Path(scratch) / "stdout"
        err_path = Path(scratch) / "stderr"
        with open(out_path, "w") as out, open(err_path, "w") as err:
            if _is_snakemake(cmd, snakemake_api):
                stdin_path = None
                if input is not None:
                    stdin_path = Path(scratch) / "stdin"
                    stdin_path.write_text(input)
                process = _fork_snakemake(cmd, cwd, dict(os.environ) if env is None else env, stdin_path, out_path,
                                          None if merge_output else err_path, Path(scratch) / "status")
            else:
                process = subprocess.Popen(
                    cmd, cwd=cwd, env=env, text=True, start_new_session=True,
                    stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT if merge_output else err)
                if input is not None:
                    process.stdin.write(input)
                    process.stdin.close()
            try:
                watched = psutil.Process(process.pid)
            except psutil.NoSuchProcess:  # a forked command can end, and be reaped by its server, before this line
                watched = None
            started = last_progress = time.monotonic()
            cpu = last_cpu = 0.0
            last_change = newest_change(cwd)
            problem = None
            while not _ended_within(process, POLL_SECONDS):
                try:
                    cpu = max(cpu, tree_cpu_seconds(watched))
                except (psutil.NoSuchProcess, AttributeError):
                    continue
                now = time.monotonic()
                if cpu > cpu_seconds:
                    problem = f"used more than {cpu_seconds:g} s of CPU time (runaway)"
                elif cpu - last_cpu >= 1.0:
                    last_cpu, last_progress = cpu, now
                elif now - last_progress >= stall_seconds:
                    change = newest_change(cwd)
                    if change > last_change:
                        last_change, last_progress = change, now
                    else:
                        problem = (f"made no progress for {stall_seconds:g} s: no CPU time used and no file "
                                   f"changed under {cwd} (stuck)")
                if problem:
                    _stop(process, interrupt_first)
                    break
        stdout, stderr = out_path.read_text(), err_path.read_text()
    if problem:
        shown = " ".join(map(str, cmd[:8])) + (" ..." if len(cmd) > 8 else "")
        raise Stopped(f"{shown} {problem}, after {time.monotonic() - started:.0f} s with {cpu:.0f} s of CPU time; "
                      f"its last output: {(stdout + stderr)[-1500:]}")
    return subprocess.CompletedProcess(cmd, process.poll(), stdout, stderr)
