"""The one exception the profiling package raises for conditions a user can fix."""

from __future__ import annotations

from jobio.errors import ExpectedError


class ProfilingError(ExpectedError, RuntimeError):
    """A profiling run or export that cannot be used; the message is one line naming the cause and the fix."""
