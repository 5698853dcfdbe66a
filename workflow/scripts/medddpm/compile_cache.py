"""How much of a compilation came out of inductor's on-disk caches.

A compile time is a cold compile's only when nothing came from the caches: a job that runs after another compiled the
same graph on the same machine (a warm host, chained calls, a rerun) finds the compiled graphs and kernels there and
takes seconds instead of minutes. The jobs count the cache lookups that torch records (`torch._dynamo.utils.counters`)
around their compilation and write the counts beside the compile time, so that tables can say which times were warm
(`state`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

# Counts written, and the counter (group, name) each is read from: the compiled graphs (forward and backward) that
# inductor looked up, and AOTAutograd's lookups of the joint graph.
COUNTERS = {
    "fx_graph_hits": ("inductor", "fxgraph_cache_hit"),
    "fx_graph_misses": ("inductor", "fxgraph_cache_miss"),
    "autograd_hits": ("aot_autograd", "autograd_cache_hit"),
    "autograd_misses": ("aot_autograd", "autograd_cache_miss"),
}
# The states of `state` in which a compile time is not a cold compile's.
WARM = ("warm", "partly warm")


def _read() -> dict[str, int]:
    # The counters live in torch._dynamo.utils: a process that has not imported it has compiled nothing, and a job
    # that compiles nothing (eager sampling) is spared dynamo's import, about a second of CPU time.
    if "torch._dynamo.utils" not in sys.modules:
        return dict.fromkeys(COUNTERS, 0)
    from torch._dynamo.utils import counters

    return {name: int(counters[group][counter]) for name, (group, counter) in COUNTERS.items()}


@contextlib.contextmanager
def counting() -> Iterator[dict[str, int]]:
    """Yield a dict that holds, once the block has run, the cache lookups made inside it (COUNTERS' names)."""
    before = _read()
    counts: dict[str, int] = {}
    try:
        yield counts
    finally:
        after = _read()
        counts.update({name: after[name] - before[name] for name in COUNTERS})


def state(counts: dict | None) -> str | None:
    """"cold" (every lookup missed), "warm" (every lookup hit), "partly warm", or None (no counts, or no lookup: the
    job compiled nothing through inductor)."""
    if not counts:
        return None
    hits = counts.get("fx_graph_hits", 0) + counts.get("autograd_hits", 0)
    misses = counts.get("fx_graph_misses", 0) + counts.get("autograd_misses", 0)
    if hits == misses == 0:
        return None
    return "cold" if hits == 0 else "warm" if misses == 0 else "partly warm"
