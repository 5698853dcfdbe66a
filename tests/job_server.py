"""The libraries of the workflow's jobs imported once per test worker, and a job forked from them for every `script:`
job that a forked Snakemake command starts.

A job of the tiny DAG computes for a second or less, but starting it costs Python, torch with dynamo and inductor
(Adam's constructor imports them), pandas, matplotlib and scipy: about 4 s of CPU time for a training job, 1-2 s
for a figure. Those imports were half of the end-to-end runs' CPU time, and the suite runs hundreds of jobs.
This server imports the third-party libraries once (nothing of the workflow: every job imports its own copy of the
workflow's modules, so a test that edits one sees the edit) and forks a child per job. The child is what
`python SCRIPT` would be: its own session, the job's folder, environment, umask and standard files, `sys.argv`,
`sys.path` with the script's folder first, then the script run as `__main__` and the interpreter's own exit (atexit
handlers, the exit code of SystemExit or of an uncaught exception's traceback). Processes a job starts itself stay
processes of their own: the paired comparisons' workers, for one, are known to their job by the pid it started.

How a job reaches it: a Snakemake command forked by snakemake_server.py runs its jobs' scripts with `sys.executable`,
which the server sets to the shim that `start` writes beside the socket (job_client.py behind a shebang of this
interpreter). The shim hands the job to this server, or executes the real interpreter for anything else (a cluster
job's `python -m snakemake`). `TESTS_FORK_JOBS=0` turns it off.

Protocol: a client connects to the socket and sends one JSON object {"argv", "cwd", "env", "umask"} with its
standard input, output and error as SCM_RIGHTS descriptors; the server answers the child's pid on a line, then, once
the child has ended, its exit code (negative: the signal that ended it). A client that goes away first (killed) has
its child's process group killed. The server ends when its standard input closes (the test worker ended).
"""

from __future__ import annotations

import array
import gc
import importlib
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

from interpreter_exit import end_process, ended_children, system_exit_code

# What the workflow's jobs import that is not the workflow's: Snakemake's script preamble, torch with dynamo (and
# the inductor it imports), the analysis libraries and the readers. One that is not installed is skipped: the jobs go
# without it too.
PRELOADED = ("snakemake.script", "numpy", "torch", "torch._dynamo", "torch.profiler", "torch.utils.checkpoint",
             "pandas", "pyarrow.parquet", "matplotlib", "matplotlib.pyplot", "scipy.stats", "seaborn", "nibabel",
             "tqdm", "torchmetrics", "yaml", "psutil", "typst")
# The signals a fresh interpreter starts with (SIGPIPE and SIGXFSZ ignored, SIGINT raising KeyboardInterrupt).
FRESH_SIGNALS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
                 signal.SIGCHLD: signal.SIG_DFL, signal.SIGHUP: signal.SIG_DFL, signal.SIGPIPE: signal.SIG_IGN,
                 signal.SIGXFSZ: signal.SIG_IGN}
STANDARD_FILES = 3


def start(python: str) -> tuple[subprocess.Popen, str]:
    """A job server for this test worker, with `python`'s libraries, and the shim to give Snakemake as its interpreter
    (in a folder of their own, removed when the server ends). The server imports its libraries in the background: a
    job that comes first waits for its socket, or runs in a process of its own if the server has ended."""
    folder = tempfile.mkdtemp(prefix="jobs-")
    server = subprocess.Popen([python, str(Path(__file__).resolve()), folder], stdin=subprocess.PIPE)
    shim = Path(folder) / "python"
    client = Path(__file__).with_name("job_client.py").read_text()
    shim.write_text(f"#!{python} -IS\nREAL_PYTHON = {python!r}\nSOCKET = {str(Path(folder) / 'socket')!r}\n"
                    f"SERVER_PID = {server.pid}\n{client}")
    shim.chmod(0o755)
    return server, str(shim)


