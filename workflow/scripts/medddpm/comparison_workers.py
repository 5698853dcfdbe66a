"""The variants' processes of a paired comparison (medddpm.comparison says why each variant has one), and their
compilation ahead of the timed builds.

Each process (medddpm.comparison_worker) builds a variant's side of a phase when asked and times its steps; the job
builds the sides one after another, so that no build (compilation, CUDA graph capture, cuDNN autotuning) runs beside
another's or beside a round. Compiled cold, those builds are most of a comparison's time: on an H100 a group of
config/frontier.yaml with three compiled rungs took 413 and 585 s, of which its paired rounds took 27 s
(data/measurements/h100-2026-12-06-lean-quality), while the GPU waited on one CPU core compiling. `compile_ahead`
therefore first runs the group's compiled variants' builds in processes of their own, all at once, and throws the
processes away: what they leave is on disk, in inductor's caches of compiled graphs and Triton's of compiled kernels,
and the timed processes' builds then find their graphs there (each build's record says so, medddpm.compile_cache).
That group then took 253 s, and the whole ladder 1,101 s (data/measurements/h100-2026-12-06-ladder-ahead).

Nothing timed is chosen in those processes. What a build chooses by timing, under the others' load there, stays in
them: cuDNN's plans (one process's cache), the Triton kernels' launch configurations (those processes compile their
kernels with inductor's `autotune_local_cache` off, which no cache key includes, so the kernels they leave never write
or read a tuned configuration: each timed process tunes its own, alone on the device). Inductor's compile-time choice
of padding a matrix product whose sizes are not aligned (pad_mm) is the one timed choice a compiled graph keeps: it
pads only where the padded product timed more than 1.1 times faster than the plain one, a margin the others' load
would have to reverse. `comparison.compile_ahead: false` compiles every variant in its own timed build instead.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Listener
from pathlib import Path

from jobio.errors import ExpectedError

from . import compile_cache

# How a worker's one-line error begins or what it holds where its device ran out of memory: CUDA's allocator raises
# torch.OutOfMemoryError; the CPU's allocator a RuntimeError with this text (torch 2.13).
OUT_OF_MEMORY = ("OutOfMemoryError:", "DefaultCPUAllocator: can't allocate memory")


class OutOfMemory(ExpectedError):
    """A variant's process ran out of its device's memory (`line`: the process's own one-line error)."""

    def __init__(self, name: str, line: str) -> None:
        super().__init__(f"comparison: {name}'s process failed: {line}")
        self.line = line


def out_of_memory(error_line: str) -> bool:
    """Whether a worker's one-line error says its device ran out of memory."""
    return error_line.startswith(OUT_OF_MEMORY[0]) or OUT_OF_MEMORY[1] in error_line


class WorkerSide:
    """A variant's side in its own process (medddpm.comparison_worker): timed() asks it for one step."""

    def __init__(self, name: str, connection):
        self.name, self.connection = name, connection

    def ask(self, *request):
        self.send(*request)
        return self.receive()

    def send(self, *request) -> None:
        self.connection.send(request)

    def receive(self):
        """The answer to the request sent last: its value, or the process's error raised (OutOfMemory where its
        device ran out of memory)."""
        answer = self.connection.recv()
        if answer[0] == "error":
            if out_of_memory(answer[1]):  # its line says all there is; the caller says what follows from it
                raise OutOfMemory(self.name, answer[1])
            print(answer[2], file=sys.stderr)
            raise ExpectedError(f"comparison: {self.name}'s process failed: {answer[1]}")
        return answer[1]

    def timed(self) -> tuple[float, float | None]:
        return self.ask("time")


class Workers:
    """One process per variant, each connected back through a Unix socket that only this job knows (a random key)
    and naming itself by its process id first; stopped and waited for on leaving, whatever happened. The processes
    start together: each spends seconds importing torch before it connects."""

    def __init__(self, names: list[str], ahead: bool = False):
        self.names, self.ahead, self.sides, self.processes = names, ahead, {}, []

    def __enter__(self) -> dict[str, WorkerSide]:
        self.folder = tempfile.TemporaryDirectory(prefix="compare-")
        try:
            return self._start()
        except BaseException:
            self.__exit__(None, None, None)  # the processes started so far stopped, the socket's folder removed
            raise

    def _start(self) -> dict[str, WorkerSide]:
        address, key = os.path.join(self.folder.name, "socket"), secrets.token_bytes(16)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])])}
        with Listener(address, family="AF_UNIX", backlog=len(self.names), authkey=key) as listener:
            names = {}
            for name in self.names:
                process = subprocess.Popen([sys.executable, "-m", "medddpm.comparison_worker", address, key.hex(),
                                            *(["ahead"] if self.ahead else [])], env=env)
                self.processes.append(process)
                names[process.pid] = name
            # Accept with a timeout, so that a process that ends before it connects (an import that fails) ends the
            # job instead of leaving it waiting for ever (Listener has no timeout of its own).
            listener._listener._socket.settimeout(1.0)
            while len(self.sides) < len(self.names):
                try:
                    connection = listener.accept()
                except TimeoutError:
                    for process in self.processes:
                        if process.poll() is not None and names[process.pid] not in self.sides:
                            raise ExpectedError(f"comparison: {names[process.pid]}'s process ended (exit status "
                                                f"{process.returncode}) before it connected; its error is above in "
                                                "this log") from None
                    continue
                name = names[connection.recv()]  # in the order they connect, each known by the id it sends first
                self.sides[name] = WorkerSide(name, connection)
        return {name: self.sides[name] for name in self.names}

    def stop(self, names: list[str]) -> None:
        """Stop these variants' processes and wait for them to end, so that the device memory they held is free."""
        for name in names:
            side = self.sides.pop(name, None)
            if side is not None:
                try:
                    side.connection.send(("stop",))
                    side.connection.close()
                except OSError:  # a process that failed has closed its end already
                    pass
        for name, process in zip(self.names, self.processes):
            if name in names:
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()

    def __exit__(self, *exc) -> None:
        self.stop(list(self.names))
        self.folder.cleanup()


