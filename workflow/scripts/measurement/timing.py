"""Timing of device work: CUDA events on a GPU, a synchronised monotonic clock on the CPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); nothing to wait for on the CPU, whose work is synchronous."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class DeviceTimer:
    """Times a region: `start()`, then device work, then `stop()` returns nothing; `elapsed_ms()` reads all."""

    def __init__(self, device: torch.device):
        self.device = device
        self._pending: list[tuple[object, object]] = []

    def start(self):
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, started) -> None:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._pending.append((started, event))
        else:
            self._pending.append((started, time.perf_counter()))

    def elapsed_ms(self) -> list[float]:
        """Milliseconds of every stopped region, in order; synchronises once at the end (no per-step sync)."""
        synchronize(self.device)
        if self.device.type == "cuda":
            return [float(a.elapsed_time(b)) for a, b in self._pending]
        return [(b - a) * 1e3 for a, b in self._pending]


def summary(values_ms: Sequence[float]) -> dict:
    """Median and spread of repeated timings."""
    values = sorted(values_ms)
    if not values:
        return {"n": 0}
    quartiles = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {
        "n": len(values),
        "median_ms": statistics.median(values),
        "q1_ms": quartiles[0],
        "q3_ms": quartiles[2],
        "min_ms": values[0],
        "max_ms": values[-1],
        "mean_ms": statistics.fmean(values),
    }
