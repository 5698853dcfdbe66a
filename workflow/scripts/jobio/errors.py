"""The one base class of the errors a user can fix (bad input, a wrong device, a missing tool, a wrong config), and
the writing of result files so that a failed write names its file and leaves nothing half-written.

A job that raises an ExpectedError ends with its one-line message (jobio.job.run_job), never a stack trace; anything
else is a bug and keeps its traceback in the job's log.
"""

from __future__ import annotations

import json
import math
import os
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


def _non_finite(value, key: str = "") -> str | None:
    """The key path of the first NaN or infinity in a JSON-ready payload, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return key or "(the value)"
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for name, item in items:
        found = _non_finite(item, f"{key}.{name}" if key else str(name))
        if found:
            return found
    return None


def write_json(path: Path, payload: dict) -> None:
    """`payload` as JSON, written whole (a temporary file renamed into place). Strict JSON only: a NaN or infinity
    (which json.dumps would write as the invalid NaN/Infinity) is a bug upstream and raises ValueError naming it."""
    bad = _non_finite(payload)
    if bad:
        raise ValueError(f"{path}: {bad} is not a finite number, and JSON has none; refusing to write it")
    text = json.dumps(payload, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with writing(path):
            temporary.write_text(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
