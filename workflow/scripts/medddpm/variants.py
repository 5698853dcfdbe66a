"""Variants of the optimization matrix applied to the PyTorch backends and the model.

A variant is data from the config (`variants: {name: {switch: value}}`, ``medddpm.switches.Variant``), so a user
adds one without code. The switches change precision (TF32, autocast), layout (channels-last), fusion (GroupNorm +
SiLU, torch.compile), scheduling (CUDA graphs, fused optimizer and EMA) and memory strategy (checkpointing), never
the function: every variant has the same parameters and state_dict keys. `runs.start_run` sets a job's backend switches;
`placement.Placement` is the one caller of the rest, for the jobs, the quality study and the profiled program alike.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch
from torch import nn

from .switches import Variant
from .unet import (fuse_norm_act, group_norm_silu, keep_channels_last, set_checkpointing, set_dense_skip_gradients,
                   set_edge_columns_recomputed, set_edge_gemms, set_gather_upsampling, set_ndhwc_edges,
                   set_time_embedding_in_norm)

__all__ = ["Variant", "apply_backend", "backend_flags", "restore_backend", "prepare_model", "prepare_input",
           "compile_model", "compiles_on", "autocast", "memory_format", "AUTOCAST_DTYPES"]

AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}

# Every GroupNorm site of the U-Net has its own shape (about 20 at 128^3, times grad mode and layout) and torch
# compiles one static-shape kernel per shape; dynamo's default limit of 8 per function would send the rest back to
# eager silently.
NORM_RECOMPILE_LIMIT = 64


# PyTorch 2.9 introduced per-backend fp32_precision and refuses reads after a mix of old and new APIs.
_PER_BACKEND_PRECISION = hasattr(torch.backends.cudnn, "conv") and hasattr(torch.backends.cudnn.conv, "fp32_precision")


def _set_tf32(cudnn: bool, matmul: bool) -> None:
    # Matrix products through set_float32_matmul_precision on every release: it sets the per-backend setting
    # (cuda.matmul and mkldnn.matmul to "tf32" or "ieee", or allow_tf32 before 2.9) and the backend-less one together.
    # Inductor's autotuning (mode max-autotune) reads the backend-less torch.get_float32_matmul_precision(), which
    # raises once cuda.matmul is "tf32" while it still says "highest" (measured on the H200 with torch 2.11).
    torch.set_float32_matmul_precision("high" if matmul else "highest")
    if _PER_BACKEND_PRECISION:
        torch.backends.cudnn.conv.fp32_precision = "tf32" if cudnn else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = cudnn


def backend_flags() -> dict:
    """The backend state that the variants switch, read back from PyTorch."""
    if _PER_BACKEND_PRECISION:
        cudnn_tf32 = torch.backends.cudnn.conv.fp32_precision == "tf32"
        matmul_tf32 = torch.backends.cuda.matmul.fp32_precision == "tf32"
    else:
        cudnn_tf32 = torch.backends.cudnn.allow_tf32
        matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    return {
        "cudnn_tf32": bool(cudnn_tf32),
        "matmul_tf32": bool(matmul_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        # None where PyTorch was built without cuDNN.
        "cudnn_benchmark_limit": torch.backends.cudnn.benchmark_limit,
    }


def apply_backend(variant: Variant) -> None:
    """Set the process-wide backend switches of a variant (call once, before building anything)."""
    _set_tf32(variant.cudnn_tf32, variant.matmul_tf32)
    torch.backends.cudnn.benchmark = variant.cudnn_benchmark
    # 0: every engine configuration; 10: PyTorch's default.
    torch.backends.cudnn.benchmark_limit = 0 if variant.cudnn_benchmark_all_engines else 10


def restore_backend(flags: dict) -> None:
    """Put the backend state that `backend_flags()` read back as it was."""
    _set_tf32(flags["cudnn_tf32"], flags["matmul_tf32"])
    torch.backends.cudnn.benchmark = flags["cudnn_benchmark"]
    if flags["cudnn_benchmark_limit"] is not None:
        torch.backends.cudnn.benchmark_limit = flags["cudnn_benchmark_limit"]


def memory_format(variant: Variant) -> torch.memory_format:
    return torch.channels_last_3d if variant.channels_last else torch.contiguous_format


# Dynamo's recompile limits, per compiled function and over all of them; the newer name first (both exist on 2.7+,
# one an alias of the other).
RECOMPILE_LIMITS = {False: ("recompile_limit", "cache_size_limit"),
                    True: ("accumulated_recompile_limit", "accumulated_cache_size_limit")}


def recompile_limit(accumulated: bool = False) -> int:
    """Dynamo's recompile limit per function (`accumulated`: over all functions)."""
    config = torch._dynamo.config
    return next(getattr(config, name) for name in RECOMPILE_LIMITS[accumulated] if hasattr(config, name))


