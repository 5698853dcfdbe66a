"""GroupNorm32 + SiLU for channels-last (NDHWC) activations: Triton kernels, forward and backward, as a custom op.

The function is `unet.group_norm_silu` (upstream's GroupNorm32 followed by SiLU): statistics and affine transform in
(at least) float32, the result cast back to the input's dtype before SiLU. What differs is only how it reaches the
memory. A channels-last 3D activation of shape (N, C, D, H, W) is an (N, S, C) array with S = D*H*W and the channels
of a group next to each other, the layout of NVIDIA's NHWC GroupNorm for 2D diffusion training
(apex.contrib.group_norm) with H*W = D*H*W. Each direction reads the activation twice, in tiles of whole rows
(BLOCK_S voxels x all C channels, one contiguous stretch of memory):

forward   1. per tile and channel: count, mean and sum of squared deviations;
             combined per (sample, group) with Chan's parallel formula (stable where the mean is large against the
             spread, as Welford's in ATen's GroupNorm);
          2. per tile: y = silu(cast(x * a[c] + b[c])), a = rstd * weight, b = bias - mean * a.
backward  1. per tile and channel: sums of dz and dz * xhat (dz = the gradient at the norm's output, through SiLU
             and the cast), giving the weight and bias gradients and the two group means the input gradient needs;
          2. per tile: dx = rstd * (weight * dz - mean(weight * dz) - xhat * mean(weight * dz * xhat)).

The small combinations between the passes ((N, tiles, C) partial sums) are torch operations. Forward and backward
are custom ops (`torch.library.custom_op`, with their shapes for tracing and the autograd formula): torch.compile
keeps each as one node of its graph, with a channels-last output, and fuses the rest of the graph around them, so
the compiled step never converts the activation to NCDHW. (`torch.library.triton_op` would let inductor see inside,
but its tracing launches the kernels under Triton's interpreter, which the tests on a CPU use.)

Inputs other than a CUDA (or, under TRITON_INTERPRET=1, CPU) tensor in channels_last_3d are for `group_norm_silu`:
`group_norm_silu_ndhwc` sends them there, so the module is a drop-in kernel for `unet.GroupNormSiLU`.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch.library import custom_op

from .unet import group_norm_silu

# Elements per tile (BLOCK_S rows of all channels) and warps per program: 16 elements per thread, so that a float32
# tile and its temporaries stay in registers (the widest activation of Med-DDPM, 512 channels, gets 8 rows). A first
# choice, not yet tuned on a GPU.
TILE_ELEMENTS = 4096
NUM_WARPS = 8
# Triton decides at import (when the kernels are decorated) whether they run on the GPU or in its interpreter, which
# runs them on CPU tensors (the tests on a machine without a GPU).
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _tiles(channels: int, voxels: int) -> tuple[int, int, int]:
    """(BLOCK_C, BLOCK_S, number of tiles per sample) for an activation of `channels` and `voxels`."""
    block_c = triton.next_power_of_2(channels)
    block_s = max(1, min(TILE_ELEMENTS // block_c, triton.next_power_of_2(voxels)))
    return block_c, block_s, triton.cdiv(voxels, block_s)


@triton.jit
def _tile(S, C, TILES, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """This program's tile: rows tile*BLOCK_S.. of sample n, all channels. (n, tile, offsets, mask, cols)."""
    pid = tl.program_id(0)
    n = pid // TILES
    tile = pid % TILES
    rows = tile * BLOCK_S + tl.arange(0, BLOCK_S)
    cols = tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < S) & (cols[None, :] < C)
    # In 64 bits: a batch of 128^3 activations passes 2^31 elements (8 samples of 128 channels, as in the sampling
    # throughput sweep).
    offsets = n.to(tl.int64) * S * C + rows[:, None].to(tl.int64) * C + cols[None, :]
    return n, tile, offsets, mask, cols


@triton.jit
def _per_channel_of(ptr, n, C, cols):
    """Sample n's row of an (N, C) array of per-channel values."""
    return tl.load(ptr + n * C + cols, mask=cols < C, other=0.0)


