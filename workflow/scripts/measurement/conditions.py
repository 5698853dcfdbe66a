"""The machine's conditions while something is timed: what else ran on the CPUs and on the GPU, and what state the GPU
was in. Recorded with every timing, so that a number made under load says so and two numbers made under different
conditions are not compared as if they were alike.

- `OtherLoad`: the CPU time that other processes used while a region ran, in cores (from /proc/stat's busy time less
  this process's own): 1.0 means another process kept one core busy throughout. Cheap enough to wrap every timed
  step.
- `snapshot`: load averages, runnable processes, the CPU set the job may run on, the time of a fixed single-core
  workload (`speed_probe`); on a GPU its clocks, throttle reasons, temperature, power and the other processes that
  hold it (nvidia-smi), by the job's own GPU.
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

# /proc/stat's first line: user nice system idle iowait irq softirq steal guest guest_nice (clock ticks); busy is all
# but idle and iowait (guest time is already counted in user).
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_cpu_seconds(stat: Path = Path("/proc/stat")) -> float | None:
    """CPU seconds every process on the machine has used since boot (None where /proc/stat is missing)."""
    try:
        fields = stat.read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    return sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields)) / TICKS


def own_cpu_seconds() -> float:
    """CPU seconds this process (all its threads) has used."""
    times = os.times()
    return times.user + times.system


def own_and_childrens_cpu_seconds() -> float:
    """CPU seconds this process and its waited-for descendants have used: a profiler it ran to the end (and the program
    the profiler ran) are its own work, not another process's load."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


class OtherLoad:
    """Cores kept busy by other processes while a region ran: start() before it, stop() after (returns the cores, or
    None where the machine's CPU time cannot be read)."""

    def __init__(self, busy: Callable[[], float | None] = busy_cpu_seconds, own: Callable[[], float] = own_cpu_seconds,
                 clock: Callable[[], float] = time.perf_counter):
        self._busy, self._own, self._clock = busy, own, clock
        self._start: tuple | None = None

    def start(self) -> None:
        self._start = (self._clock(), self._busy(), self._own())

    def stop(self) -> float | None:
        wall0, busy0, own0 = self._start
        wall, busy, own = self._clock(), self._busy(), self._own()
        if busy is None or busy0 is None or wall <= wall0:
            return None
        # Ticks are coarse (10 ms): a region of a few ticks can come out slightly negative; that is none.
        return max(0.0, ((busy - busy0) - (own - own0)) / (wall - wall0))


def runnable_processes(stat: Path = Path("/proc/stat")) -> int | None:
    """Processes runnable right now (procs_running, this one included)."""
    try:
        for line in stat.read_text().splitlines():
            if line.startswith("procs_running"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


# The speed probe: a fixed loop of Python integer arithmetic, about 10 ms on one core of a current CPU, timed a few times
# (the median). A machine that runs jobs slower without any load that /proc/stat shows (another virtual machine on the
# host, a lower clock) runs this slower too: a default run's training job once took 45 % longer than the same step in
# the same run's paired rounds on a machine that looked idle. Pure Python, so it touches no thread pool of the job.
PROBE_ITERATIONS = 200_000
PROBE_REPEATS = 5


def _probe_once(iterations: int = PROBE_ITERATIONS) -> float:
    start = time.perf_counter()
    total = 0
    for i in range(iterations):
        total += i * i
    return (time.perf_counter() - start) * 1e3


def speed_probe(repeats: int = PROBE_REPEATS, once: Callable[[], float] = _probe_once) -> float:
    """Milliseconds the fixed single-core workload takes now (the median of `repeats`)."""
    return statistics.median(once() for _ in range(repeats))


# nvidia-smi fields of the GPU's state, by snapshot key.
GPU_FIELDS = {"sm_clock_mhz": "clocks.sm", "memory_clock_mhz": "clocks.mem", "temperature_c": "temperature.gpu",
              "power_w": "power.draw", "throttle_reasons": "clocks_throttle_reasons.active",
              "utilization_pct": "utilization.gpu"}
# Throttle reasons (the bit mask nvidia-smi prints) that slow a timed kernel for a reason outside the workload:
# thermal and hardware slowdowns. Idle (0x1) and the software power cap (0x4, the normal state of a busy board) are
# recorded but not taken as a change of conditions.
SLOWDOWNS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
             0x80: "hardware power brake"}


