"""A short terminal for a run (workflow/rules/summary.smk installs it): one line per job as it starts, with the log to
follow where the job is long, and Snakemake's progress count as each one finishes; the run's header, each job's
reason, "Select jobs to execute...", "Execute N jobs..." and "Finished jobid" stay in Snakemake's main log
(.snakemake/log/, named at the end of the run) only. Snakemake 9 has no setting for this (`--quiet` drops whole
classes of messages, the progress count with them), so a filter and a formatter go on its terminal handler.

A dry run keeps Snakemake's own output with each job's reason, shortened: a reason names every file it concerns
(a collecting job's reason ran to a hundred paths, a dry run of the paper's study to over 100 KB), the terminal the
first two of each kind and how many more (`--verbose` prints them all). `--printshellcmds`/`-p`, `--verbose` and job
subprocesses keep Snakemake's own output."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable

from snakemake.logging import LogEvent

from .prose import join_words

# What the terminal leaves out; everything else (progress, warnings, errors, the job stats) is printed as Snakemake
# prints it.
DROPPED_EVENTS = {LogEvent.JOB_STARTED, LogEvent.JOB_FINISHED, LogEvent.WORKFLOW_STARTED}
DROPPED_TEXTS = {"Select jobs to execute..."}


def job_line(info: dict, now: float | None = None, quick: Callable[[str], bool] = lambda rule: False) -> str:
    """One line for a starting job: time, its message (else rule and wildcards) and, unless `quick` says its rule
    takes seconds (the workflow's local rules: the renderings), the log to follow while it runs."""
    stamp = time.strftime("%H:%M:%S", time.localtime(now))
    what = info.get("rule_msg")
    if not what:
        wildcards = ", ".join(f"{key}={value}" for key, value in (info.get("wildcards") or {}).items())
        what = f"{info.get('rule_name', 'job')}" + (f" ({wildcards})" if wildcards else "")
    line = f"[{stamp}] {what}"
    logs = [str(path) for path in info.get("log") or []]
    if logs and not quick(str(info.get("rule_name"))):
        line += f"  (log: {', '.join(logs)})"
    return line


class TerseFilter(logging.Filter):
    def __init__(self, handler: logging.Handler) -> None:
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        event = getattr(record, "event", None)
        if event in DROPPED_EVENTS:
            return False
        if event is None and str(record.msg) in DROPPED_TEXTS:
            return False
        if event == LogEvent.JOB_INFO and hasattr(self.handler, "last_msg_was_job_info"):
            self.handler.last_msg_was_job_info = True  # no blank line before each job's one line
        return True


class TerseFormatter(logging.Formatter):
    def __init__(self, inner: logging.Formatter | None, quick: Callable[[str], bool] = lambda rule: False) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()
        self.quick = quick

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "event", None) == LogEvent.JOB_INFO and not getattr(record, "indent", False):
            return job_line(record.__dict__, quick=self.quick)
        return self.inner.format(record)


def short_reason(reason: str, named: int = 2) -> str:
    """Snakemake's reason for a job with at most `named` files of each kind: 'Missing output files: a, b and 6 more;
    Input files updated by another job: c'."""
    parts = []
    for part in str(reason).split("; "):
        kind, colon, files = part.partition(": ")
        items = files.split(", ") if colon else []
        if len(items) > named + 1:
            part = f"{kind}: {', '.join(items[:named])} and {len(items) - named} more"
        parts.append(part)
    return "; ".join(parts)


class ShortReasonFormatter(logging.Formatter):
    """Snakemake's own formatting of a dry run, each job's reason and long file lists shortened (short_reason; the
    record itself is left as it is for the other handlers)."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "event", None) == LogEvent.JOB_INFO:
            record = copy.copy(record)
            if getattr(record, "reason", None):
                record.reason = short_reason(record.reason)
            for files in ("input", "output"):  # a job without a message is shown with its files
                listed = list(getattr(record, files, None) or [])
                if len(listed) > 3:
                    setattr(record, files, [*listed[:2], f"and {len(listed) - 2} more"])
        return self.inner.format(record)


def install(logger: logging.Logger, main_process: bool, quick: Callable[[str], bool] = lambda rule: False) -> bool:
    """Shorten the terminal output of `logger` (Snakemake's) for a real run in the main process; True if done. A dry
    run's handler gets its reasons shortened only (False: its output stays Snakemake's). `quick(rule)`: the rule's
    jobs take seconds, their line names no log."""
    if not main_process:
        return False
    done = False
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler) or not isinstance(handler, logging.StreamHandler):
            continue  # the main log keeps everything
        settings = [f for f in handler.filters if hasattr(f, "dryrun")]
        if any(getattr(f, "printshellcmds", False) or getattr(f, "verbose", False) for f in settings):
            continue
        if any(f.dryrun for f in settings):
            if not isinstance(handler.formatter, ShortReasonFormatter):
                handler.setFormatter(ShortReasonFormatter(handler.formatter))
            continue
        if any(isinstance(f, TerseFilter) for f in handler.filters):
            continue
        handler.addFilter(TerseFilter(handler))
        handler.setFormatter(TerseFormatter(handler.formatter, quick))
        done = True
    return done


def sampler_words(samplers: dict) -> str:
    """`fast_sampling.samplers` for a job's line, samplers of the same step counts together: 'ddim and
    dpm_solver_pp_2m at 10, 25 and 50 steps; deis_ipndm_as_shipped at 10 steps'. (A rule's message is written when
    the rule is defined: Snakemake prints a params dict as Python, and a param added for its words would rerun the
    job's existing results.)"""
    by_counts: dict[tuple, list[str]] = {}
    for name, counts in samplers.items():
        by_counts.setdefault(tuple(counts), []).append(name)
    return "; ".join(f"{join_words(names)} at {join_words([str(c) for c in counts])} step{'' if counts == (1,) else 's'}"
                     for counts, names in by_counts.items())