@triton.jit
def _forward_stats(x_ptr, mean_ptr, m2_ptr, S, C, TILES, FP64: tl.constexpr,
                   BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """Per (sample, tile, channel): the mean and the sum of squared deviations of the tile's rows."""
    n, tile, offsets, mask, cols = _tile(S, C, TILES, BLOCK_S, BLOCK_C)
    compute = tl.float64 if FP64 else tl.float32
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(compute)
    count = tl.minimum(S - tile * BLOCK_S, BLOCK_S).to(compute)
    mean = tl.sum(x, axis=0) / count
    deviation = tl.where(mask, x - mean[None, :], 0.0)
    m2 = tl.sum(deviation * deviation, axis=0)
    out = (n * TILES + tile) * C + cols
    tl.store(mean_ptr + out, mean, mask=cols < C)
    tl.store(m2_ptr + out, m2, mask=cols < C)


@triton.jit
def _silu_through_cast(z, OUT_DTYPE: tl.constexpr):
    """SiLU of z rounded to the output dtype, as `F.silu(z.to(x.dtype))` computes it (in float32, or float64)."""
    zr = z.to(OUT_DTYPE).to(z.dtype)
    return zr, zr * tl.sigmoid(zr)


@triton.jit
def _forward_apply(x_ptr, y_ptr, scale_ptr, shift_ptr, S, C, TILES, FP64: tl.constexpr,
                   BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """y = silu(cast(x * scale[n, c] + shift[n, c]))."""
    n, _, offsets, mask, cols = _tile(S, C, TILES, BLOCK_S, BLOCK_C)
    compute = tl.float64 if FP64 else tl.float32
    scale = _per_channel_of(scale_ptr, n, C, cols)
    shift = _per_channel_of(shift_ptr, n, C, cols)
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    z = x.to(compute) * scale[None, :] + shift[None, :]
    _, y = _silu_through_cast(z, x.dtype)
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
def _backward_sums(x_ptr, dy_ptr, scale_ptr, shift_ptr, mean_ptr, rstd_ptr, sdz_ptr, sdzx_ptr, S, C, TILES,
                   FP64: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """Per (sample, tile, channel): sums of dz and of dz * xhat."""
    n, tile, offsets, mask, cols = _tile(S, C, TILES, BLOCK_S, BLOCK_C)
    compute = tl.float64 if FP64 else tl.float32
    scale = _per_channel_of(scale_ptr, n, C, cols)
    shift = _per_channel_of(shift_ptr, n, C, cols)
    mean = _per_channel_of(mean_ptr, n, C, cols)
    rstd = _per_channel_of(rstd_ptr, n, C, cols)
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0)
    dz = tl.where(mask, _grad_at_norm(x, dy, scale, shift, compute), 0.0)
    xhat = (x.to(compute) - mean[None, :]) * rstd[None, :]
    out = (n * TILES + tile) * C + cols
    tl.store(sdz_ptr + out, tl.sum(dz, axis=0), mask=cols < C)
    tl.store(sdzx_ptr + out, tl.sum(dz * xhat, axis=0), mask=cols < C)


@triton.jit
def _backward_apply(x_ptr, dy_ptr, dx_ptr, scale_ptr, shift_ptr, p_ptr, q_ptr, r_ptr, S, C, TILES,
                    FP64: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """dx = p[n, c] * dz + q[n, c] * x + r[n, c] (the input gradient of GroupNorm, its group means folded in)."""
    n, _, offsets, mask, cols = _tile(S, C, TILES, BLOCK_S, BLOCK_C)
    compute = tl.float64 if FP64 else tl.float32
    scale = _per_channel_of(scale_ptr, n, C, cols)
    shift = _per_channel_of(shift_ptr, n, C, cols)
    p = _per_channel_of(p_ptr, n, C, cols)
    q = _per_channel_of(q_ptr, n, C, cols)
    r = _per_channel_of(r_ptr, n, C, cols)
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + offsets, mask=mask, other=0.0)
    dz = _grad_at_norm(x, dy, scale, shift, compute)
    dx = p[None, :] * dz + q[None, :] * x.to(compute) + r[None, :]
    tl.store(dx_ptr + offsets, dx.to(x.dtype), mask=mask)


def _voxels(x: torch.Tensor) -> int:
    """S: the rows of the (N, S, C) array that a channels-last activation is in memory."""
    return x[0, 0].numel()


def _per_channel(per_group: torch.Tensor, channels: int) -> torch.Tensor:
    """(N, G) -> (N, C): each group's value for each of its channels."""
    return per_group.repeat_interleave(channels // per_group.shape[1], dim=1)


def _launch(kernel, x: torch.Tensor, tiles: tuple[int, int, int], *args) -> None:
    """One program per (sample, tile) of `x`; `args` are the kernel's pointers, then S, C, TILES and the tile shape."""
    block_c, block_s, count = tiles
    batch, channels = x.shape[:2]
    kernel[(batch * count,)](*args, _voxels(x), channels, count, FP64=x.dtype == torch.float64,
                             BLOCK_S=block_s, BLOCK_C=block_c, num_warps=NUM_WARPS)


@custom_op("medddpm::group_norm_silu_ndhwc_forward", mutates_args=())
def _forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int,
             eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd), the statistics per (sample, group) in the compute dtype."""
    # The kernels read raw NDHWC memory (a no-op for a channels-last input).
    x = x.contiguous(memory_format=torch.channels_last_3d)
    batch, channels = x.shape[:2]
    voxels = _voxels(x)
    compute = torch.promote_types(x.dtype, torch.float32)
    tiles = _tiles(channels, voxels)
    block_s, count = tiles[1], tiles[2]
    tile_mean = torch.empty((batch, count, channels), device=x.device, dtype=compute)
    tile_m2 = torch.empty_like(tile_mean)
    _launch(_forward_stats, x, tiles, x, tile_mean, tile_m2)
    # Chan's combination over the tiles and the channels of each group (count per tile: block_s, the last fewer).
    per_tile = (voxels - block_s * torch.arange(count, device=x.device, dtype=compute)).clamp(max=block_s)
    weights = per_tile[None, :, None, None]
    grouped_mean = tile_mean.unflatten(2, (groups, channels // groups))
    total = voxels * (channels // groups)
    mean = (grouped_mean * weights).sum(dim=(1, 3)) / total
    m2 = tile_m2.unflatten(2, (groups, channels // groups)).sum(dim=(1, 3)) + (
        weights * (grouped_mean - mean[:, None, :, None]) ** 2).sum(dim=(1, 3))
    rstd = torch.rsqrt(m2 / total + eps)
    scale = _per_channel(rstd, channels) * weight.to(compute)
    shift = bias.to(compute) - _per_channel(mean, channels) * scale
    y = torch.empty_like(x, memory_format=torch.channels_last_3d)
    _launch(_forward_apply, x, tiles, x, y, scale, shift)
    return y, mean, rstd


@_forward.register_fake
def _forward_shapes(x, weight, bias, groups, eps):
    """What the op returns, for tracing (torch.compile): y channels-last as x, the statistics per (sample, group)."""
    compute = torch.promote_types(x.dtype, torch.float32)
    statistics = x.new_empty((x.shape[0], groups), dtype=compute)
    return torch.empty_like(x, memory_format=torch.channels_last_3d), statistics, torch.empty_like(statistics)


@custom_op("medddpm::group_norm_silu_ndhwc_backward", mutates_args=())
def _backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, mean: torch.Tensor,
              rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias)."""
    batch, channels = x.shape[:2]
    groups = mean.shape[1]
    voxels = _voxels(x)
    compute = mean.dtype
    tiles = _tiles(channels, voxels)
    x = x.contiguous(memory_format=torch.channels_last_3d)
    dy = dy.contiguous(memory_format=torch.channels_last_3d)
    mean_c, rstd_c = _per_channel(mean, channels), _per_channel(rstd, channels)
    w = weight.to(compute)
    scale = rstd_c * w
    shift = bias.to(compute) - mean_c * scale
    sums = torch.empty((2, batch, tiles[2], channels), device=x.device, dtype=compute)
    _launch(_backward_sums, x, tiles, x, dy, scale, shift, mean_c, rstd_c, sums[0], sums[1])
    sdz, sdzx = sums.sum(dim=2)                                         # (N, C) each
    total = voxels * (channels // groups)
    c1 = (w * sdz).unflatten(1, (groups, -1)).sum(dim=2) / total        # mean of weight * dz per group
    c2 = (w * sdzx).unflatten(1, (groups, -1)).sum(dim=2) / total       # mean of weight * dz * xhat per group
    c1, c2 = _per_channel(c1, channels), _per_channel(c2, channels)
    # dx = rstd * (w * dz - c1 - xhat * c2), xhat = (x - mean) * rstd
    p = rstd_c * w
    q = -rstd_c * rstd_c * c2
    r = rstd_c * (mean_c * rstd_c * c2 - c1)
    dx = torch.empty_like(x, memory_format=torch.channels_last_3d)
    _launch(_backward_apply, x, tiles, x, dy, dx, scale, shift, p, q, r)
    return dx, sdzx.sum(dim=0).to(weight.dtype), sdz.sum(dim=0).to(bias.dtype)


@_backward.register_fake
def _backward_shapes(dy, x, weight, bias, mean, rstd):
    return torch.empty_like(x, memory_format=torch.channels_last_3d), torch.empty_like(weight), torch.empty_like(bias)


def _setup_context(ctx, inputs, output) -> None:
    x, weight, bias, _, _ = inputs
    _, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)
    ctx.save_for_backward(x, weight, bias, mean, rstd)


def _autograd_backward(ctx, dy, _dmean, _drstd):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dweight, dbias = _backward(dy, x, weight, bias, mean, rstd)
    return dx, dweight, dbias, None, None


_forward.register_autograd(_autograd_backward, setup_context=_setup_context)


def runs_kernels(x: torch.Tensor) -> bool:
    """Whether `x` goes through the Triton kernels: a channels-last 5D activation on CUDA (or any device under
    Triton's interpreter) in float32, bfloat16, float16 or float64."""
    return ((x.is_cuda or INTERPRETED) and x.ndim == 5 and x.is_contiguous(memory_format=torch.channels_last_3d)
            and x.dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64))


def group_norm_silu_ndhwc(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int,
                          eps: float) -> torch.Tensor:
    """`unet.group_norm_silu` through the Triton kernels where `x` is a channels-last activation they take
    (`runs_kernels`), else through the plain function."""
    if not runs_kernels(x):
        return group_norm_silu(x, weight, bias, groups, eps)
    return _forward(x, weight, bias, groups, eps)[0]
