"""Sampling throughput: volumes per hour from a timed sampling step, and the summary the tables read.

The sampling job times the variant's sampling step at several batch sizes (medddpm.jobs.throughput_sweep) and writes
sample.json's `throughput`:

    {"timesteps": T, "masks": distinct held-out masks the batches repeat,
     "batches": [{"batch": b, "fits": true, "step_time": {...summary...}, "volumes_per_hour": x, ...},
                 {"batch": b, "fits": false, "error": "CUDA out of memory ..."},
                 {"batch": b, "fits": null, "skipped": "batch ... did not fit in memory"}],
     "best_batch": b, "volumes_per_hour_best": x}

A sample.json written before the sweep existed (the shipped reference sets so far) has no `throughput`: its
volumes per hour are not measured, and nothing here derives them from its per-volume time. No torch here: the
reporting environment reads these files too.
"""

from __future__ import annotations

# The summary columns of one sampling run, as the bench table, the collected runs table, tab07 and fig11 name them.
COLUMNS = ("sample_volumes_per_hour_b1", "sample_best_batch", "sample_volumes_per_hour_best")


def volumes_per_hour(batch: int, step_ms: float, timesteps: int) -> float:
    """Volumes a sampler finishes per hour when one step of `batch` volumes takes `step_ms` and a volume needs a
    full chain of `timesteps` steps: 3600 x batch / (T x step seconds)."""
    return 3600.0 * batch / (timesteps * step_ms / 1e3)


def best_batch(batches: list[dict]) -> tuple[int | None, float | None]:
    """The batch size with the most volumes per hour among those that fit, and its rate; (None, None) if none fit.
    A tie goes to the smaller batch (less memory for the same rate)."""
    fitting = [b for b in batches if b.get("fits") and b.get("volumes_per_hour") is not None]
    if not fitting:
        return None, None
    top = max(fitting, key=lambda b: (b["volumes_per_hour"], -b["batch"]))
    return top["batch"], top["volumes_per_hour"]


def run_columns(sample: dict) -> dict:
    """COLUMNS of one sample.json: volumes per hour at batch 1, the best batch and its volumes per hour; None for
    each where the run has no throughput sweep (not measured) or batch 1 did not fit. A best batch is a choice among
    batch sizes: a sweep of one size (sample.batch_sizes: [1], a short timing run) has none, so its best-batch
    columns stay None beside its batch-1 rate (single_size_sweep tells the tables why)."""
    sweep = sample.get("throughput") or {}
    batches = sweep.get("batches") or []
    one = next((b for b in batches if b.get("batch") == 1 and b.get("fits")), None)
    chose = len(batches) > 1
    return {
        "sample_volumes_per_hour_b1": one.get("volumes_per_hour") if one else None,
        "sample_best_batch": sweep.get("best_batch") if chose else None,
        "sample_volumes_per_hour_best": sweep.get("volumes_per_hour_best") if chose else None,
    }


def single_size_sweep(b1_rate, best_rate) -> bool:
    """Whether a run's columns are those of a sweep of batch 1 alone: a batch-1 rate and no best batch."""
    return _measured(b1_rate) and not _measured(best_rate)


def _measured(rate) -> bool:
    """A rate that is there: neither None (a run's record) nor NaN (a table's empty cell; NaN != NaN)."""
    return rate is not None and rate == rate
