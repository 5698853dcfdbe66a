"""The interpreter that a forked Snakemake command runs its jobs' scripts with (job_server.py says why).

Written by job_server.start behind a shebang of the real interpreter with -I -S (no site, nothing of the
environment: it starts in milliseconds) and three constants in front: REAL_PYTHON, SOCKET and SERVER_PID.
`SHIM SCRIPT` for a script of Snakemake's (.snakemake/scripts/) is handed to the job server with this process's
folder, environment, umask and standard files; signals are passed on to the job's process group, and its exit is
this process's exit.
Anything else (`SHIM -m snakemake ...` for a cluster job, `SHIM -c ...`) executes the real interpreter.
"""

import array
import json
import os
import signal
import socket
import sys
import time

REAL_PYTHON: str  # noqa: F842 (set in front of this text by job_server.start)
SOCKET: str
SERVER_PID: int


def _is_snakemake_script(args: list) -> bool:
    folder = os.path.dirname(os.path.abspath(args[0])) if len(args) == 1 and args[0].endswith(".py") else ""
    return folder.endswith(os.sep + os.path.join(".snakemake", "scripts"))


def _connect() -> socket.socket | None:
    """The server's socket; None if the server has ended (waiting while it is still importing its libraries)."""
    while True:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(SOCKET)
            return connection
        except (FileNotFoundError, ConnectionRefusedError):
            connection.close()
        if not os.path.exists(f"/proc/{SERVER_PID}") or _is_zombie(SERVER_PID):
            return None
        time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def kill_job(pid: int, number: int) -> None:
    """Signal a job's process group; a job that has not made its own session yet (just forked) is its pid alone."""
    for kill in (os.killpg, os.kill):
        try:
            return kill(pid, number)
        except ProcessLookupError:
            pass


def _run_on_server(connection: socket.socket, args: list) -> int:
    # A signal that comes before the job's pid does is held, not lost: blocked until it can be passed on, then
    # delivered (on a busy machine the job can start, and be signalled, before this process has read its pid).
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    umask = os.umask(0)
    os.umask(umask)
    request = json.dumps({"argv": args, "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask}) + "\n"
    connection.sendmsg([request.encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    answers = connection.makefile("r")
    pid = int(answers.readline())
    for number in FORWARDED:
        signal.signal(number, lambda number, _frame: kill_job(pid, number))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    ended = answers.readline()
    return int(ended) if ended.strip() else 1


def main() -> None:
    args = sys.argv[1:]
    connection = _connect() if _is_snakemake_script(args) else None
    if connection is None:
        os.execv(REAL_PYTHON, [REAL_PYTHON, *args])
    code = _run_on_server(connection, args)
    if code < 0:  # ended by a signal: end by it too, as the parent shell would see of `python SCRIPT`
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


main()
