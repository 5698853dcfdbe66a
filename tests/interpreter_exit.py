"""How the interpreter ends a program, for the test servers' forked children (snakemake_server.py, job_server.py),
which run a program in a process that has more imported than the program did and end it without tearing that down;
and how the servers collect those ends."""

from __future__ import annotations

import atexit
import os
import signal
import sys
from collections.abc import Iterator
from typing import NoReturn, TypeVar

T = TypeVar("T")


def system_exit_code(ended: SystemExit) -> int:
    """The exit code SystemExit ends the interpreter with: its code, 0 for None, else 1 with the value printed."""
    if ended.code is None:
        return 0
    if isinstance(ended.code, int):
        return ended.code
    print(ended.code, file=sys.stderr)
    return 1


def end_process(code: int) -> NoReturn:
    """What a normal exit runs that a program can see (atexit handlers, the standard streams flushed), then the exit:
    `code`, or for a negative one the signal -code, as an interpreter ended by it."""
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code & 0xFF)


def ended_children(children: dict[int, T]) -> Iterator[tuple[T, int]]:
    """Without waiting: each ended child's entry of `children` (pid -> what the server keeps for it), taken out of it,
    with the child's exit code as the interpreter reports it."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            yield children.pop(pid), os.waitstatus_to_exitcode(status)
