"""Glue between Snakemake's `script:` jobs and the library: the job's log, one-line errors, no half-written outputs."""

from __future__ import annotations

import errno
import os
import shutil
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

from .errors import ExpectedError

# A full disk, or a full quota: the writing call fails with one of these, whatever it was writing.
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


class JobError(ExpectedError):
    """A job's own one-line refusal (bad input, wrong device, missing tool)."""


def disk_full(error: BaseException, outputs: Iterable[str | Path] = ()) -> str | None:
    """One line naming a full disk (ENOSPC, EDQUOT) met while writing, the file or folder, and the fix; else None.

    A failed write() names no file, so the job's outputs say where it was writing.
    """
    if not isinstance(error, OSError) or error.errno not in _NO_SPACE:
        return None
    outputs = [Path(p) for p in outputs]
    where = error.filename or (outputs[0] if outputs else None)
    place = f"writing {where}" if where else "writing the job's outputs"
    folder = Path(where).parent if where else Path.cwd()
    kind = "the disk quota is exhausted" if error.errno == errno.EDQUOT else "no space left on the device"
    return (f"{kind} while {place} ({errno.errorcode[error.errno]}); fix: free space on the disk holding {folder} "
            "(df -h shows it) and rerun; nothing half-written is kept")


# A folder the job may not write: write-protected (EACCES, EPERM) or on a read-only mount (EROFS).
_NOT_WRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS}


def not_writable(error: BaseException, outputs: Iterable[str | Path] = ()) -> str | None:
    """One line naming a file the job may not write (permission denied, read-only file system), and the fix; else
    None. The message names the folder to make writable, or says to run the workflow from a writable copy."""
    if not isinstance(error, OSError) or error.errno not in _NOT_WRITABLE:
        return None
    outputs = [Path(p) for p in outputs]
    where = Path(error.filename) if error.filename else (outputs[0] if outputs else Path.cwd())
    folder = where if where.is_dir() else where.parent
    code = errno.errorcode[error.errno]
    if error.errno == errno.EROFS:
        return (f"{where} lies on a read-only file system ({code}); fix: run the workflow from a copy on a writable "
                "disk (its results/ must be writable); nothing half-written is kept")
    if not any(where == out or out in where.parents or where.parent == out.parent for out in outputs):
        return (f"permission denied on {where} ({code}); fix: give this user access to it (ls -l {where} shows its "
                "owner and mode) and rerun")
    return (f"permission denied on {where} ({code}): {folder} is not writable by this user; fix: make it writable "
            f"(chmod -R u+w {folder}; ls -ld {folder} shows its owner) and rerun; nothing half-written is kept")


def interrupted_line(outputs: Iterable[str | Path] = ()) -> str:
    """The one line of a job stopped by Ctrl-C (SIGINT): what was removed and how to go on."""
    outputs = [Path(p) for p in outputs]
    what = f"{outputs[0]}" + (f" and {len(outputs) - 1} other output(s)" if len(outputs) > 1 else "") if outputs else ""
    removed = f"its outputs ({what}) were removed" if what else "nothing half-written is kept"
    return (f"interrupted (Ctrl-C) before the job finished; {removed}; fix: rerun the same command: Snakemake runs "
            "this job again from the start")


def remove_outputs(outputs: Iterable[str | Path]) -> None:
    """Remove what a failed job wrote of its outputs (files, folders, dangling links), as Snakemake does."""
    for path in map(Path, outputs):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists() or path.is_symlink():
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass  # a write-protected folder: the job's one line says so, Snakemake removes it or says so


def _redirect_descriptors(log) -> dict[int, int]:
    """Point file descriptors 1 and 2 at `log`; returns copies of the originals to restore."""
    saved = {}
    for descriptor in (1, 2):
        try:
            saved[descriptor] = os.dup(descriptor)
            os.dup2(log.fileno(), descriptor)
        except OSError:  # no such descriptor (a daemon): nothing to redirect
            saved.pop(descriptor, None)
    return saved


def _restore_descriptors(saved: dict[int, int]) -> None:
    for descriptor, original in saved.items():
        os.dup2(original, descriptor)
        os.close(original)
    saved.clear()


def run_job(log_path: str | Path, main: Callable[[], None], outputs: Iterable[str | Path] = ()) -> None:
    """Run `main` with stdout/stderr in the job's log; an expected error (or a full disk) ends the job with one line.

    On any failure the job's `outputs` are removed before it ends (Snakemake removes those of a failed job too), so
    nothing half-written stays, whoever runs the script.
    """
    outputs = list(outputs)
    try:
        log = open(log_path, "w", buffering=1)
    except OSError as error:  # a write-protected or full results folder: no log to write the line to
        known = disk_full(error, [log_path]) or not_writable(error, [log_path, *outputs])
        if known is None:
            raise
        sys.exit(f"error: {known}")
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = log
    # What native code writes to the process's own descriptors (the torch profiler's start and stop lines, CUDA
    # warnings) goes to the log too, not between the run's one line per job.
    saved = _redirect_descriptors(log)
    try:
        main()
    except (ExpectedError, OSError) as error:
        known = disk_full(error, outputs) or not_writable(error, outputs)
        if known is None and not isinstance(error, ExpectedError):
            _print_traceback(log)
            remove_outputs(outputs)
            raise
        remove_outputs(outputs)
        message = f"error: {known or error}"
        _print(message, log)
        _restore_descriptors(saved)
        sys.stdout, sys.stderr = stdout, stderr
        sys.exit(message)
    except KeyboardInterrupt:
        # Ctrl-C reaches every process of the run: the job says what it removed in one line, not a traceback, and
        # exits as a process stopped by SIGINT does (128 + 2).
        remove_outputs(outputs)
        message = f"error: {interrupted_line(outputs)}"
        _print(message, log)
        _restore_descriptors(saved)
        sys.stdout, sys.stderr = stdout, stderr
        print(message, file=sys.stderr)
        raise SystemExit(130) from None
    except BaseException:
        _print_traceback(log)
        remove_outputs(outputs)
        raise
    finally:
        _restore_descriptors(saved)
        sys.stdout, sys.stderr = stdout, stderr
        try:
            log.close()
        except OSError:
            pass  # the log lies on a full disk too: the job's message says so


def _print(text: str, log) -> None:
    try:
        print(text, file=log)
    except OSError:
        pass


def _print_traceback(log) -> None:
    try:
        traceback.print_exc(file=log)
    except OSError:
        pass


def repo_root(scriptdir: str) -> Path:
    """The workflow's checkout (scripts live in <root>/workflow/scripts)."""
    return Path(scriptdir).resolve().parents[1]
