"""GroupNorm32 + SiLU for channels-last (NDHWC) activations: Triton kernels, forward and backward, as a custom op.

The function is `unet.group_norm_silu` (upstream's GroupNorm32 followed by SiLU): statistics and affine transform in
(at least) float32, the result cast back to the input's dtype before SiLU. What differs is only how it reaches the
memory. A channels-last 3D activation of shape (N, C, D, H, W) is an (N, S, C) array with S = D*H*W and the channels
of a group next to each other, the layout of NVIDIA's NHWC GroupNorm for 2D diffusion training
(apex.contrib.group_norm) with H*W = D*H*W. Each direction reads the activation twice, in tiles of whole rows
(BLOCK_S voxels x all C channels, one contiguous stretch of memory), in three kernels per direction:

forward   1. sums (Tiling.programs per sample, each looping over every PARTS-th tile, sums kept in registers): per channel,
             the sums of d and d^2, d = x - K with K the sample's first value of the channel's group (the shifted-
             data algorithm: stable where the mean is large against the spread, as Welford's in ATen's GroupNorm,
             and the sums of a group's channels and programs simply add);
          2. statistics (one program per sample and group): mean and rstd from those sums;
          3. apply (one program per tile): y = silu(cast(x * a[c] + b[c])), a = rstd * weight, b = bias - mean * a.
backward  1. sums, as forward: per channel, sums of dz and dz * xhat (dz = the gradient at the norm's output, through
             SiLU and the cast);
          2. coefficients (one program per group): per (sample, channel) p, q, r with dx = p * dz + q * x + r (the
             two group means of GroupNorm's input gradient folded in), and the weight and bias gradients;
          3. apply (one program per tile): dx.

Forward and backward are custom ops (`torch.library.custom_op`, with their shapes for tracing and the autograd
formula): torch.compile keeps each as one node of its graph, with a channels-last output, and fuses the rest of the
graph around them, so the compiled step never converts the activation to NCDHW. (`torch.library.triton_op` would let
inductor see inside and launch the kernels itself, but its tracing launches them under Triton's interpreter, which
the tests on a CPU use.)

The statistics and coefficients passes run one program per group: as one program per sample and one in all they took
a large share of the kernels' time. What the kernels cost in the training step, and what is left (the sums passes'
bandwidth below the apply passes', each op's host time of Python, allocations and three Triton launches, which leaves
the GPU idle between small kernels unless the step is replayed from a CUDA graph: the frontier_graphed rung), is
recorded in docs/optimization-ladder.md (frontier_ndhwc) and data/measurements/h200-2026-12-02-ndhwc/README.md.

Every norm site takes the kernels, the small ones too. Leaving the small sites' norms to inductor (which fuses them with
their neighbours) was tried to spare their host time: inductor's fusion of them with the gather upsampling and the
skip concatenation (`triton_poi_fused_..._cat_..._silu_slice_stack_view`) then hit a misaligned address in the
sampling evaluation at a batch of 8, also with no NDHWC kernel at all, where the kernels at every site run
(data/measurements/h200-2026-12-02-graphed/README.md).

Inputs other than a CUDA (or, under TRITON_INTERPRET=1, CPU) tensor in channels_last_3d are for `group_norm_silu`:
`group_norm_silu_ndhwc` sends them there, so the module is a drop-in kernel for `unet.GroupNormSiLU`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch.library import custom_op

from .unet import group_norm_silu

@dataclass(frozen=True)
class Tiling:
    """Tile shapes and warps per program of the tile passes: elements per tile (BLOCK_S rows of all channels) of the
    forward sums pass, the backward sums pass and the two apply passes; the sums programs over the whole batch
    (programs // batch per sample, fewer where a sample has fewer tiles), each looping over every PARTS-th tile of its
    sample and keeping its sums in registers.

    Each pass has the tile it is fastest with: a forward sums program loads one tensor and adds, a backward sums
    program loads two and computes the gradient through SiLU and two roundings per element, an apply program streams
    one tile. Measured on an H200 at the two largest norm sites (`python3 -m profiling.norm_bench`;
    data/measurements/h200-2026-12-04-norm-tiles/): the forward sums pass took 250 us at 128 channels of 128^3 with
    4096 elements on 4 warps and 158 us with 2048 (3.4 TB/s), the backward sums pass was fastest at 4096 (451 us,
    2.4 TB/s), the apply passes at 4096 (275 and 416 us, 3.9 TB/s)."""

    forward_sums_elements: int = 2048
    forward_sums_warps: int = 4
    backward_sums_elements: int = 4096
    backward_sums_warps: int = 4
    programs: int = 1024
    apply_elements: int = 4096
    apply_warps: int = 4

    def sums(self, direction: str) -> tuple[int, int]:
        """(elements per tile, warps) of the sums pass of 'forward' or 'backward'."""
        return getattr(self, f"{direction}_sums_elements"), getattr(self, f"{direction}_sums_warps")


TILING = Tiling()
# Triton decides at import (when the kernels are decorated) whether they run on the GPU or in its interpreter, which
# runs them on CPU tensors (the tests on a machine without a GPU).
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _rows(elements: int, block_c: int, voxels: int) -> int:
    """BLOCK_S: the rows of a tile of about `elements` (a power of two, at least one row, no more than the sample)."""
    return max(1, min(elements // block_c, triton.next_power_of_2(voxels)))


def _plan(batch: int, channels: int, voxels: int, elements: int, programs: int) -> tuple[int, int, int, int]:
    """(BLOCK_C, BLOCK_S, tiles per sample, reduction programs per sample) of a sums pass of `elements` per tile and
    `programs` over the batch, for an activation of this shape."""
    block_c = triton.next_power_of_2(channels)
    block_s = _rows(elements, block_c, voxels)
    tiles = triton.cdiv(voxels, block_s)
    return block_c, block_s, tiles, max(1, min(tiles, programs // batch))


@triton.jit
def _tile_at(n, tile, S, C, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """Rows tile*BLOCK_S.. of sample n, all channels: (offsets, mask). In 64 bits: a batch of 128^3 activations
    passes 2^31 elements (8 samples of 128 channels, as in the sampling throughput sweep)."""
    rows = tile * BLOCK_S + tl.arange(0, BLOCK_S)
    cols = tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < S) & (cols[None, :] < C)
    return n.to(tl.int64) * S * C + rows[:, None].to(tl.int64) * C + cols[None, :], mask


@triton.jit
def _group_value(ptr, n, G, CPG, cols, C):
    """Sample n's value of an (N, G) per-group array, for each channel."""
    return tl.load(ptr + n * G + cols // CPG, mask=cols < C, other=0.0)


@triton.jit
def _channel_offset(o_ptr, n, cols, C, compute: tl.constexpr):
    """Sample n's (N, C) offset of each channel, the per-sample value added to the norm's input."""
    return tl.load(o_ptr + n * C + cols, mask=cols < C, other=0.0).to(compute)


@triton.jit
def _affine(w_ptr, b_ptr, mean_ptr, rstd_ptr, o_ptr, n, G, CPG, cols, C, compute: tl.constexpr,
            HAS_OFFSET: tl.constexpr):
    """Per channel of sample n: (scale, shift, mean, rstd), the norm's output being x * scale + shift. With an
    offset o the norm is of x + o: `mean` is then the channel's mean less its offset, so that xhat = (x - mean) * rstd
    in every pass."""
    mean = _group_value(mean_ptr, n, G, CPG, cols, C)
    if HAS_OFFSET:
        mean = mean - _channel_offset(o_ptr, n, cols, C, compute)
    rstd = _group_value(rstd_ptr, n, G, CPG, cols, C)
    scale = rstd * tl.load(w_ptr + cols, mask=cols < C, other=0.0).to(compute)
    shift = tl.load(b_ptr + cols, mask=cols < C, other=0.0).to(compute) - mean * scale
    return scale, shift, mean, rstd


@triton.jit
def _store_sums(sums_ptr, PLANE, pid, C, cols, s1, s2):
    """A sums program's two accumulators, added over their rows, into its row of each (N, PARTS, C) plane."""
    out = pid * C + cols
    tl.store(sums_ptr + out, tl.sum(s1, axis=0), mask=cols < C)
    tl.store(sums_ptr + PLANE + out, tl.sum(s2, axis=0), mask=cols < C)


@triton.jit
def _forward_sums(x_ptr, o_ptr, sums_ptr, S, C, CPG, TILES, PARTS, PLANE, FP64: tl.constexpr,
                  HAS_OFFSET: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """Per (sample, program, channel): sums of d and d^2 over the program's tiles, d = x - K, K the sample's first
    voxel of the channel's group (one shift per group, so the sums of a group's channels add up). With an offset o,
    d = (x + o) - K, K the first voxel's x + o of the group: x less a shift of its own per channel."""
    pid = tl.program_id(0)
    n = pid // PARTS
    part = pid % PARTS
    compute = tl.float64 if FP64 else tl.float32
    cols = tl.arange(0, BLOCK_C)
    first = (cols // CPG) * CPG
    shift = tl.load(x_ptr + n.to(tl.int64) * S * C + first, mask=cols < C, other=0.0).to(compute)
    if HAS_OFFSET:
        shift += _channel_offset(o_ptr, n, first, C, compute) - _channel_offset(o_ptr, n, cols, C, compute)
    s1 = tl.zeros([BLOCK_S, BLOCK_C], dtype=compute)
    s2 = tl.zeros([BLOCK_S, BLOCK_C], dtype=compute)
    for tile in range(part, TILES, PARTS):
        offsets, mask = _tile_at(n, tile, S, C, BLOCK_S, BLOCK_C)
        d = tl.where(mask, tl.load(x_ptr + offsets, mask=mask, other=0.0).to(compute) - shift[None, :], 0.0)
        s1 += d
        s2 += d * d
    _store_sums(sums_ptr, PLANE, pid, C, cols, s1, s2)


@triton.jit
def _group_sums(sums_ptr, n, group, PARTS, PLANE, C, CPG, compute: tl.constexpr, BLOCK_P: tl.constexpr,
                BLOCK_K: tl.constexpr, THIRD: tl.constexpr):
    """Sample n's two (PARTS, C) planes of partial sums added over the programs, for the channels of one group: two
    vectors of BLOCK_K lanes (the group's CPG channels, then zeros); with THIRD the third plane's too (zeros
    without)."""
    lanes = tl.arange(0, BLOCK_K)
    cols = group * CPG + lanes
    a = tl.zeros([BLOCK_P, BLOCK_K], dtype=compute)
    b = tl.zeros([BLOCK_P, BLOCK_K], dtype=compute)
    c = tl.zeros([BLOCK_P, BLOCK_K], dtype=compute)
    for first in range(0, PARTS, BLOCK_P):
        parts = first + tl.arange(0, BLOCK_P)
        mask = (parts[:, None] < PARTS) & (lanes[None, :] < CPG)
        offsets = (n * PARTS + parts[:, None]) * C + cols[None, :]
        a += tl.load(sums_ptr + offsets, mask=mask, other=0.0)
        b += tl.load(sums_ptr + PLANE + offsets, mask=mask, other=0.0)
        if THIRD:
            c += tl.load(sums_ptr + 2 * PLANE + offsets, mask=mask, other=0.0)
    return tl.sum(a, axis=0), tl.sum(b, axis=0), tl.sum(c, axis=0)


@triton.jit
def _forward_statistics(x_ptr, o_ptr, sums_ptr, mean_ptr, rstd_ptr, S, C, CPG, G, PARTS, PLANE, eps, eps_rest,
                        FP64: tl.constexpr, HAS_OFFSET: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr):
    """Mean and 1/sqrt(variance + eps) of one (sample, group) from the shifted sums: one program per (sample, group),
    the (N, G) statistics' element of the same index. eps arrives as two float32 values (_split_eps). With an
    offset, the statistics of x + o."""
    pid = tl.program_id(0)
    n = pid // G
    group = pid % G
    compute = tl.float64 if FP64 else tl.float32
    s1, s2, _ = _group_sums(sums_ptr, n, group, PARTS, PLANE, C, CPG, compute, BLOCK_P, BLOCK_K, False)
    count = (S * CPG).to(compute)
    shifted_mean = tl.sum(s1, axis=0) / count
    variance = tl.maximum(tl.sum(s2, axis=0) / count - shifted_mean * shifted_mean, 0.0)
    shift = tl.load(x_ptr + n.to(tl.int64) * S * C + group * CPG).to(compute)
    if HAS_OFFSET:
        shift += tl.load(o_ptr + n * C + group * CPG).to(compute)
    tl.store(mean_ptr + pid, shift + shifted_mean)
    # Left to right: each float32 part added to the compute-dtype variance (added to each other first, in float32, the
    # remainder would be lost).
    tl.store(rstd_ptr + pid, 1.0 / tl.sqrt(variance + eps + eps_rest))


@triton.jit
def _silu_through_cast(z, OUT_DTYPE: tl.constexpr):
    """SiLU of z rounded to the output dtype, as `F.silu(z.to(x.dtype))` computes it (in float32, or float64)."""
    zr = z.to(OUT_DTYPE).to(z.dtype)
    return zr, zr * tl.sigmoid(zr)


@triton.jit
def _forward_apply(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, o_ptr, S, C, CPG, G, TILES, FP64: tl.constexpr,
                   HAS_OFFSET: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """y = silu(cast(x * scale[n, c] + shift[n, c])), one tile per program."""
    pid = tl.program_id(0)
    n = pid // TILES
    compute = tl.float64 if FP64 else tl.float32
    cols = tl.arange(0, BLOCK_C)
    scale, shift, _, _ = _affine(w_ptr, b_ptr, mean_ptr, rstd_ptr, o_ptr, n, G, CPG, cols, C, compute, HAS_OFFSET)
    offsets, mask = _tile_at(n, pid % TILES, S, C, BLOCK_S, BLOCK_C)
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    _, y = _silu_through_cast(x.to(compute) * scale[None, :] + shift[None, :], x.dtype)
    tl.store(y_ptr + offsets, y.to(x.dtype), mask=mask)


@triton.jit
def _grad_at_norm(x, dy, scale, shift, compute: tl.constexpr):
    """dz: the gradient at the norm's (float32) output, through SiLU and the cast to the input's dtype, rounded to
    that dtype as autograd's cast backward leaves it."""
    z = x.to(compute) * scale[None, :] + shift[None, :]
    zr, _ = _silu_through_cast(z, x.dtype)
    s = tl.sigmoid(zr)
    dz = dy.to(compute) * (s * (1.0 + zr * (1.0 - s)))
    return dz.to(x.dtype).to(compute)


@triton.jit
def _backward_sums(x_ptr, dy_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, o_ptr, sums_ptr, S, C, CPG, G, TILES, PARTS,
                   PLANE, FP64: tl.constexpr, HAS_OFFSET: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """Per (sample, program, channel): sums of dz and dz * xhat over the program's tiles; with an offset, of xhat
    too (the offset's gradient is the sum of dx over the voxels, which those three sums give)."""
    pid = tl.program_id(0)
    n = pid // PARTS
    part = pid % PARTS
    compute = tl.float64 if FP64 else tl.float32
    cols = tl.arange(0, BLOCK_C)
    scale, shift, mean, rstd = _affine(w_ptr, b_ptr, mean_ptr, rstd_ptr, o_ptr, n, G, CPG, cols, C, compute,
                                       HAS_OFFSET)
    s1 = tl.zeros([BLOCK_S, BLOCK_C], dtype=compute)
    s2 = tl.zeros([BLOCK_S, BLOCK_C], dtype=compute)
    s3 = tl.zeros([BLOCK_S, BLOCK_C], dtype=compute)
    for tile in range(part, TILES, PARTS):
        offsets, mask = _tile_at(n, tile, S, C, BLOCK_S, BLOCK_C)
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0)
        dz = tl.where(mask, _grad_at_norm(x, dy, scale, shift, compute), 0.0)
        xhat = (x.to(compute) - mean[None, :]) * rstd[None, :]
        s1 += dz
        s2 += dz * xhat
        if HAS_OFFSET:
            s3 += tl.where(mask, xhat, 0.0)
    _store_sums(sums_ptr, PLANE, pid, C, cols, s1, s2)
    if HAS_OFFSET:
        tl.store(sums_ptr + 2 * PLANE + pid * C + cols, tl.sum(s3, axis=0), mask=cols < C)


@triton.jit
def _backward_coefficients(sums_ptr, w_ptr, rstd_ptr, mean_ptr, o_ptr, pqr_ptr, dw_ptr, db_ptr, do_ptr, N, S, C, CPG,
                           G, PARTS, PLANE, FP64: tl.constexpr, HAS_OFFSET: tl.constexpr, BLOCK_P: tl.constexpr,
                           BLOCK_K: tl.constexpr):
    """One program per group: for each sample, the coefficients of dx = p * dz + q * x + r on the group's channels
    (GroupNorm's input gradient with its two group means folded in); the weight and bias gradients of those channels
    (sums over the samples); with an offset, its gradient per (sample, channel), the sum of dx over the voxels."""
    group = tl.program_id(0)
    compute = tl.float64 if FP64 else tl.float32
    count = (S * CPG).to(compute)
    cols = group * CPG + tl.arange(0, BLOCK_K)
    valid = tl.arange(0, BLOCK_K) < CPG
    w = tl.load(w_ptr + cols, mask=valid, other=0.0).to(compute)
    zero = tl.zeros([BLOCK_K], dtype=compute)
    dw = tl.zeros([BLOCK_K], dtype=compute)
    db = tl.zeros([BLOCK_K], dtype=compute)
    for n in range(0, N):
        sdz, sdzx, sx = _group_sums(sums_ptr, n, group, PARTS, PLANE, C, CPG, compute, BLOCK_P, BLOCK_K, HAS_OFFSET)
        db += sdz
        dw += sdzx
        c1 = tl.sum(w * sdz, axis=0) / count   # the group's mean of weight * dz
        c2 = tl.sum(w * sdzx, axis=0) / count  # and of weight * dz * xhat
        mean = zero + tl.load(mean_ptr + n * G + group)
        rstd = tl.load(rstd_ptr + n * G + group)
        out = n * C + cols
        if HAS_OFFSET:
            mean = mean - tl.load(o_ptr + out, mask=valid, other=0.0).to(compute)
            # The sum over the voxels of dx = rstd * (w * dz - c1 - xhat * c2), sx the sum of xhat.
            tl.store(do_ptr + out, rstd * (w * sdz - S * c1 - c2 * sx), mask=valid)
        # dx = rstd * (w * dz - c1 - xhat * c2), xhat = (x - mean) * rstd
        tl.store(pqr_ptr + out, rstd * w, mask=valid)
        tl.store(pqr_ptr + N * C + out, zero - rstd * rstd * c2, mask=valid)
        tl.store(pqr_ptr + 2 * N * C + out, rstd * (mean * rstd * c2 - c1), mask=valid)
    tl.store(dw_ptr + cols, dw, mask=valid)
    tl.store(db_ptr + cols, db, mask=valid)


@triton.jit
def _backward_apply(x_ptr, dy_ptr, dx_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, o_ptr, pqr_ptr, N, S, C, CPG, G, TILES,
                    FP64: tl.constexpr, HAS_OFFSET: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """dx = p[n, c] * dz + q[n, c] * x + r[n, c], one tile per program."""
    pid = tl.program_id(0)
    n = pid // TILES
    compute = tl.float64 if FP64 else tl.float32
    cols = tl.arange(0, BLOCK_C)
    scale, shift, _, _ = _affine(w_ptr, b_ptr, mean_ptr, rstd_ptr, o_ptr, n, G, CPG, cols, C, compute, HAS_OFFSET)
    p = tl.load(pqr_ptr + n * C + cols, mask=cols < C, other=0.0)
    q = tl.load(pqr_ptr + N * C + n * C + cols, mask=cols < C, other=0.0)
    r = tl.load(pqr_ptr + 2 * N * C + n * C + cols, mask=cols < C, other=0.0)
    offsets, mask = _tile_at(n, pid % TILES, S, C, BLOCK_S, BLOCK_C)
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0)
    dz = _grad_at_norm(x, dy, scale, shift, compute)
    dx = p[None, :] * dz + q[None, :] * x.to(compute) + r[None, :]
    tl.store(dx_ptr + offsets, dx.to(x.dtype), mask=mask)


def _voxels(x: torch.Tensor) -> int:
    """S: the rows of the (N, S, C) array that a channels-last activation is in memory (from the shape: indexing the
    tensor would be two more operator calls on the host per norm)."""
    return math.prod(x.shape[2:])


def _shape_args(x: torch.Tensor, groups: int) -> tuple[int, int, int, int]:
    """(S, C, channels per group, groups), the kernels' shape arguments."""
    channels = x.shape[1]
    return _voxels(x), channels, channels // groups, groups


def _options(x: torch.Tensor, offset: torch.Tensor | None, warps: int, **options) -> dict:
    return dict(FP64=x.dtype == torch.float64, HAS_OFFSET=offset is not None, num_warps=warps, **options)


def _group_blocks(channels: int, groups: int, parts: int, tile_elements: int) -> dict:
    """Tile of the per-group passes: BLOCK_K lanes for a group's channels, BLOCK_P programs' sums at a time (a tile
    of at most `tile_elements`, the sums passes')."""
    block_k = triton.next_power_of_2(channels // groups)
    return dict(BLOCK_P=max(1, min(tile_elements // block_k, triton.next_power_of_2(parts))), BLOCK_K=block_k)


class _Passes(NamedTuple):
    """What both directions launch over one activation: the kernels' shape arguments (S, C, CPG, G), tiles and sums
    programs per sample of the sums passes, tiles per sample of the apply passes, the (planes, N, PARTS, C) buffer of
    partial sums and the size of one plane, the offset's pointer for the kernels (the input itself where there is
    none: HAS_OFFSET false, never read), and the launch options of the sums passes, the apply passes and the
    per-group pass."""

    shape: tuple[int, int, int, int]
    tiles: int
    parts: int
    apply_tiles: int
    sums: torch.Tensor
    plane: int
    offset: torch.Tensor
    tile: dict
    apply: dict
    per_group: dict


def _passes(x: torch.Tensor, groups: int, compute: torch.dtype, direction: str,
            offset: torch.Tensor | None = None) -> _Passes:
    """The passes of 'forward' or 'backward' over `x` (with `offset`, the (N, C) values added to it, or None), tiled
    as TILING says. The backward's sums with an offset have a third plane (the sums of xhat)."""
    tiling = TILING
    elements, warps = tiling.sums(direction)
    batch = x.shape[0]
    shape = _shape_args(x, groups)
    block_c, block_s, tiles, parts = _plan(batch, shape[1], shape[0], elements, tiling.programs)
    apply_rows = _rows(tiling.apply_elements, block_c, shape[0])
    planes = 3 if direction == "backward" and offset is not None else 2
    sums = torch.empty((planes, batch, parts, shape[1]), device=x.device, dtype=compute)
    return _Passes(shape, tiles, parts, triton.cdiv(shape[0], apply_rows), sums, batch * parts * shape[1],
                   x if offset is None else offset,
                   _options(x, offset, warps, BLOCK_S=block_s, BLOCK_C=block_c),
                   _options(x, offset, tiling.apply_warps, BLOCK_S=apply_rows, BLOCK_C=block_c),
                   _options(x, offset, 4, **_group_blocks(shape[1], groups, parts, elements)))


def _split_eps(eps: float) -> tuple[float, float]:
    """eps as float32 and the float32 of what that leaves: Triton passes a Python float to a kernel as float32, and
    1e-5 arrived 2.5e-13 off, which moved rstd by 1.4e-11 at a group variance of 0.01 in float64 on an H200 (the
    interpreter keeps Python's double). Their sum in float64 is eps to about 1e-20; in float32 it is float32(eps)."""
    high = float(torch.tensor(eps, dtype=torch.float32))
    return high, eps - high


def _offset_in(offset: torch.Tensor | None, compute: torch.dtype) -> torch.Tensor | None:
    """The (N, C) offset as the kernels read it: dense, in the compute dtype."""
    return None if offset is None else offset.to(compute).contiguous()


@custom_op("medddpm::group_norm_silu_ndhwc_forward", mutates_args=())
def _forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int, eps: float,
             offset: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd), the statistics per (sample, group) in the compute dtype (of x + offset, with one)."""
    # The kernels read raw NDHWC memory (a no-op for a channels-last input).
    x = x.contiguous(memory_format=torch.channels_last_3d)
    batch = x.shape[0]
    compute = torch.promote_types(x.dtype, torch.float32)
    run = _passes(x, groups, compute, "forward", _offset_in(offset, compute))
    mean = torch.empty((batch, groups), device=x.device, dtype=compute)
    rstd = torch.empty_like(mean)
    y = torch.empty_like(x, memory_format=torch.channels_last_3d)
    _forward_sums[(batch * run.parts,)](x, run.offset, run.sums, *run.shape[:3], run.tiles, run.parts, run.plane,
                                        **run.tile)
    _forward_statistics[(batch * groups,)](x, run.offset, run.sums, mean, rstd, *run.shape, run.parts, run.plane,
                                           *_split_eps(eps), **run.per_group)
    _forward_apply[(batch * run.apply_tiles,)](x, y, weight, bias, mean, rstd, run.offset, *run.shape,
                                               run.apply_tiles, **run.apply)
    return y, mean, rstd


@_forward.register_fake
def _forward_shapes(x, weight, bias, groups, eps, offset=None):
    """What the op returns, for tracing (torch.compile): y channels-last as x, the statistics per (sample, group)."""
    compute = torch.promote_types(x.dtype, torch.float32)
    statistics = x.new_empty((x.shape[0], groups), dtype=compute)
    return torch.empty_like(x, memory_format=torch.channels_last_3d), statistics, torch.empty_like(statistics)


@custom_op("medddpm::group_norm_silu_ndhwc_backward", mutates_args=())
def _backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, mean: torch.Tensor,
              rstd: torch.Tensor, offset: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias, doffset): doffset (N, C) in the compute dtype, empty without an offset."""
    x = x.contiguous(memory_format=torch.channels_last_3d)
    dy = dy.contiguous(memory_format=torch.channels_last_3d)
    batch, groups = mean.shape
    channels = x.shape[1]
    run = _passes(x, groups, mean.dtype, "backward", _offset_in(offset, mean.dtype))
    pqr = torch.empty((3, batch, channels), device=x.device, dtype=mean.dtype)
    dweight = torch.empty(channels, device=x.device, dtype=mean.dtype)
    dbias = torch.empty_like(dweight)
    doffset = torch.empty((batch, channels) if offset is not None else (0,), device=x.device, dtype=mean.dtype)
    dx = torch.empty_like(x, memory_format=torch.channels_last_3d)
    _backward_sums[(batch * run.parts,)](x, dy, weight, bias, mean, rstd, run.offset, run.sums, *run.shape, run.tiles,
                                         run.parts, run.plane, **run.tile)
    _backward_coefficients[(groups,)](run.sums, weight, rstd, mean, run.offset, pqr, dweight, dbias, doffset, batch,
                                      *run.shape, run.parts, run.plane, **run.per_group)
    _backward_apply[(batch * run.apply_tiles,)](x, dy, dx, weight, bias, mean, rstd, run.offset, pqr, batch,
                                                *run.shape, run.apply_tiles, **run.apply)
    return dx, dweight.to(weight.dtype), dbias.to(bias.dtype), doffset


@_backward.register_fake
def _backward_shapes(dy, x, weight, bias, mean, rstd, offset=None):
    doffset = mean.new_empty((x.shape[0], x.shape[1]) if offset is not None else (0,))
    return (torch.empty_like(x, memory_format=torch.channels_last_3d), torch.empty_like(weight),
            torch.empty_like(bias), doffset)


def _setup_context(ctx, inputs, output) -> None:
    x, weight, bias, _, _, offset = inputs
    _, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)
    ctx.save_for_backward(x, weight, bias, mean, rstd, offset)


def _autograd_backward(ctx, dy, _dmean, _drstd):
    x, weight, bias, mean, rstd, offset = ctx.saved_tensors
    dx, dweight, dbias, doffset = _backward(dy, x, weight, bias, mean, rstd, offset)
    return dx, dweight, dbias, None, None, None if offset is None else doffset.to(offset.dtype)


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


def runs_kernels(x: torch.Tensor) -> bool:
    """Whether `x` goes through the Triton kernels: a channels-last 5D activation on CUDA (or any device under
    Triton's interpreter) in float32, bfloat16, float16 or float64."""
    return ((x.is_cuda or INTERPRETED) and x.ndim == 5 and x.is_contiguous(memory_format=torch.channels_last_3d)
            and x.dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64))


def group_norm_silu_ndhwc(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int,
                          eps: float, offset: torch.Tensor | None = None) -> torch.Tensor:
    """`unet.group_norm_silu` through the Triton kernels where `x` is a channels-last activation they take
    (`runs_kernels`), else through the plain function."""
    if not runs_kernels(x):
        return group_norm_silu(x, weight, bias, groups, eps, offset)
    return _forward(x, weight, bias, groups, eps, offset)[0]
