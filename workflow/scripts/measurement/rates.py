"""Measured ceilings of a device: dense matrix-product rate and device-to-device copy bandwidth.

The bench table divides the model's FLOP rate by the measured bf16 matrix-product rate (not a datasheet number):
random operands (a GPU multiplying zeros draws less power and clocks higher, so zeros would overstate the rate;
docs/optimization-ladder.md has the H200's numbers), warm-up before timing, each repeat timed on its own (CUDA events on a GPU, a clock on the
CPU), the median reported with the spread.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .timing import DeviceTimer, summary

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass(frozen=True)
class RateSettings:
    """Sizes per device kind: a GPU needs large problems to reach its rate, a CPU small ones to finish in seconds."""

    gpu_matmul_size: int
    cpu_matmul_size: int
    gpu_copy_mib: int
    cpu_copy_mib: int
    warmup: int
    repeats: int


def _timed(device: torch.device, fn, warmup: int, repeats: int) -> dict:
    for _ in range(warmup):
        fn()
    timer = DeviceTimer(device)
    for _ in range(repeats):
        started = timer.start()
        fn()
        timer.stop(started)
    return summary(timer.elapsed_ms())


def matmul_rate(device: torch.device, n: int, dtype: str, warmup: int, repeats: int, seed: int = 0) -> dict:
    """Dense n x n x n matrix product (2 n^3 FLOP) on random normal operands."""
    generator = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(n, n, device=device, generator=generator).to(DTYPES[dtype])
    b = torch.randn(n, n, device=device, generator=generator).to(DTYPES[dtype])
    out = torch.empty(n, n, device=device, dtype=DTYPES[dtype])
    timing = _timed(device, lambda: torch.mm(a, b, out=out), warmup, repeats)
    flop = 2 * n**3
    return {"dtype": dtype, "n": n, "flop": flop, "time": timing, "tflops": flop / timing["median_ms"] / 1e9,
            "tflops_q1_time": flop / timing["q3_ms"] / 1e9, "tflops_q3_time": flop / timing["q1_ms"] / 1e9}


def copy_bandwidth(device: torch.device, mib: int, warmup: int, repeats: int) -> dict:
    """Device-to-device copy of `mib` MiB; bytes moved count the read and the write (2 x size)."""
    src = torch.rand(mib * 2**20 // 4, device=device)
    dst = torch.empty_like(src)
    timing = _timed(device, lambda: dst.copy_(src), warmup, repeats)
    moved = 2 * src.numel() * src.element_size()
    return {"bytes_copied": moved // 2, "bytes_moved": moved, "time": timing,
            "gb_per_s": moved / timing["median_ms"] / 1e6}


def device_rates(device: torch.device, settings: RateSettings) -> dict:
    """bf16 matrix-product rate and copy bandwidth of `device`; on a CPU smaller sizes and fp32 too."""
    cuda = device.type == "cuda"
    n = settings.gpu_matmul_size if cuda else settings.cpu_matmul_size
    matmuls = [matmul_rate(device, n, "bfloat16", settings.warmup, settings.repeats)]
    if not cuda:
        matmuls.append(matmul_rate(device, n, "float32", settings.warmup, settings.repeats))
    copy = copy_bandwidth(device, settings.gpu_copy_mib if cuda else settings.cpu_copy_mib, settings.warmup,
                          settings.repeats)
    return {
        "device_kind": device.type,
        "note": None if cuda else "these ceilings are the CPU's (this label's device), not a GPU's",
        "bf16_matmul_tflops": matmuls[0]["tflops"],
        "copy_gb_per_s": copy["gb_per_s"],
        "matmul": matmuls,
        "copy": copy,
        "settings": {"warmup": settings.warmup, "repeats": settings.repeats},
    }
