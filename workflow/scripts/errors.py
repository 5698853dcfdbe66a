"""The one base class of the errors a user can fix (bad input, a wrong device, a missing tool, a wrong config).

A job that raises one ends with its one-line message (ruleio.run_job), never a stack trace; anything else is a bug
and keeps its traceback in the job's log.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class ExpectedError(Exception):
    """An error whose message is the whole story: one line naming the file or setting and the fix."""

    def __init__(self, message: str) -> None:
        # One line on purpose: Snakemake's summary and CI logs show the first line, not a stack trace.
        super().__init__(" ".join(str(message).split()))


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Name `path` in an OSError raised while writing it: a failed write() (a full disk) names no file otherwise."""
    try:
        yield
    except OSError as error:
        if error.filename is None:
            error.filename = str(path)
        raise
