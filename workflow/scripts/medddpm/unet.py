"""The 3D U-Net of Med-DDPM (a guided-diffusion U-Net in three dimensions), faithful to the upstream code.

Every upstream quirk that changes which kernels run is kept on purpose, because this network is the subject of a
performance study: GroupNorm computed in float32, attention recomputed in backward (upstream hard-wires
checkpointing for attention blocks only), 1x1 Conv1d projections with einsum attention, additive time embedding,
zero-initialised output convolutions, trilinear upsampling followed by a 3x3x3 convolution.

Execution strategies can be switched after construction without touching the parameters (so a checkpoint of one
variant loads into every other): which blocks recompute their forward in backward (`set_checkpointing`), GroupNorm +
SiLU as one layout-preserving function (`fuse_norm_act`), channels-last kept where upstream's formulation drops it
(`keep_channels_last`), the first, stride-2 and output convolutions in NDHWC (`set_ndhwc_edges`), the first and output
convolutions as matrix products (`set_edge_gemms`), dense NDHWC gradients for the decoder's concatenated parts
(`set_dense_skip_gradients`), and each ResBlock's time embedding added inside its second norm
(`set_time_embedding_in_norm`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .conv_gemm import conv3x3_im2col, conv3x3_shifted_sum


@dataclass(frozen=True)
class UNetConfig:
    """Shape of the network: the config's `model` section (config/paper.yaml's is the whole-head network of
    40,226,433 parameters)."""

    in_channels: int
    out_channels: int
    base_width: int
    channel_mult: tuple[int, ...]
    num_res_blocks: int
    # Downsample rates (ds) that carry attention. Upstream passes attention_resolutions="16" and converts it to
    # ds = image_size // 16, which is 8 at 128^3: attention at the 16^3 level.
    attention_downsample_rates: tuple[int, ...]
    num_heads: int
    dropout: float
    groups: int = 32  # GroupNorm groups of every norm layer (upstream's GroupNorm32), not a config key


class GroupNorm32(nn.GroupNorm):
    """GroupNorm that computes in (at least) float32 and casts back, as upstream does.

    Upstream calls `x.float()`; promoting instead is the same for float32 and half inputs and keeps float64 in
    float64 for the reference of the quality check.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.to(torch.promote_types(x.dtype, torch.float32))).type(x.dtype)


def zero_module(module: nn.Module) -> nn.Module:
    for parameter in module.parameters():
        parameter.detach().zero_()
    return module


def timestep_embedding(timesteps: torch.Tensor, dim: int, max_period: int = 1000) -> torch.Tensor:
    """Sinusoidal embedding in [cos, sin] order (guided-diffusion convention)."""
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=timesteps.device) / half
    )
    args = timesteps[:, None].float() * freqs[None]
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


