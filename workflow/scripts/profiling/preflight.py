"""The preflight of a timed campaign: one cheap check of a device and its software stack before anything is timed.

Known hazards of the stack, not of the workflow: a cuDNN release returned wrong bf16 conv3d results on large inputs,
and a torch release disabled cuDNN for conv3d, falling back to PyTorch's own kernels (vol2col and a GEMM) at many
times the memory. Either would be timed and drawn as if it were the workload. So, per hardware label, before its
first timed job (the `preflight` rule; every timed rule takes its record as an input; measurement.conv_checks says
what is checked and what a timed job asks of the record):

- conv3d at the study's shapes (the U-Net's widest convolution: base_width channels in and out, 3x3x3, over the
  whole volume) in every precision, layout and autotuner setting a variant can switch on (fp32, TF32, bf16 or fp16
  autocast; channels-last; cuDNN's autotuner), against float64: at sampled output points (the first, the last, and
  random ones between), computed directly from the same inputs as a sum of products, independent of any
  convolution kernel;
- on a CUDA GPU, that cuDNN runs each of those convolutions (the kernels torch.profiler records include a cuDNN
  convolution kernel, and none of the fallback's), and the peak memory it took;
- the versions of the stack (device, driver, CUDA, cuDNN, torch).

A failure of a combination the configured variants use stops the campaign in one line naming the stack. What a
device cannot do is said, not failed: on a CPU the cuDNN check, TF32, fp16 autocast and the autotuner are "not
measurable here".
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict

import torch
import torch.nn.functional as F

from measurement.conv_checks import NOT_MEASURABLE, TOLERANCE, Check
from medddpm.switches import Variant
from medddpm.variants import apply_backend, backend_flags, restore_backend

from .kernels import classify

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Output points compared with float64 per check (and always the first and the last one).
SAMPLES = 4096
# PyTorch's own conv3d kernels, which run where cuDNN does not; and words of cuDNN's convolution kernels beside the
# classes of profiling.kernels (its autotuner may pick Winograd or FFT kernels, which no class names).
FALLBACK_KERNELS = ("vol2col", "im2col", "slow_conv")
CUDNN_WORDS = ("cudnn", "xmma", "implicit_convolve", "winograd", "fft")


@contextlib.contextmanager
def _backend(check: Check, device: torch.device):
    """TF32 and cuDNN's autotuner as the check needs them (set as the variants set them: medddpm.variants), and the
    autocast of its precision; the switches as they were afterwards."""
    saved = backend_flags()
    apply_backend(Variant("preflight", cudnn_tf32=check.precision == "tf32", matmul_tf32=False, channels_last=False,
                          cudnn_benchmark=check.cudnn_benchmark))
    try:
        with torch.autocast(device.type, dtype=AUTOCAST[check.precision]) if check.precision in AUTOCAST \
                else contextlib.nullcontext():
            yield
    finally:
        restore_backend(saved)


def measurable(check: Check, device: torch.device) -> str | None:
    """Why `check` cannot run on `device` (None: it can): TF32, fp16 autocast and cuDNN's autotuner are CUDA's."""
    if device.type != "cuda" and check.precision in ("tf32", "fp16"):
        return f"{NOT_MEASURABLE}: {check.precision} is a CUDA precision (the variants run fp32 on a CPU)"
    if device.type != "cuda" and check.cudnn_benchmark:
        return f"{NOT_MEASURABLE}: cuDNN's autotuner is CUDA's (the check without it holds for a CPU)"
    return None


def _inputs(channels: int, shape, device: torch.device, seed: int):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, channels, *shape, generator=generator)
    weight = torch.randn(channels, channels, 3, 3, 3, generator=generator) / math.sqrt(channels * 27)
    bias = torch.randn(channels, generator=generator) * 0.1
    return x.to(device), weight.to(device), bias.to(device)


def sample_points(shape, count: int, seed: int) -> torch.Tensor:
    """Flat indices of output points: the first, the last, and `count` random ones (every point of a volume with
    no more than that)."""
    size = math.prod(shape)
    if size <= count + 2:
        return torch.arange(size)
    random = torch.randint(size, (count,), generator=torch.Generator().manual_seed(seed + 1))
    return torch.unique(torch.cat([torch.tensor([0, size - 1]), random]))


def reference_at(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """The 3x3x3 convolution (padding 1) at the flat output `points`, in float64, as sums of products of the same
    inputs: [points, out channels]."""
    *_, height, width = x.shape
    padded = F.pad(x[0], (1, 1, 1, 1, 1, 1))
    d, rest = points // (height * width), points % (height * width)
    h, w = rest // width, rest % width
    offsets = torch.arange(3, device=x.device)
    dd = (d.to(x.device)[:, None] + offsets)[:, :, None, None]
    hh = (h.to(x.device)[:, None] + offsets)[:, None, :, None]
    ww = (w.to(x.device)[:, None] + offsets)[:, None, None, :]
    patches = padded[:, dd, hh, ww]  # [channels, points, 3, 3, 3]
    products = torch.einsum("cpijk,ocijk->po", patches.double(), weight.double())
    return products + bias.double()


def _kernels(run) -> tuple[list[str], object]:
    """The CUDA kernels `run` launches (torch.profiler) and its result."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        result = run()
        torch.cuda.synchronize()
    names = [event.name for event in profiler.events() if str(event.device_type).endswith("CUDA")]
    return list(dict.fromkeys(names)), result