def _smi(arguments: list[str], run: Callable = subprocess.run) -> list[str] | None:
    try:
        out = run(["nvidia-smi", *arguments], capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.strip() for line in out.splitlines() if line.strip()]


def parse_gpu_state(line: str) -> dict:
    """GPU_FIELDS from one line of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`; a field the
    board does not report is left out; throttle reasons as the integer mask and the slowdowns it names."""
    state: dict = {}
    for key, value in zip(GPU_FIELDS, line.split(",")):
        value = value.strip()
        try:
            state[key] = int(value, 16) if key == "throttle_reasons" else float(value)
        except ValueError:
            continue
    if "throttle_reasons" in state:
        state["slowdowns"] = [name for bit, name in SLOWDOWNS.items() if state["throttle_reasons"] & bit]
    return state


def parse_compute_apps(lines: list[str], own_pid: int) -> list[dict]:
    """The other processes holding the GPU, from `nvidia-smi --query-compute-apps=pid,process_name,used_memory
    --format=csv,noheader,nounits` (this process left out)."""
    apps = []
    for line in lines:
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit() or int(parts[0]) == own_pid:
            continue
        try:
            memory = float(parts[2])
        except ValueError:
            memory = None
        apps.append({"pid": int(parts[0]), "name": parts[1], "used_memory_mib": memory})
    return apps


def gpu_state(address: str | None, run: Callable = subprocess.run) -> dict | None:
    """The state of the GPU at PCI `address` (the only visible one when None), with the other processes on it."""
    select = ["-i", address] if address else []
    lines = None
    for reasons in ("clocks_throttle_reasons.active", "clocks_event_reasons.active"):  # the older name, the newer
        fields = [reasons if key == "throttle_reasons" else field for key, field in GPU_FIELDS.items()]
        lines = _smi([f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", *select], run)
        if lines:
            break
    if not lines or len(lines) != 1:
        return None
    state = parse_gpu_state(lines[0])
    apps = _smi(["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits", *select], run)
    state["other_processes"] = parse_compute_apps(apps or [], os.getpid())
    return state


def snapshot(device=None) -> dict:
    """The machine's conditions now (module docstring); on a CUDA `device` (a torch.device) its GPU's state too."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    record = {"at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
              "runnable_processes": runnable_processes(), "cpu_set": cpus, "cpu_count": os.cpu_count(),
              "speed_probe_ms": speed_probe()}
    if device is not None and device.type == "cuda":
        from .provenance import pci_address

        record["gpu"] = gpu_state(pci_address(device))
    return record


def measured(before: dict, load: OtherLoad, device=None) -> dict:
    """The conditions of a timed or profiled region that began at `before` (a snapshot) with `load` started: before
    and after it, what changed, and the cores other processes kept busy while it ran."""
    after = snapshot(device)
    return {"before": before, "after": after, "changes": changes(before, after), "other_load_cores": load.stop()}


def changes(before: dict, after: dict) -> list[str]:
    """What changed between two snapshots that makes timings before and after unlike: another process on the GPU, a
    thermal or hardware slowdown, a narrower or wider CPU set."""
    found = []
    if before.get("cpu_set") != after.get("cpu_set"):
        found.append(f"the CPU set changed from {before.get('cpu_set')} to {after.get('cpu_set')}")
    gpu0, gpu1 = before.get("gpu") or {}, after.get("gpu") or {}
    new = {app["pid"] for app in gpu1.get("other_processes", [])} - {app["pid"] for app in
                                                                     gpu0.get("other_processes", [])}
    if new:
        names = [app["name"] for app in gpu1["other_processes"] if app["pid"] in new]
        found.append(f"other processes started on the GPU: {', '.join(names)}")
    slowdowns = sorted(set(gpu1.get("slowdowns", [])) - set(gpu0.get("slowdowns", [])))
    if slowdowns:
        found.append(f"the GPU throttled ({', '.join(slowdowns)})")
    return found