class ResBlock(nn.Module):
    """GroupNorm-SiLU-conv, plus the time embedding ADDED (no scale-shift), GroupNorm-SiLU-dropout-zero conv."""

    def __init__(self, channels: int, emb_channels: int, out_channels: int, dropout: float, groups: int):
        super().__init__()
        self.in_layers = nn.Sequential(
            GroupNorm32(groups, channels), nn.SiLU(), nn.Conv3d(channels, out_channels, 3, padding=1)
        )
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_channels, out_channels))
        self.out_layers = nn.Sequential(
            GroupNorm32(groups, out_channels),
            nn.SiLU(),
            nn.Dropout(p=dropout),
            zero_module(nn.Conv3d(out_channels, out_channels, 3, padding=1)),
        )
        self.skip_connection = (
            nn.Identity() if out_channels == channels else nn.Conv3d(channels, out_channels, 1)
        )
        # Upstream never recomputes ResBlocks; the memory variant (checkpointing "all") does.
        self.use_checkpoint = False
        # The time embedding and the first convolution's bias handed to the second norm (`set_time_embedding_in_norm`).
        self.time_embedding_in_norm = False

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        if self.use_checkpoint and torch.is_grad_enabled():
            return checkpoint(self._forward, x, emb, use_reentrant=False)
        return self._forward(x, emb)

    def _forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        if self.time_embedding_in_norm:
            return self._forward_embedding_in_norm(x, emb)
        h = self.in_layers(x)
        emb_out = self.emb_layers(emb).type(h.dtype)
        h = h + emb_out[:, :, None, None, None]
        h = self.out_layers(h)
        return self.skip_connection(x) + h

    def _forward_embedding_in_norm(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """`_forward` with the first convolution's bias and the time embedding added inside the second norm (its
        offset) instead of to the convolution's output: the same function. Compiled, the add was one more pass over
        the activation, between the convolution and the NDHWC norm kernels, which inductor cannot fuse into."""
        *norm_act, conv = self.in_layers
        h = x
        for layer in norm_act:
            h = layer(h)
        h = conv._conv_forward(h, conv.weight, None)
        # Upstream adds the embedding in the activation's dtype; the bias, a float32 parameter, promotes the sum.
        offset = self.emb_layers(emb).type(h.dtype) + conv.bias
        norm, *rest = self.out_layers
        h = norm(h, offset)
        for layer in rest:
            h = layer(h)
        return self.skip_connection(x) + h


class QKVAttentionLegacy(nn.Module):
    """Upstream's legacy QKV order: heads split before q/k/v; q and k each scaled by ch^-1/4; einsum attention."""

    def __init__(self, num_heads: int):
        super().__init__()
        self.num_heads = num_heads

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        batch, width, length = qkv.shape
        ch = width // (3 * self.num_heads)
        q, k, v = qkv.reshape(batch * self.num_heads, ch * 3, length).split(ch, dim=1)
        scale = 1 / math.sqrt(math.sqrt(ch))
        weight = torch.einsum("bct,bcs->bts", q * scale, k * scale)
        weight = torch.softmax(weight.float(), dim=-1).type(weight.dtype)
        attended = torch.einsum("bts,bcs->bct", weight, v)
        return attended.reshape(batch, -1, length)


class AttentionBlock(nn.Module):
    """Self-attention over all voxels of a level, with 1x1 Conv1d projections and a zero-initialised output."""

    def __init__(self, channels: int, num_heads: int, groups: int, use_checkpoint: bool = True):
        super().__init__()
        self.norm = GroupNorm32(groups, channels)
        self.qkv = nn.Conv1d(channels, channels * 3, 1)
        self.attention = QKVAttentionLegacy(num_heads)
        self.proj_out = zero_module(nn.Conv1d(channels, channels, 1))
        self.use_checkpoint = use_checkpoint
        # Set by keep_channels_last: the residual sum in the input's 5-D layout (see _forward).
        self.keep_layout = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Non-reentrant checkpointing: torch.compile traces it without a graph break, and the recomputation runs
        # under the autocast state of the forward (upstream's own checkpoint Function recomputes outside autocast
        # and fails in bf16).
        if self.use_checkpoint and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, *spatial = x.shape
        flat = x.reshape(batch, channels, -1)
        h = self.proj_out(self.attention(self.qkv(self.norm(flat))))
        if self.keep_layout:
            # The same sum, taken in 5-D: its result has the input's strides. Upstream's sum in 3-D gives a batch of
            # one an odd batch stride, and torch.cat then no longer sees channels-last in it (the decoder's
            # concatenations turn contiguous).
            return x + h.reshape(batch, channels, *spatial)
        return (flat + h).reshape(batch, channels, *spatial)


def channels_last_3d_strides(shape: torch.Size | tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a dense (N, C, D, H, W) tensor laid out NDHWC."""
    _, c, d, h, w = shape
    return (c * d * h * w, 1, c * h * w, c * w, c)


class _NdhwcOperand(torch.autograd.Function):
    """The identity, whose result inductor must lay out NDHWC (its `inductor_force_stride_order` prim: no copy where
    the producer's layout is still free, one copy where it is fixed). The gradient passes through as it is.
    `x.contiguous(memory_format=channels_last_3d)` cannot do this under torch.compile: inductor's clone lowering drops
    the memory format."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return torch.ops.prims.inductor_force_stride_order(x, channels_last_3d_strides(x.shape))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad


class DenseNdhwcGradient(torch.autograd.Function):
    """The identity, whose gradient is handed on as a dense NDHWC tensor.

    Why: the gradient of a channel concatenation reaches each part as a slice of the concatenation's gradient. In
    NDHWC a channel slice is not dense (its voxels are the full concatenation's channels apart), and such a gradient
    is copied before the convolution (or a 1x1 convolution's matrix product) that takes it. On an H100, 44 copies sit
    right before a gradient convolution or matrix product in an optimizer step of frontier_edges (two samples),
    2.7 ms in all (data/measurements/2026-12-05-gradient-layouts/). The copy asked for here is one inductor fuses into
    the kernel that computes the gradient (the gradient convolution's fallback keeps the strides its traced inputs
    had). `prims.inductor_force_stride_order` would not do: it checks the stride order, which a slice already has."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad.contiguous(memory_format=torch.channels_last_3d)


class NdhwcInputConv3d(nn.Conv3d):
    """Upstream's nn.Conv3d (the same parameters and state_dict keys) whose input can be pinned to NDHWC
    (`ndhwc_input`, set by `set_ndhwc_edges`).

    Why: inductor lays a 3-D convolution's input and weight out in the stride order of the output that the two
    operands' current layouts give (kernel.conv.convolution), and a buffer it has not laid out yet, such as a residual
    sum or the weight's bfloat16 cast, counts as NCDHW there. So the convolutions whose input is the U-Net's own
    input (NCDHW from denoise's concatenation) or a ResBlock's residual sum (the stride-2 Downsample convolutions)
    ran on NCDHW operands in a compiled sampling evaluation, and cuDNN transposed to NHWC and back around each of
    them: five convolutions and 15 kernels, 0.73 ms of an evaluation on an H100. Pinned, every convolution reads
    NDHWC and an evaluation is 0.53 ms faster there (data/measurements/2026-12-05-conv-layouts/)."""

    ndhwc_input = False
    # The U-Net's first convolution as im2col and one matrix product (`set_edge_gemms`); its input needs no layout.
    as_gemm = False
    # Its columns recomputed in backward instead of saved for the weight's gradient (`set_edge_columns_recomputed`).
    recompute_columns = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ndhwc_input or self.as_gemm:
            # autocast's own cast of the input would be a buffer laid out later, NCDHW again: cast first (autocast then
            # passes the input through), pin the cast. The gathered columns are cast once, not each tap.
            if torch.is_autocast_enabled(x.device.type):
                x = x.to(torch.get_autocast_dtype(x.device.type))
        if self.as_gemm:
            if self.recompute_columns and torch.is_grad_enabled():
                # Inductor recomputes a checkpointed region in backward: the saved tensors are the 3-channel input
                # and the parameters, not the 27 C columns (and their zero padding) the weight's gradient reads.
                return checkpoint(conv3x3_im2col, x, self.weight, self.bias, use_reentrant=False,
                                  preserve_rng_state=False)  # no random numbers in the region
            return conv3x3_im2col(x, self.weight, self.bias)
        if self.ndhwc_input:
            # Eager has no layout to pin: the prim's eager form would copy at every call, contiguous() only where
            # the strides differ.
            compiling = torch.compiler.is_compiling()
            x = _NdhwcOperand.apply(x) if compiling else x.contiguous(memory_format=torch.channels_last_3d)
        return super().forward(x)


class Downsample(nn.Module):
    """3x3x3 convolution with stride 2 in all three dimensions."""

    def __init__(self, channels: int):
        super().__init__()
        self.op = NdhwcInputConv3d(channels, channels, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x)


def _upsample_axis_x2(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Linear x2 upsampling along one axis with half-pixel centres (align_corners false): out[2i] = 0.25 x[i-1] +
    0.75 x[i], out[2i+1] = 0.75 x[i] + 0.25 x[i+1], the neighbour index clamped at both edges."""
    n = x.shape[dim]
    before = torch.cat([x.narrow(dim, 0, 1), x.narrow(dim, 0, n - 1)], dim)
    after = torch.cat([x.narrow(dim, 1, n - 1), x.narrow(dim, n - 1, 1)], dim)
    even = 0.25 * before + 0.75 * x
    odd = 0.75 * x + 0.25 * after
    return torch.stack([even, odd], dim + 1).flatten(dim, dim + 1)


def upsample_trilinear_x2(x: torch.Tensor, in_memory_order: bool = False) -> torch.Tensor:
    """`F.interpolate(x, scale_factor=2, mode="trilinear")` as three separable shifted sums over a (N, C, D, H, W)
    tensor. Its backward is slicing and addition, where F.interpolate's is a scatter with atomics: the same function
    (tests compare both in float64, forward and backward) with a deterministic gradient on CUDA.

    The sums over the logical axes return a contiguous (NCDHW) tensor whatever the input's layout. With
    `in_memory_order`, a channels-last input is interpolated along the axes of its memory, (N, D, H, W, C): the same
    arithmetic for every element, and a channels-last result (no layout copy before the next convolution)."""
    if in_memory_order and x.is_contiguous(memory_format=torch.channels_last_3d) and not x.is_contiguous():
        rows = x.permute(0, 2, 3, 4, 1)
        for dim in (1, 2, 3):
            rows = _upsample_axis_x2(rows, dim)
        return rows.permute(0, 4, 1, 2, 3)
    for dim in (2, 3, 4):
        x = _upsample_axis_x2(x, dim)
    return x


class Upsample(nn.Module):
    """Trilinear x2 interpolation followed by a 3x3x3 convolution. `gather` (variants.prepare_model sets it for the
    `gather_upsampling` switch) computes the interpolation as `upsample_trilinear_x2`, in the activation's memory
    order where `in_memory_order` is set (keep_channels_last); the parameters are the same."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv3d(channels, channels, 3, padding=1)
        self.gather = False
        self.in_memory_order = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gather:
            x = upsample_trilinear_x2(x, self.in_memory_order)
        else:
            x = F.interpolate(x, scale_factor=2, mode="trilinear")
        return self.conv(x)


def set_gather_upsampling(model: nn.Module, enabled: bool) -> None:
    """Switch every Upsample of `model` between F.interpolate and `upsample_trilinear_x2`."""
    for module in model.modules():
        if isinstance(module, Upsample):
            module.gather = enabled


def keep_channels_last(model: nn.Module, enabled: bool) -> None:
    """Where upstream's formulation turns a channels-last activation contiguous, compute the same in its own layout
    (the `ndhwc` switch): the gather upsampling in memory order, the attention's residual sum in 5-D. Off, the model
    is upstream's to the stride (the paper's channels-last variants measure upstream's code)."""
    for module in model.modules():
        if isinstance(module, Upsample):
            module.in_memory_order = enabled
        elif isinstance(module, AttentionBlock):
            module.keep_layout = enabled


# The filter count `set_ndhwc_edges` pads the output convolution to: cuDNN's NHWC tensor-core kernels take 16-bit
# channels in multiples of 8, and 8 channels give channels-last strides no other layout shares (below).
OUTPUT_CHANNEL_MULTIPLE = 8


class OutputConv3d(nn.Conv3d):
    """The U-Net's last convolution: upstream's nn.Conv3d, the same parameters and state_dict keys.

    With `padded_to` (set by `set_ndhwc_edges`), a filter count that is not a multiple of it is padded with zero
    filters at each call and the output sliced back to the real ones: output channel k is the same dot product, and
    the zero filters' gradients are dropped by the padding's backward, so the function and its gradients are the same.
    Why: a channels-last output of one channel has the strides of two layouts at once (C and W both of stride 1).
    Inductor lays out a 3-D convolution's input and weight in its output's stride order (kernel.conv.convolution), and
    that tie orders W before C, so the compiled U-Net copied its last 64-channel activation to NCDHW and cuDNN
    transposed it back, in both directions of training, around pre-Hopper kernels: on an H200 4.3 ms of a training
    sample and 1.7 ms of a sampling evaluation, for 7 GFLOP (data/measurements/h100-2026-12-05-ndhwc-edges/)."""

    padded_to = 0
    # As one matrix product to per-tap partial sums and their shifted sum (`set_edge_gemms`).
    as_gemm = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.as_gemm:
            return conv3x3_shifted_sum(x, self.weight, self.bias)
        extra = -self.out_channels % self.padded_to if self.padded_to else 0
        if not extra:
            return super().forward(x)
        weight = F.pad(self.weight, (0, 0) * 4 + (0, extra))
        bias = None if self.bias is None else F.pad(self.bias, (0, extra))
        return self._conv_forward(x, weight, bias)[:, : self.out_channels]


def set_ndhwc_edges(model: nn.Module, enabled: bool) -> None:
    """The NDHWC path's edges in NDHWC too (the `ndhwc_edges` switch): the output convolution's filters padded
    (`OutputConv3d`), and the inputs of the first convolution and of the stride-2 Downsample convolutions pinned to
    NDHWC (`NdhwcInputConv3d`). Off, the model is upstream's to the stride.

    Three earlier forms of the input edges were measured without effect on an H100, and the pinning explains why:
    each made a tensor channels-last that inductor then laid out again (data/measurements/h100-2026-12-05-ndhwc-edges/,
    data/measurements/h100-2026-12-05-frontier-input/, data/measurements/2026-12-05-conv-layouts/)."""
    if enabled:
        from torch._inductor import inductor_prims  # noqa: F401  (registers prims.inductor_force_stride_order)
    for module in model.modules():
        if isinstance(module, OutputConv3d):
            module.padded_to = OUTPUT_CHANNEL_MULTIPLE if enabled else 0
        elif isinstance(module, NdhwcInputConv3d):
            module.ndhwc_input = enabled


def set_edge_gemms(model: nn.Module, enabled: bool) -> None:
    """The first and the output convolution as matrix products (the `edge_gemms` switch; medddpm.conv_gemm): the first
    (`NdhwcInputConv3d` of stride 1: 3 input channels) as im2col and one product, the output (`OutputConv3d`: one
    filter) as one product to per-tap partial sums and their shifted sum. The stride-2 convolutions keep cuDNN. Off,
    the model is upstream's to the call."""
    for module in model.modules():
        first = isinstance(module, NdhwcInputConv3d) and module.stride == (1, 1, 1)
        if not (first or isinstance(module, OutputConv3d)):
            continue
        geometry = (module.kernel_size, module.stride, module.padding, module.dilation, module.groups)
        if enabled and (geometry != ((3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1) or module.padding_mode != "zeros"):
            raise ValueError(f"edge_gemms: {module!r} is not a 3x3x3 convolution of stride 1 and zero padding 1")
        module.as_gemm = enabled


def set_edge_columns_recomputed(model: nn.Module, enabled: bool) -> None:
    """The first convolution's im2col columns recomputed in backward instead of kept from the forward for the weight's
    gradient (the `recompute_edge_columns` switch): at 128^3 in bfloat16 the columns (27 x 3 channels and 7 zero ones
    per voxel) hold 0.34 GiB through the training step, the input they are gathered from 0.01 GiB. The same function;
    the gather runs twice. Needs the first convolution as a matrix product (`set_edge_gemms`) first."""
    firsts = [module for module in model.modules() if isinstance(module, NdhwcInputConv3d) and module.as_gemm]
    if enabled and not firsts:
        raise ValueError("recompute_edge_columns needs the first convolution as a matrix product (set_edge_gemms) "
                         "first: without it there are no columns to recompute")
    for module in firsts:
        module.recompute_columns = enabled


def set_dense_skip_gradients(model: nn.Module, enabled: bool) -> None:
    """The gradients of the decoder's concatenations reach the activation and the skip as dense NDHWC tensors, not as
    channel slices (the `dense_skip_gradients` switch; `DenseNdhwcGradient`). Off, upstream's autograd."""
    for module in model.modules():
        if isinstance(module, UNet3D):
            module.dense_skip_gradients = enabled


def set_time_embedding_in_norm(model: nn.Module, enabled: bool) -> None:
    """Whether every ResBlock hands its time embedding and its first convolution's bias to its second norm as an
    offset (the `time_embedding_in_norm` switch; `ResBlock._forward_embedding_in_norm`). The norms must be fused with
    their SiLU first (`fuse_norm_act`): the offset is an argument of GroupNormSiLU's kernels."""
    for module in model.modules():
        if isinstance(module, ResBlock):
            if enabled and not isinstance(module.out_layers[0], GroupNormSiLU):
                raise ValueError("time_embedding_in_norm needs the norms fused with their SiLU (fuse_norm_act) first: "
                                 f"a ResBlock's second norm is a {type(module.out_layers[0]).__name__}")
            module.time_embedding_in_norm = enabled


class TimestepSequential(nn.Sequential):
    """A sequence whose ResBlocks also receive the time embedding."""

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        for layer in self:
            x = layer(x, emb) if isinstance(layer, ResBlock) else layer(x)
        return x


class UNet3D(nn.Module):
    """Med-DDPM's denoiser: input = noisy image concatenated with the one-hot mask, output = predicted noise."""

    def __init__(self, config: UNetConfig):
        super().__init__()
        self.config = config
        width = config.base_width
        emb_dim = width * 4
        groups = config.groups
        self.time_embed = nn.Sequential(nn.Linear(width, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))

        def attention(channels: int) -> AttentionBlock:
            return AttentionBlock(channels, config.num_heads, groups)

        ch = config.channel_mult[0] * width
        self.input_blocks = nn.ModuleList(
            [TimestepSequential(NdhwcInputConv3d(config.in_channels, ch, 3, padding=1))]
        )
        skip_channels = [ch]
        ds = 1
        for level, mult in enumerate(config.channel_mult):
            for _ in range(config.num_res_blocks):
                layers: list[nn.Module] = [ResBlock(ch, emb_dim, mult * width, config.dropout, groups)]
                ch = mult * width
                if ds in config.attention_downsample_rates:
                    layers.append(attention(ch))
                self.input_blocks.append(TimestepSequential(*layers))
                skip_channels.append(ch)
            if level != len(config.channel_mult) - 1:
                self.input_blocks.append(TimestepSequential(Downsample(ch)))
                skip_channels.append(ch)
                ds *= 2

        self.middle_block = TimestepSequential(
            ResBlock(ch, emb_dim, ch, config.dropout, groups),
            attention(ch),
            ResBlock(ch, emb_dim, ch, config.dropout, groups),
        )

        self.output_blocks = nn.ModuleList()
        for level, mult in list(enumerate(config.channel_mult))[::-1]:
            for i in range(config.num_res_blocks + 1):
                layers = [ResBlock(ch + skip_channels.pop(), emb_dim, width * mult, config.dropout, groups)]
                ch = width * mult
                if ds in config.attention_downsample_rates:
                    layers.append(attention(ch))
                if level and i == config.num_res_blocks:
                    layers.append(Upsample(ch))
                    ds //= 2
                self.output_blocks.append(TimestepSequential(*layers))

        self.out = nn.Sequential(
            GroupNorm32(groups, ch), nn.SiLU(), zero_module(OutputConv3d(ch, config.out_channels, 3, padding=1))
        )
        # The decoder's concatenated parts get dense NDHWC gradients (`set_dense_skip_gradients`).
        self.dense_skip_gradients = False

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor) -> torch.Tensor:
        # Cast to the weights' dtype: a no-op in float32, needed for the float64 reference of the quality check.
        emb = self.time_embed(
            timestep_embedding(timesteps, self.config.base_width).to(self.time_embed[0].weight.dtype)
        )
        skips = []
        h = x
        for block in self.input_blocks:
            h = block(h, emb)
            skips.append(h)
        h = self.middle_block(h, emb)
        for block in self.output_blocks:
            skip = skips.pop()
            if self.dense_skip_gradients:
                h, skip = DenseNdhwcGradient.apply(h), DenseNdhwcGradient.apply(skip)
            h = block(torch.cat([h, skip], dim=1), emb)
        return self.out(h).type(x.dtype)


CHECKPOINTING_MODES = ("attention", "none", "all")


def set_checkpointing(model: nn.Module, mode: str) -> None:
    """Which blocks recompute their forward in backward: "attention" (upstream), "none", or "all" (every ResBlock
    too: activations of a ResBlock are then freed after its forward, at the price of computing it twice)."""
    if mode not in CHECKPOINTING_MODES:
        raise ValueError(f"checkpointing {mode!r} is not one of {CHECKPOINTING_MODES}")
    for module in model.modules():
        if isinstance(module, AttentionBlock):
            module.use_checkpoint = mode in ("attention", "all")
        elif isinstance(module, ResBlock):
            module.use_checkpoint = mode == "all"


def group_norm_silu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, groups: int, eps: float,
                    offset: torch.Tensor | None = None) -> torch.Tensor:
    """GroupNorm32 followed by SiLU as one function of plain tensor operations, in the input's own memory format.

    The same arithmetic as the reference: statistics and affine transform in (at least) float32, the result cast
    back to the input's dtype before SiLU. Splitting the channel axis into (groups, channels per group) is a view
    for contiguous and channels_last_3d tensors alike, and every operation after it keeps its input's layout, so
    a channels-last activation stays channels-last (the native GroupNorm kernel converts it to contiguous and back).
    Compiled (on its own or inside the compiled U-Net), it becomes one reduction and one element-wise kernel.

    `offset`, an (N, C) tensor where given, is added to the input first, per sample and channel, in the compute
    dtype: the norm of `x + offset[:, :, None, None, None]` (a ResBlock's time embedding and its convolution's bias,
    `set_time_embedding_in_norm`).
    """
    batch, channels = x.shape[:2]
    compute = torch.promote_types(x.dtype, torch.float32)
    x_in = x.to(compute)
    if offset is not None:
        x_in = x_in + offset.to(compute).reshape((batch, channels) + (1,) * (x.ndim - 2))
    grouped = x_in.unflatten(1, (groups, channels // groups))
    var, mean = torch.var_mean(grouped, dim=tuple(range(2, grouped.ndim)), correction=0, keepdim=True)
    normed = ((grouped - mean) * torch.rsqrt(var + eps)).flatten(1, 2)
    affine = (1, channels) + (1,) * (x.ndim - 2)
    y = normed * weight.to(compute).reshape(affine) + bias.to(compute).reshape(affine)
    return F.silu(y.to(x.dtype))


class GroupNormSiLU(GroupNorm32):
    """GroupNorm32 and the SiLU after it in one module, with GroupNorm32's parameters (the same state_dict keys:
    the SiLU it replaces holds none). `kernel` is `group_norm_silu` or a compiled version of it."""

    def __init__(self, norm: GroupNorm32, kernel=group_norm_silu):
        super().__init__(norm.num_groups, norm.num_channels, eps=norm.eps, affine=norm.affine, device="meta")
        self.weight, self.bias = norm.weight, norm.bias
        self.kernel = kernel

    def forward(self, x: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
        if offset is None:  # kernels without an offset argument (the norm bench's ATen one) stay usable
            return self.kernel(x, self.weight, self.bias, self.num_groups, self.eps)
        return self.kernel(x, self.weight, self.bias, self.num_groups, self.eps, offset)


def fuse_norm_act(model: nn.Module, kernel=group_norm_silu) -> int:
    """Replace every GroupNorm32 directly followed by SiLU in a Sequential by GroupNormSiLU (the SiLU by Identity,
    keeping the indices and so the state_dict keys). Returns how many pairs were fused. The attention blocks' norm
    is followed by a projection, not SiLU, and stays as it is."""
    fused = 0
    for module in list(model.modules()):
        if not isinstance(module, nn.Sequential):
            continue
        for i in range(len(module) - 1):
            if type(module[i]) is GroupNorm32 and isinstance(module[i + 1], nn.SiLU):
                module[i] = GroupNormSiLU(module[i], kernel)
                module[i + 1] = nn.Identity()
                fused += 1
    return fused


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