def run_check(check: Check, channels: int, shape, device: torch.device, seed: int = 0) -> dict:
    """One check's record: the error against float64 at the sampled points and its limit, and on a GPU the kernels
    that ran, whether cuDNN was among them and the peak memory; `passed` (None where the device cannot run it) and
    `state` ("passed", what failed, or why it was not measurable)."""
    record = {**asdict(check), "name": check.name, "shape": [1, channels, *shape]}
    unmeasurable = measurable(check, device)
    if unmeasurable:
        return {**record, "passed": None, "state": unmeasurable}
    x, weight, bias = _inputs(channels, shape, device, seed)
    points = sample_points(shape, SAMPLES, seed)
    expected = reference_at(x, weight, bias, points)
    layout = torch.channels_last_3d if check.channels_last else torch.contiguous_format
    x, weight = x.to(memory_format=layout), weight.to(memory_format=layout)

    def convolve():
        with _backend(check, device):
            return F.conv3d(x, weight, bias, padding=1)

    if device.type == "cuda":
        convolve()  # the autotuner's candidates and cuDNN's set-up, outside what is recorded
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        kernels, output = _kernels(convolve)
        record.update(kernels=kernels, peak_memory_bytes=int(torch.cuda.max_memory_allocated(device)),
                      tensor_bytes=int(x.numel() * x.element_size() * 2))
        fallback = [name for name in kernels if any(word in name for word in FALLBACK_KERNELS)]
        convolution = [name for name in kernels
                       if classify(name) == "conv_fprop" or any(word in name.lower() for word in CUDNN_WORDS)]
        record["cudnn"] = bool(convolution) and not fallback
    else:
        output = convolve()
        record["cudnn"] = f"{NOT_MEASURABLE}: cuDNN runs on CUDA GPUs"
    got = output[0].reshape(output.shape[1], -1)[:, points.to(output.device)].T.double().cpu()
    expected = expected.cpu()
    scale = float(torch.sqrt((expected ** 2).mean()))
    error = (got - expected).abs()
    worst = float(error.max()) / scale if scale > 0 else math.inf
    record.update(max_error=worst, tolerance=TOLERANCE[check.precision], points=int(points.numel()),
                  points_beyond=int((error / scale > TOLERANCE[check.precision]).any(dim=1).sum()),
                  finite=bool(torch.isfinite(got).all()))
    problems = []
    if not record["finite"] or worst > TOLERANCE[check.precision]:
        problems.append(f"{check.name} of {'x'.join(map(str, record['shape']))} differs from float64 by "
                        f"{worst:.3g} of the output's RMS at {record['points_beyond']} of {record['points']} sampled "
                        f"points (allowed {TOLERANCE[check.precision]:g})")
    if record["cudnn"] is False:
        shown = ", ".join(name[:60] for name in kernels[:3]) or "no kernel"
        problems.append(f"{check.name} ran no cuDNN convolution ({shown}): PyTorch's fallback, which takes "
                        f"{record['peak_memory_bytes'] / max(record['tensor_bytes'], 1):.1f}x its input and output in "
                        "memory and times another kernel")
    return {**record, "passed": not problems, "state": "; ".join(problems) or "passed"}