def compile_ahead(names: list[str], phases: tuple[str, ...], arguments, workers=Workers) -> dict:
    """Every phase's build of these variants, in processes of their own (`workers(names, ahead=True)`), all at once,
    for what their compilation leaves in the on-disk caches; the processes are stopped after it. `arguments(name,
    phase)`: the build's keyword arguments. A build that fails ends only its variant's part: where it is a real fault
    its timed build meets it again and says so; where it ran out of the device's memory beside the others, its timed
    build compiles cold. Returns the record: the variants, the seconds it took, each build's seconds and cache
    lookups, each failure's one line."""
    started, failed, builds = time.perf_counter(), {}, {}
    pool = workers(list(names), ahead=True)
    with pool as sides:
        for phase in phases:
            building = [name for name in names if name not in failed]
            for name in building:
                sides[name].send("build", phase, arguments(name, phase))
            for name in building:  # the builds run together: their answers are gathered after all have started
                try:
                    built = sides[name].receive()
                    builds.setdefault(name, {})[phase] = build_record(built)
                except ExpectedError as error:
                    failed[name] = getattr(error, "line", str(error))
                    print(f"comparison: compiling {name} ahead failed ({failed[name]}); its timed build compiles "
                          "it itself", file=sys.stderr)
                    pool.stop([name])
    return {"variants": list(names), "seconds": time.perf_counter() - started, "builds": builds, "failed": failed}


def build_record(built: dict) -> dict:
    """A build's answer as the records keep it: its seconds, its compilation's cache lookups and what they say."""
    return {"seconds": built["seconds"], "compile_cache": built["compile_cache"],
            "cache": compile_cache.state(built["compile_cache"])}
