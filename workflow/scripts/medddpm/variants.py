"""Variants of the optimization matrix: named sets of switches applied to the PyTorch backends and the model.

A variant is data from the config (`variants: {name: {switch: value}}`), so a user adds one without code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields

import torch
from torch import nn

AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Variant:
    name: str
    cudnn_tf32: bool
    matmul_tf32: bool
    channels_last: bool
    cudnn_benchmark: bool = False
    autocast: str | None = None

    @classmethod
    def from_config(cls, name: str, switches: dict) -> Variant:
        known = {f.name for f in fields(cls)} - {"name"}
        unknown = set(switches) - known
        if unknown:
            raise ValueError(f"variant {name!r}: unknown switch(es) {sorted(unknown)}; known: {sorted(known)}")
        return cls(name=name, **switches)

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last_3d if self.channels_last else torch.contiguous_format

    def switches(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "name"}

    def effective_on(self, device: torch.device) -> dict:
        """Which switches mean something on this device (TF32 and cuDNN exist only on CUDA GPUs)."""
        cuda = device.type == "cuda"
        return {
            "cudnn_tf32": cuda,
            "matmul_tf32": cuda,
            "cudnn_benchmark": cuda,
            "channels_last": True,
            "autocast": self.autocast is None or cuda or self.autocast == "bfloat16",
        }


def _set_tf32(cudnn: bool, matmul: bool) -> None:
    # PyTorch 2.9 introduced per-backend fp32_precision and refuses reads after a mix of old and new APIs, so use
    # the new API wherever it exists and the legacy flags only on older releases.
    if hasattr(torch.backends.cudnn, "conv") and hasattr(torch.backends.cudnn.conv, "fp32_precision"):
        torch.backends.cudnn.conv.fp32_precision = "tf32" if cudnn else "ieee"
        torch.backends.cuda.matmul.fp32_precision = "tf32" if matmul else "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = cudnn
        torch.backends.cuda.matmul.allow_tf32 = matmul


def backend_flags() -> dict:
    """The backend state that the variants switch, read back from PyTorch."""
    if hasattr(torch.backends.cudnn, "conv") and hasattr(torch.backends.cudnn.conv, "fp32_precision"):
        cudnn_tf32 = torch.backends.cudnn.conv.fp32_precision == "tf32"
        matmul_tf32 = torch.backends.cuda.matmul.fp32_precision == "tf32"
    else:
        cudnn_tf32 = torch.backends.cudnn.allow_tf32
        matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    return {
        "cudnn_tf32": bool(cudnn_tf32),
        "matmul_tf32": bool(matmul_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
    }


def apply_backend(variant: Variant) -> None:
    """Set the process-wide backend switches of a variant (call once, before building anything)."""
    _set_tf32(variant.cudnn_tf32, variant.matmul_tf32)
    torch.backends.cudnn.benchmark = variant.cudnn_benchmark


def prepare_model(model: nn.Module, variant: Variant) -> nn.Module:
    return model.to(memory_format=variant.memory_format)


def prepare_input(x: torch.Tensor, variant: Variant) -> torch.Tensor:
    return x.contiguous(memory_format=variant.memory_format)


@contextlib.contextmanager
def autocast(variant: Variant, device: torch.device) -> Iterator[None]:
    if variant.autocast is None:
        yield
        return
    with torch.autocast(device_type=device.type, dtype=AUTOCAST_DTYPES[variant.autocast]):
        yield
