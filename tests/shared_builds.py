"""Builds shared by every test worker of a session (the tiny configuration's end-to-end run): built once, under a lock,
and when the build fails, reported once.

A shared build that fails would otherwise fail every test that needs it with the same error (48 setup errors from
one slow build): here the test that built it fails with the error, every later one is not run and says why in one
line, and the session's summary gives one block naming the build, the test that built it and how many were not run.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest


class SharedBuildFailed(Exception):
    """A shared build failed: raised by the test that built it (with the error as its cause) and by every later one
    that needs it, which pytest_runtest_makereport reports as not run."""

    def __init__(self, name: str, builder: str, reason: str):
        super().__init__(f"the shared build {name} failed in {builder}: {reason}")
        self.name, self.builder, self.reason = name, builder, reason


def built_once(tmp_path_factory, name: str, build) -> Path:
    """`build(folder)` run once per test session: the first test worker to ask builds it under a lock, the others
    wait for it and get the same folder. A failed build is not retried (module docstring)."""
    root = shared_root(tmp_path_factory)
    folder, done, failed = root / name, root / f"{name}.done", root / f"{name}.failed"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when the holder dies
        if failed.exists():
            builder, reason = failed.read_text().split("\n", 1)
            raise SharedBuildFailed(name, builder, last_line(reason))
        if not done.exists():
            try:
                build(folder)
            except BaseException as error:
                reason = str(error)[-3000:] or type(error).__name__
                failed.write_text(f"{current_test()}\n{reason}")
                raise SharedBuildFailed(name, current_test(), last_line(reason)) from error
            done.touch()
    return folder


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else ""


def shared_root(tmp_path_factory) -> Path:
    """The folder every test worker of this session shares (each worker's base folder sits in the session's own)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test whose shared build failed elsewhere is reported as not run (skipped, naming the build and the test that
    reports its error), and counted for the summary; pytest re-raises a session fixture's error in every test of the
    worker that needs it, so this is where the repeats are caught."""
    outcome = yield
    error = call.excinfo.value if call.when == "setup" and call.excinfo else None
    if isinstance(error, SharedBuildFailed) and error.builder != item.nodeid:
        report = outcome.get_result()
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           f"not run: the shared build {error.name} failed (its error is reported by "
                           f"{error.builder}): {error.reason}")
        root = shared_root(item.config._tmp_path_factory)
        with open(root / f"{error.name}.not_run", "a") as not_run:
            not_run.write(item.nodeid + "\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """One block per shared build that failed: which test built it, why, and how many tests were not run for it."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for failed in sorted(factory.getbasetemp().glob("*.failed")):
        name = failed.name.removesuffix(".failed")
        builder, reason = failed.read_text().split("\n", 1)
        not_run = failed.with_name(f"{name}.not_run")
        count = len(not_run.read_text().splitlines()) if not_run.exists() else 0
        terminalreporter.section(f"shared build {name} failed", sep="=", red=True, bold=True)
        terminalreporter.line(f"built by {builder}; {count} test(s) that need it were not run. Its error:")
        terminalreporter.line(reason.strip()[-1500:])