def raise_recompile_limit(limit: int, accumulated: bool = False) -> None:
    """Raise dynamo's recompile limit per function (`accumulated`: over all functions) to at least `limit`."""
    config = torch._dynamo.config
    for name in RECOMPILE_LIMITS[accumulated]:
        if hasattr(config, name) and getattr(config, name) < limit:
            setattr(config, name, limit)


def raise_recompile_limits(factor: int) -> None:
    """Both of dynamo's recompile limits (per function and over all) to `factor` times their defaults, so that a
    process that compiles the same code `factor` times over (batch shapes, module instances) never falls back to eager
    silently."""
    for accumulated in (False, True):
        raise_recompile_limit(recompile_limit(accumulated) * factor, accumulated)


@functools.cache
def compiled_group_norm_silu():
    """`group_norm_silu` compiled on its own (static shapes, no graph break): one fused kernel per norm site."""
    raise_recompile_limit(NORM_RECOMPILE_LIMIT)
    return torch.compile(group_norm_silu, dynamic=False, fullgraph=True)


def _denoiser(model: nn.Module) -> nn.Module:
    return getattr(model, "denoiser", model)


def prepare_model(model: nn.Module, variant: Variant, device: torch.device | None = None) -> nn.Module:
    """Apply the variant's model-level switches in place: checkpointing, the upsampling's formulation, fused GroupNorm
    + SiLU, memory format.

    `model` is the U-Net or the diffusion holding it. The fused norm is compiled on its own on CUDA when the U-Net
    itself is not compiled (inside a compiled U-Net, torch.compile fuses the plain function with everything else).
    Parameters stay the same objects, so an optimizer may be built before or after.
    """
    denoiser = _denoiser(model)
    set_checkpointing(denoiser, variant.checkpointing)
    set_gather_upsampling(denoiser, variant.gather_upsampling)
    keep_channels_last(denoiser, variant.ndhwc)
    set_ndhwc_edges(denoiser, variant.ndhwc_edges)
    set_edge_gemms(denoiser, variant.edge_gemms)
    set_edge_columns_recomputed(denoiser, variant.recompute_edge_columns)
    set_dense_skip_gradients(denoiser, variant.dense_skip_gradients)
    on_cuda = device is not None and torch.device(device).type == "cuda"
    if variant.ndhwc and on_cuda:
        from .ndhwc_norm import group_norm_silu_ndhwc  # Triton: imported where its kernels run

        fuse_norm_act(denoiser, group_norm_silu_ndhwc)
    elif variant.fused_norm_act or variant.ndhwc:
        fuse_norm_act(denoiser, compiled_group_norm_silu() if on_cuda and not variant.compiles else group_norm_silu)
    set_time_embedding_in_norm(denoiser, variant.time_embedding_in_norm)  # an argument of the fused norms
    return model.to(memory_format=memory_format(variant))


def compile_model(model: nn.Module, variant: Variant) -> bool:
    """Compile the U-Net in place (`nn.Module.compile`: the state_dict keys stay the same) with the variant's mode,
    the whole graph at once (fullgraph: a graph break is an error) and static shapes. Compilation itself happens
    at the first call; returns whether anything was compiled."""
    if variant.compile is None:
        return False
    _denoiser(model).compile(fullgraph=True, dynamic=False, mode=variant.compile)
    return True


def compiles_on(variant: Variant, device: torch.device) -> bool:
    """Whether the variant compiles anything on this device: the U-Net (`compile`), or on CUDA the fused norm on
    its own. Compilation then happens at the first calls, which the jobs time apart as compile_seconds."""
    return variant.compiles or (variant.fused_norm_act and torch.device(device).type == "cuda")


def prepare_input(x: torch.Tensor, variant: Variant) -> torch.Tensor:
    return x.contiguous(memory_format=memory_format(variant))


@contextlib.contextmanager
def autocast(variant: Variant, device: torch.device, cache: bool = True) -> Iterator[None]:
    """The variant's autocast; `cache` false recasts the weights in every forward (required inside a CUDA graph
    capture; the same numbers)."""
    if variant.autocast is None:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=AUTOCAST_DTYPES[variant.autocast], cache_enabled=cache):
        yield
