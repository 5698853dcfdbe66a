"""Glue between Snakemake's `script:` jobs and the library: the job's log, and one-line errors."""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Callable
from pathlib import Path


class JobError(Exception):
    """An error whose message is the whole story (bad input, wrong device, missing tool)."""


def _expected_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [JobError]
    with contextlib.suppress(ImportError):
        from measurement.devices import DeviceMismatch

        errors.append(DeviceMismatch)
    with contextlib.suppress(ImportError):
        from medddpm.prepare import DatasetError

        errors.append(DatasetError)
    return tuple(errors)


def run_job(log_path: str | Path, main: Callable[[], None]) -> None:
    """Run `main` with stdout/stderr in the job's log; an expected error ends the job with one line.

    Snakemake removes the outputs of a failed job, so nothing half-written stays.
    """
    expected = _expected_errors()
    with open(log_path, "w", buffering=1) as log:
        stdout, stderr = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = log
        try:
            main()
        except expected as error:
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
