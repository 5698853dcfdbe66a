"""Glue between Snakemake's `script:` jobs and the library: the job's log, and one-line errors."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path


from errors import ExpectedError


class JobError(ExpectedError):
    """A job's own one-line refusal (bad input, wrong device, missing tool)."""


def run_job(log_path: str | Path, main: Callable[[], None]) -> None:
    """Run `main` with stdout/stderr in the job's log; an expected error ends the job with one line.

    Snakemake removes the outputs of a failed job, so nothing half-written stays.
    """
    with open(log_path, "w", buffering=1) as log:
        stdout, stderr = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = log
        try:
            main()
        except ExpectedError as error:
            message = f"error: {error}"
            print(message, file=log)
            sys.stdout, sys.stderr = stdout, stderr
            sys.exit(message)
        except BaseException:
            traceback.print_exc(file=log)
            raise
        finally:
            sys.stdout, sys.stderr = stdout, stderr


def repo_root(scriptdir: str) -> Path:
    """The workflow's checkout (scripts live in <root>/workflow/scripts)."""
    return Path(scriptdir).resolve().parents[1]
