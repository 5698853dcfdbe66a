"""The U-Net's two edge convolutions (3x3x3, 128^3) in other forms than cuDNN's, each timed alone on a GPU.

After the pinning (../2026-12-05-conv-layouts/), cuDNN runs both edges on NDHWC operands, but with pre-Hopper `sm80`
kernels far from their floors. On an H100, per sampling evaluation: the first convolution (3 channels to 64) 669 us
against a FLOP floor of 27 us, the output convolution (64 channels to 1 filter, padded to 8) 887 us against 9 us; per
training sample their gradients add 2.9 ms more. With 3 input channels, or one filter, a tensor-core convolution has
almost nothing to reduce over, or to produce, per tap. The forms (medddpm.conv_gemm, the `edge_gemms` switch's code):

First convolution (`first`):
- `cudnn`: F.conv3d on the NDHWC input, as the compiled U-Net calls it with `ndhwc_edges`.
- `padded8`: the input and weight zero-padded to 8 channels first (the NHWC kernels' channel multiple).
- `im2col`: the input's 3x3x3 windows gathered per voxel (81 columns and 7 zero ones), one matrix product of
  K = 88: 22 GFLOP and 0.37 GB of gathered input at 128^3 in bfloat16.
Output convolution (`output`):
- `cudnn`: F.conv3d with the filter padded to 8 and the output sliced back, as `ndhwc_edges` calls it.
- `shifted_sum`: one matrix product from 64 channels to the 27 per-tap partial sums (32 columns), then each voxel
  the sum of its 27 neighbours' partial sums: 0.27 GB read, 0.13 GB written and read again.
Each `im2col` and `shifted_sum` also through torch.compile (`_compiled`): inductor fuses the gather, or the shifted
sum, into one kernel, as in the compiled U-Net.

Forward, and forward with the gradients the U-Net takes (the first convolution's input is data: weight and bias only;
the output convolution's: input, weight and bias), each timed by CUDA events over `--repeats` calls after
`--warmup` untimed ones, the median reported.

    PYTHONPATH=../../../workflow/scripts python3 edge_conv_forms.py          # on a GPU: edge_conv_forms_<device>.md
    PYTHONPATH=../../../workflow/scripts python3 edge_conv_forms.py --check  # anywhere: against F.conv3d, float64

(from this folder; PYTHONPATH names the workflow's library, whose forms are timed).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from medddpm.conv_gemm import conv3x3_im2col, conv3x3_shifted_sum
from medddpm.unet import OUTPUT_CHANNEL_MULTIPLE

CL = torch.channels_last_3d
# (input channels, filters, which of input, weight, bias take a gradient) of the whole-head U-Net's two edges.
EDGES = {"first": (3, 64, (False, True, True)), "output": (64, 1, (True, True, True))}


def cudnn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.conv3d(x, weight, bias, padding=1)


def padded8_channels(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    extra = 8 - x.shape[1]
    x8 = F.pad(x, (0, 0) * 3 + (0, extra)).contiguous(memory_format=CL)
    w8 = F.pad(weight, (0, 0) * 3 + (0, extra)).contiguous(memory_format=CL)
    return F.conv3d(x8, w8, bias, padding=1)


def padded8_filters(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """As unet.OutputConv3d with `ndhwc_edges`: zero filters up to 8, the output sliced back."""
    extra = -weight.shape[0] % OUTPUT_CHANNEL_MULTIPLE
    out = F.conv3d(x, F.pad(weight, (0, 0) * 4 + (0, extra)), F.pad(bias, (0, extra)), padding=1)
    return out[:, : weight.shape[0]]


def compiled(form):
    return torch.compile(form, fullgraph=True, dynamic=False)


def forms(edge: str) -> dict:
    """Every form of one edge by name, the compiled ones last (compiled at their first call)."""
    if edge == "first":
        return {"cudnn": cudnn, "padded8": padded8_channels, "im2col": conv3x3_im2col,
                "im2col_compiled": compiled(conv3x3_im2col)}
    return {"cudnn": padded8_filters, "shifted_sum": conv3x3_shifted_sum,
            "shifted_sum_compiled": compiled(conv3x3_shifted_sum)}


def operands(edge: str, size: int, **factory):
    """Input, weight and bias of one edge, laid out as the compiled U-Net holds them, gradients where it takes them."""
    in_channels, filters, needs_grad = EDGES[edge]
    x = torch.randn(1, in_channels, size, size, size, **factory).contiguous(memory_format=CL)
    weight = torch.randn(filters, in_channels, 3, 3, 3, **factory).contiguous(memory_format=CL)
    bias = torch.randn(filters, **factory)
    return [t.requires_grad_(grad) for t, grad in zip((x, weight, bias), needs_grad)]


def check() -> None:
    """Every form of both edges against F.conv3d in float64: the output and the gradients the U-Net takes."""
    torch.manual_seed(0)
    for edge in EDGES:
        tensors = operands(edge, 8, dtype=torch.float64)
        wrt = [t for t in tensors if t.requires_grad]
        expected = cudnn(*tensors)
        grad_out = torch.randn_like(expected)
        expected_grads = torch.autograd.grad(expected, wrt, grad_out)
        for name, form in forms(edge).items():
            out = form(*tensors)
            torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
            for got, want in zip(torch.autograd.grad(out, wrt, grad_out), expected_grads):
                torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
            print(f"{edge} {name}: the same output and gradients as F.conv3d in float64")


def median_ms(call, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def time_edge(edge: str, size: int, warmup: int, repeats: int) -> list[str]:
    torch.manual_seed(0)
    tensors = operands(edge, size, device="cuda", dtype=torch.bfloat16)
    wrt = [t for t in tensors if t.requires_grad]
    with torch.no_grad():
        reference = cudnn(*tensors).float()
    grad_out = torch.randn_like(reference).to(torch.bfloat16)
    in_channels, filters, _ = EDGES[edge]
    flop = 2 * size ** 3 * filters * in_channels * 27
    lines = [f"## {edge} convolution ({in_channels} channels to {filters}): forward FLOP {flop / 1e9:.1f} G", "",
             "| form | forward (ms) | forward + gradients (ms) | output against F.conv3d (relative) |",
             "|---|---:|---:|---:|"]
    for name, form in forms(edge).items():
        with torch.no_grad():
            forward = median_ms(lambda: form(*tensors), warmup, repeats)
            difference = ((form(*tensors).float() - reference).norm() / reference.norm()).item()

        def with_gradients():
            torch.autograd.grad(form(*tensors), wrt, grad_out)

        both = median_ms(with_gradients, warmup, repeats)
        lines.append(f"| {name} | {forward:.3f} | {both:.3f} | {difference:.1e} |")
        print(lines[-1], flush=True)
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="float64 check of every form at 8^3 (any device)")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    if args.check:
        check()
        return
    if not torch.cuda.is_available():
        raise SystemExit("edge_conv_forms.py: timing needs a CUDA GPU (--check runs anywhere)")
    torch.backends.cudnn.benchmark = True  # as the frontier rungs run
    lines = [f"# The edge convolutions' forms at {args.size}^3, bfloat16, {torch.cuda.get_device_name()}", "",
             f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; median of {args.repeats} calls "
             f"after {args.warmup}, CUDA events.", ""]
    for edge in EDGES:
        lines += time_edge(edge, args.size, args.warmup, args.repeats)
    name = torch.cuda.get_device_name().split()[1].lower()
    Path(__file__).with_name(f"edge_conv_forms_{name}.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
