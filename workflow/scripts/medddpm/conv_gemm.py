"""A 3x3x3 convolution (stride 1, padding 1) as matrix products, for the two edges of the U-Net where cuDNN has
almost nothing to reduce over: the first convolution (3 input channels) and the output convolution (1 filter).

cuDNN runs both with pre-Hopper `sm80` kernels, far from any floor: on an H100, in a sampling evaluation at 128^3, the
first takes 669 us and the output 887 us against FLOP floors of 27 and 9 us, and a training sample adds their
gradients' kernels, 4.5 ms per sample in all (data/measurements/2026-12-05-conv-layouts/h100-pinned/). Written as
matrix products, the work moves into cuBLAS with the channels as the long dimension, and the gathers and shifted sums
around the products are pointwise work that inductor fuses into one kernel each:

- `conv3x3_im2col` (few input channels): the input's 27 taps gathered per voxel (im2col), then one matrix product
  with K = 27 C (zero columns up to a multiple of 8).
- `conv3x3_shifted_sum` (few filters): one matrix product from the C channels to each filter's 27 per-tap partial
  sums, then each output voxel the sum of its 27 neighbours' partial sums, one per tap.

Both compute the convolution's function: in float64 they agree with F.conv3d to rounding, forward and every gradient
(tests/test_edge_gemms.py). In bfloat16 the shifted sum rounds each tap's partial sum to bfloat16 before the 27 are
added (in float32); the error this adds is measured there too. Eager runs the gathers and sums as tens of kernels:
the forms are meant for torch.compile.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

TAPS = list(itertools.product(range(3), repeat=3))  # (kz, ky, kx) in the weight's order
# cuBLAS's tensor-core kernels want 16-byte aligned rows: bfloat16 row lengths in multiples of 8.
ROW_MULTIPLE = 8


def conv3x3_im2col(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.conv3d(x, weight, bias, padding=1) for a (O, C, 3, 3, 3) weight, as im2col and one matrix product: column
    t * C + c of the gathered input is channel c at tap t's offset. The output is (N, O, D, H, W) laid out NDHWC.

    The columns are the padded input's 3x3x3 windows (`Tensor.unfold`, a view) copied out row by row: one gather
    kernel under inductor. A `torch.cat` of the 27 shifted views would be 28 copies into strided slices there
    (inductor writes a concatenation of more than 8 inputs input by input)."""
    n, c, d, h, w = x.shape
    out_channels = weight.shape[0]
    rows = F.pad(x.permute(0, 2, 3, 4, 1), (0, 0, 1, 1, 1, 1, 1, 1))  # (N, D+2, H+2, W+2, C), zero at the border
    windows = rows.unfold(1, 3, 1).unfold(2, 3, 1).unfold(3, 3, 1)  # (N, D, H, W, C, 3, 3, 3), a view
    columns = windows.permute(0, 1, 2, 3, 5, 6, 7, 4).reshape(n * d * h * w, len(TAPS) * c)
    extra = -len(TAPS) * c % ROW_MULTIPLE
    columns = F.pad(columns, (0, extra))  # (N D H W, 27 C + extra), the zero columns written by the same kernel
    matrix = F.pad(weight.permute(0, 2, 3, 4, 1).reshape(out_channels, -1), (0, extra))  # the same column order
    if bias is None:
        out = columns @ matrix.t()
    else:
        out = torch.addmm(bias, columns, matrix.t())
    return out.reshape(n, d, h, w, out_channels).permute(0, 4, 1, 2, 3)


def conv3x3_shifted_sum(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.conv3d(x, weight, bias, padding=1) for a (O, C, 3, 3, 3) weight, as one matrix product to per-tap partial
    sums, partial[v, t * O + o] = sum_c x[v, c] weight[o, c, t], and out[v, o] = sum_t partial[v + offset(t), t * O + o]
    (zero outside the volume, as the convolution's padding). The output is (N, O, D, H, W) laid out NDHWC."""
    n, c, d, h, w = x.shape
    out_channels = weight.shape[0]
    per_tap = weight.permute(2, 3, 4, 0, 1).reshape(len(TAPS) * out_channels, c)  # row t * O + o
    per_tap = F.pad(per_tap, (0, 0, 0, -per_tap.shape[0] % ROW_MULTIPLE))  # zero rows: partial sums never read
    partial = F.linear(x.permute(0, 2, 3, 4, 1), per_tap)  # (N, D, H, W, 27 O + extra)
    shifted = F.pad(partial, (0, 0, 1, 1, 1, 1, 1, 1))
    # Added in float32 at least, whatever the partial sums' dtype: inductor adds in float32 anyway, eager would round
    # each of the 26 sums to bfloat16.
    total = torch.promote_types(partial.dtype, torch.float32)
    out = None
    for t, (z, y, v) in enumerate(TAPS):
        term = shifted[:, z:z + d, y:y + h, v:v + w, t * out_channels:(t + 1) * out_channels].to(total)
        out = term if out is None else out + term
    if bias is not None:
        out = out + bias.to(total)
    return out.to(partial.dtype).permute(0, 4, 1, 2, 3)