def preload() -> None:
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    """The request and the three descriptors sent with it (the request is one line, sent with them)."""
    fds = array.array("i")
    data, ancillary, _, _ = connection.recvmsg(1 << 20, socket.CMSG_LEN(STANDARD_FILES * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    while not data.endswith(b"\n"):
        more = connection.recv(1 << 20)
        if not more:
            raise ConnectionError("the job's request ended early")
        data += more
    return json.loads(data), list(fds)


def _become_job(request: dict, fds: list[int], others: list[socket.socket]) -> str:
    """In the forked child: the process `python SCRIPT` would be, up to running the script (its path returned)."""
    os.setsid()
    for number, handler in FRESH_SIGNALS.items():
        signal.signal(number, handler)
    for other in others:  # the listener and every other job's connection: this child holds none of them
        other.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = os.path.abspath(request["argv"][0])
    sys.argv = list(request["argv"])
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:] = [os.path.dirname(script), *extra, *BASE_PATH]
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.stdout.reconfigure(line_buffering=os.isatty(1))
    return script


def run_as_main(script: str) -> None:
    """Run the script as `__main__` and end the process as the interpreter would end it, without tearing down the
    preloaded libraries' modules one by one (1.6 s per job, where the script itself took 36 ms): the exit code of
    SystemExit, an uncaught exception's traceback and 1, KeyboardInterrupt's SIGINT; then what a normal exit does
    that a job can see: the script's objects released (open files flushed and closed), non-daemon threads joined,
    atexit handlers run, the standard streams flushed."""
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")  # its namespace is released on return
    except SystemExit as ended:
        code = system_exit_code(ended)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 (what an uncaught exception prints and returns)
        sys.excepthook(*sys.exc_info())
        code = 1
    sys.last_type = sys.last_value = sys.last_traceback = None
    gc.collect()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    end_process(code)


def serve(listener: socket.socket) -> str | None:
    """Answer jobs until standard input closes (None); in a forked child, return the script it is to run."""
    children: dict[int, socket.socket] = {}  # child pid -> its client's connection
    pending: set[socket.socket] = set()  # connected clients whose request has not come yet
    # A child's end wakes the loop at once: SIGCHLD writes to this pair (a job's exit code reaches its client without
    # waiting for a poll).
    woken, waker = socket.socketpair()
    for end in (woken, waker):
        end.setblocking(False)
    signal.set_wakeup_fd(waker.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        watched = [sys.stdin, listener, woken, *pending, *children.values()]
        ready, _, _ = select.select(watched, [], [], 1.0)
        if woken in ready:
            try:
                woken.recv(4096)
            except BlockingIOError:
                pass
        for connection, code in ended_children(children):  # every ended child's exit code to its client
            try:
                connection.sendall(f"{code}\n".encode())
            except OSError:
                pass
            connection.close()
        for item in ready:
            if item is woken:
                continue
            if item is sys.stdin:
                if not sys.stdin.readline():
                    return None
            elif item is listener:
                pending.add(listener.accept()[0])
            elif item in pending:
                pending.discard(item)
                try:
                    request, fds = _receive(item)
                except (OSError, ValueError):
                    item.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    return _become_job(request, fds, [listener, item, woken, waker, *pending, *children.values()])
                for fd in fds:
                    os.close(fd)
                item.sendall(f"{pid}\n".encode())
                children[pid] = item
            else:  # a running job's client sent something or went away: only going away is possible
                pid = next((pid for pid, connection in children.items() if connection is item), None)
                try:
                    gone = not item.recv(1)
                except OSError:  # ECONNRESET: the client went before it read the pid it was sent
                    gone = True
                # The job's process group; a job that has not made its own session yet (just forked), alone: the
                # rule of job_client.kill_job, which this cannot import (the shim runs isolated, beside the socket).
                for kill in (os.killpg, os.kill) if pid is not None and gone else ():
                    try:
                        kill(pid, signal.SIGKILL)
                        break
                    except ProcessLookupError:
                        pass


if __name__ == "__main__":
    folder = sys.argv[1]
    SERVER_PID = os.getpid()
    preload()
    gc.freeze()  # the libraries' objects out of the collector's reach: a job's collections skip them (and copy none)
    # The interpreter's own path, without this file's folder and what this process's PYTHONPATH added: a job gets its
    # own environment's PYTHONPATH in front of it.
    own = set(filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    BASE_PATH = [entry for entry in sys.path[1:] if entry and entry not in own]
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(os.path.join(folder, "socket"))
    server.listen(64)
    try:
        job = serve(server)
    finally:
        if os.getpid() == SERVER_PID:  # the server's folder goes with it; a job's child leaves it
            server.close()
            shutil.rmtree(folder, ignore_errors=True)
    if job is not None:
        del folder, server
        run_as_main(job)
