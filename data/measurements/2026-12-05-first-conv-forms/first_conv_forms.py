"""The U-Net's first convolution (3 channels to 64, 3x3x3, 128^3) in other forms than cuDNN's, timed on a GPU.

After the pinning (../2026-12-05-conv-layouts/), cuDNN runs this convolution on NDHWC operands, but with a pre-Hopper
`sm80` kernel behind its padding of the 3 channels: 668 us per evaluation on an H100 against a FLOP floor of 27 us, and
in training a weight gradient of its own. With 3 input channels a tensor-core convolution has almost nothing to reduce
over per tap. Gathering the 27 taps first (im2col) turns it into one matrix product of K = 81 (88 with zero columns):
22 GFLOP, and 0.37 GB of gathered input at 128^3 in bfloat16, which a copy at 3 TB/s writes and reads again in about
0.25 ms. These forms compute the same function:

- `cudnn`: F.conv3d on the NDHWC input, as the compiled U-Net calls it now.
- `padded8`: the input and weight zero-padded to 8 channels first (the NHWC kernels' channel multiple).
- `im2col`: the 27 shifted views of the padded NDHWC input joined along channels (tap-major, zero columns up to 88),
  one matrix product with the weight as (88, 64), the bias added, the output NDHWC.
- `im2col_compiled`: `im2col` through torch.compile (inductor fuses the gather into one kernel that writes the
  gathered input once).

Forward, and forward with the weight's gradient (the first convolution's input is data: it needs no gradient), each
timed by CUDA events over `--repeats` calls after `--warmup` untimed ones, the median reported.

    python3 first_conv_forms.py                 # on a GPU: 128^3, bfloat16; writes first_conv_forms_<device>.md
    python3 first_conv_forms.py --check         # anywhere: every form against F.conv3d in float64 at 8^3
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

CL = torch.channels_last_3d
IN, OUT, K = 3, 64, 3


def cudnn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.conv3d(x, weight, bias, padding=1)


def padded8(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    extra = 8 - x.shape[1]
    x8 = F.pad(x, (0, 0) * 3 + (0, extra)).contiguous(memory_format=CL)
    w8 = F.pad(weight, (0, 0) * 3 + (0, extra)).contiguous(memory_format=CL)
    return F.conv3d(x8, w8, bias, padding=1)


def im2col(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """(N, C, D, H, W) in, (N, 64, D, H, W) out laid out NDHWC: column ((kz * 3 + ky) * 3 + kx) * C + c of the
    gathered input is input channel c at offset (kz - 1, ky - 1, kx - 1)."""
    n, c, d, h, w = x.shape
    padded = F.pad(x.permute(0, 2, 3, 4, 1), (0, 0, 1, 1, 1, 1, 1, 1))  # (N, D+2, H+2, W+2, C)
    taps = [padded[:, z:z + d, y:y + h, v:v + w, :] for z, y, v in itertools.product(range(K), repeat=3)]
    # Zero columns up to a multiple of 8 (81 -> 88): cuBLAS's tensor-core kernels want 16-byte aligned rows.
    extra = -len(taps) * c % 8
    columns = torch.cat(taps + [padded.new_zeros(n, d, h, w, extra)], dim=-1)  # (N, D, H, W, 27 C + extra)
    matrix = weight.permute(0, 2, 3, 4, 1).reshape(weight.shape[0], -1)  # (64, 27 C), the same column order
    matrix = F.pad(matrix, (0, extra))
    out = torch.addmm(bias, columns.reshape(-1, columns.shape[-1]), matrix.t())
    return out.reshape(n, d, h, w, -1).permute(0, 4, 1, 2, 3)


def forms() -> dict:
    """Every form by name, the compiled im2col last (compiled here, at its first call)."""
    return {"cudnn": cudnn, "padded8": padded8, "im2col": im2col,
            "im2col_compiled": torch.compile(im2col, fullgraph=True, dynamic=False)}


def check() -> None:
    """Every form (and the compiled im2col) against F.conv3d in float64, output and weight gradient."""
    torch.manual_seed(0)
    x = torch.randn(1, IN, 8, 8, 8, dtype=torch.float64).contiguous(memory_format=CL)
    weight = torch.randn(OUT, IN, K, K, K, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(OUT, dtype=torch.float64, requires_grad=True)
    expected = F.conv3d(x, weight, bias, padding=1)
    grad_out = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, (weight, bias), grad_out)
    for name, form in forms().items():
        out = form(x, weight, bias)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
        for got, want in zip(torch.autograd.grad(out, (weight, bias), grad_out), expected_grads):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        print(f"{name}: the same output and weight gradient as F.conv3d in float64")


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


def time_forms(size: int, warmup: int, repeats: int) -> list[str]:
    cuda = torch.device("cuda")
    torch.backends.cudnn.benchmark = True  # as the frontier rungs run
    torch.manual_seed(0)
    x = torch.randn(1, IN, size, size, size, device=cuda, dtype=torch.bfloat16).contiguous(memory_format=CL)
    weight = torch.randn(OUT, IN, K, K, K, device=cuda, dtype=torch.bfloat16).contiguous(memory_format=CL)
    weight.requires_grad_()
    bias = torch.randn(OUT, device=cuda, dtype=torch.bfloat16, requires_grad=True)
    reference = cudnn(x, weight, bias).float()
    grad_out = torch.randn_like(reference).to(torch.bfloat16)
    flop = 2 * size ** 3 * OUT * IN * K ** 3
    lines = [f"# The first convolution's forms at {size}^3, bfloat16, {torch.cuda.get_device_name()}", "",
             f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; median of {repeats} calls after "
             f"{warmup}, CUDA events. Forward FLOP {flop / 1e9:.1f} G.", "",
             "| form | forward (ms) | forward + weight gradient (ms) | output against cudnn (relative) |",
             "|---|---:|---:|---:|"]
    for name, form in forms().items():
        with torch.no_grad():
            forward = median_ms(lambda: form(x, weight, bias), warmup, repeats)
            difference = ((form(x, weight, bias).float() - reference).norm() / reference.norm()).item()

        def with_gradient():
            torch.autograd.grad(form(x, weight, bias), (weight, bias), grad_out)

        both = median_ms(with_gradient, warmup, repeats)
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
        raise SystemExit("first_conv_forms.py: timing needs a CUDA GPU (--check runs anywhere)")
    lines = time_forms(args.size, args.warmup, args.repeats)
    name = torch.cuda.get_device_name().split()[1].lower()
    (Path(__file__).with_name(f"first_conv_forms_{name}.md")).write_text("\n".join(lines))


if __name__ == "__main__":
    main()
