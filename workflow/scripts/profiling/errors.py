"""The one exception the profiling package raises for conditions a user can fix."""

from __future__ import annotations


class ProfilingError(RuntimeError):
    """A profiling run or export that cannot be used; the message is one line naming the cause and the fix."""

    def __init__(self, message: str) -> None:
        # One line on purpose: Snakemake logs and CI summaries show the first line, not a stack trace.
        super().__init__(" ".join(message.split()))
