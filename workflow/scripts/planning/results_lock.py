"""One run at a time on one results folder, whichever checkout it runs from.

Snakemake locks the outputs of a run in its own `.snakemake/` folder, beside the Snakefile: a second checkout whose
`results` is the first one's (a symlink, a shared disk) has a `.snakemake/` of its own, so Snakemake lets both run,
and one prepares the dataset again while the other trains from it. The workflow therefore locks the results folder
itself, when a run starts its first job (the Snakefile's `onstart`, which dry runs and the jobs a cluster runs do not
call): an exclusive `flock` on `results/.run.lock`, held by the Snakemake process until it ends. The kernel releases it
however the process ends (SIGKILL included), so no lock outlives its run; on NFS, Linux takes it as a POSIX lock,
which the server shares between its clients. The file says who holds it.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import socket
from pathlib import Path
from typing import IO

from jobio.errors import ExpectedError

from . import layout

LOCK_NAME = ".run.lock"


class ResultsInUse(ExpectedError):
    """Another run holds the results folder; the message names it, who holds it and the fix."""


def hold(checkout: str | Path, command: str, results: str | Path = layout.RESULTS) -> IO[str]:
    """Lock `results` (relative to `checkout`) for this process, or raise ResultsInUse naming the run that holds it.
    Keep the returned file open for as long as the run goes on: closing it, or the process ending, releases it."""
    folder = Path(checkout) / results
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / LOCK_NAME, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = " ".join(handle.read().split()) or "a run that has not said who it is yet"
        handle.close()
        shared = f" (here {results} is {folder.resolve()})" if folder.resolve() != folder.absolute() else ""
        raise ResultsInUse(
            f"{folder.resolve()}/ is in use by another run of this workflow: {holder}; two runs on one results folder "
            f"would prepare, train and read each other's files at once; fix: wait for that run to end, or give this "
            f"checkout a results folder of its own{shared}") from None
    handle.seek(0)
    handle.truncate()
    since = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}, from {Path(checkout).resolve()}, since {since}: "
                 f"{command}\n")
    handle.flush()
    return handle
