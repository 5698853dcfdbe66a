"""A variant on a device: the one place where a variant's switches reach the model, its inputs, its autocast, its
optimizer and EMA kernels and its U-Net evaluation (medddpm.variants says how each switch acts). Below the trainer
and the engine, which both take one."""

from __future__ import annotations

import contextlib

import torch

from .diffusion import GaussianDiffusion
from .ema import EMA
from .runs import Run
from .sampling import UNetEvaluation
from .variants import Variant, autocast, compile_model, compiles_on, prepare_input, prepare_model


class Placement:
    """A variant on a device: where the model and its inputs live, in which layout, under which autocast, compiled
    or not, with which optimizer and EMA kernels."""

    def __init__(self, variant: Variant, device: torch.device, graph_capture: bool = False):
        self.variant = variant
        self.device = device
        # The training step will be captured in a CUDA graph (the quality study, or the variant's
        # cuda_graph_training on CUDA; training.StepGraph): Adam keeps its step count on the device (capturable), and
        # autocast casts the weights afresh in every forward (its cache of casts cannot outlive a capture). Both
        # compute the same function.
        self.graph_capture = graph_capture or (variant.cuda_graph_training and device.type == "cuda")

    @classmethod
    def of(cls, run: Run, graph_capture: bool = False) -> Placement:
        return cls(run.variant, run.device, graph_capture)

    @property
    def compiles(self) -> bool:
        """Whether anything compiles on this device (the U-Net, or the fused norm on its own on CUDA)."""
        return compiles_on(self.variant, self.device)

    def model(self, diffusion: GaussianDiffusion) -> GaussianDiffusion:
        """The diffusion on the device with the model-level switches applied in place (checkpointing, fused norm,
        memory format); parameters stay the same objects."""
        diffusion.to(self.device)
        prepare_model(diffusion, self.variant, self.device)
        return diffusion

    def compile(self, diffusion: GaussianDiffusion) -> bool:
        """Compile the U-Net in place when the variant asks for it (compilation happens at the first call)."""
        return compile_model(diffusion, self.variant)

    def input(self, x: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        """A tensor on the device, in the variant's memory format."""
        return prepare_input(x.to(self.device, non_blocking=non_blocking), self.variant)

    def autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.variant, self.device, cache=not self.graph_capture)

    def optimizer(self, parameters, lr: float) -> torch.optim.Adam:
        options = {"fused": True} if self.variant.fused_adam else {}
        if self.graph_capture:
            options["capturable"] = True
        return torch.optim.Adam(parameters, lr=lr, **options)

    def ema(self, decay: float) -> EMA:
        return EMA(decay, foreach=self.variant.foreach_ema)

    def evaluation(self, diffusion: GaussianDiffusion) -> UNetEvaluation:
        """The U-Net evaluation of a sampling step: plain, compiled, or replayed from a CUDA graph."""
        return UNetEvaluation(diffusion, self.variant, self.device)
