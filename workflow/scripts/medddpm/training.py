"""The upstream training loop: Adam, gradient accumulation, EMA, one `loss.item()` per micro-batch.

Upstream's trainer feeds batches from a DataLoader with pinned memory and four worker processes: by the time a step
asks for its batch, the batch is assembled and pinned, and the step only copies it to the GPU. `Trainer.prefetch`
does the same assembling and pinning before the timed region, so the timed step holds the same work as upstream's
(the copy from pinned memory, `loss.item()`, Adam, the EMA rule) and no more.
"""

from __future__ import annotations

import copy
import math
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

from errors import ExpectedError

from .diffusion import GaussianDiffusion
from .settings import TrainSettings

if TYPE_CHECKING:
    from .engine import Placement

__all__ = ["EMA", "NonFiniteLoss", "Trainer", "TrainSettings", "cycle", "data_batches"]


class NonFiniteLoss(ExpectedError, FloatingPointError):
    """Training diverged: the first loss that is NaN or infinite stops it, before anything is written."""

    def __init__(self, value: float, step: int, micro_batch: int, settings: TrainSettings) -> None:
        super().__init__(
            f"training diverged: the loss is {value} at optimizer step {step}, micro-batch {micro_batch} of "
            f"{settings.gradient_accumulation} (numbered from 0, as the step and loss_micro_N columns of "
            f"train_steps.csv); nothing was written; fix: lower train.lr (now {settings.lr:g}), or check the "
            "variant's precision switches (autocast) and the prepared dataset"
        )
        self.step, self.micro_batch = step, micro_batch


class EMA:
    """Exponential moving average of the weights, as upstream: old * beta + (1 - beta) * new.

    `foreach` does the same arithmetic with one multi-tensor kernel per operation instead of three kernels per
    parameter: the same three roundings in the same order (old * beta, (1 - beta) * new, their sum), so the same
    numbers.
    """

    def __init__(self, beta: float, foreach: bool = False):
        self.beta = beta
        self.foreach = foreach

    @torch.no_grad()
    def update_model_average(self, ma_model: nn.Module, current_model: nn.Module) -> None:
        averages = list(ma_model.parameters())
        currents = list(current_model.parameters())
        if self.foreach:
            averages = [p.data for p in averages]
            scaled = torch._foreach_mul([p.data for p in currents], 1 - self.beta)
            torch._foreach_mul_(averages, self.beta)
            torch._foreach_add_(averages, scaled)
            return
        for ma_param, current in zip(averages, currents):
            ma_param.data = ma_param.data * self.beta + (1 - self.beta) * current.data


def cycle(loader) -> Iterator:
    while True:
        yield from loader


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Trainer:
    """One `step()` = one optimizer step over `gradient_accumulation` micro-batches, then the EMA rule.

    `placement` (engine.Placement) applies the variant: its optimizer and EMA kernels, the compilation of the U-Net
    and the layout and autocast of every micro-batch; `diffusion` comes placed (engine.Training). The EMA copy is
    taken before compiling, so it is a plain module with the same state_dict keys.
    """

    def __init__(
        self,
        diffusion: GaussianDiffusion,
        batches: Iterator[dict],
        placement: Placement,
        settings: TrainSettings,
        generator: torch.Generator,
        pin_memory: bool = False,
    ):
        self.diffusion = diffusion
        self.batches = batches
        self.placement = placement
        self.device = placement.device
        self.settings = settings
        self.generator = generator
        self.pin_memory = pin_memory
        self.ema = placement.ema(settings.ema_decay)
        self.ema_model = copy.deepcopy(diffusion)
        self.optimizer = placement.optimizer(diffusion.parameters(), settings.lr)
        placement.compile(diffusion)
        self.compiled = placement.compiles
        self.step_index = 0
        self._ready: deque[dict] = deque()

    def prefetch(self) -> None:
        """Assemble (and pin) the batches of the next optimizer step now, outside any timed region."""
        while len(self._ready) < self.settings.gradient_accumulation:
            batch = next(self.batches)
            if self.pin_memory:
                batch = {key: value.pin_memory() for key, value in batch.items()}
            self._ready.append(batch)

    def _next_batch(self) -> dict:
        if not self._ready:
            self.prefetch()
        return self._ready.popleft()

    def _to_device(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        # From pinned memory the copy is asynchronous and the caching host allocator keeps the buffer until it ends.
        condition = self.placement.input(batch["input"], non_blocking=True)
        target = self.placement.input(batch["target"], non_blocking=True)
        return condition, target

    def loss(self, target: torch.Tensor, condition: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        with self.placement.autocast():
            loss = self.diffusion.loss(target, condition, generator)
        return loss.sum() / target.shape[0]

    def loss_at(self, target: torch.Tensor, condition: torch.Tensor, t: torch.Tensor,
                noise: torch.Tensor) -> torch.Tensor:
        """`loss` at steps and noise drawn beforehand (GaussianDiffusion.draw): the step a CUDA graph replays."""
        with self.placement.autocast():
            loss = self.diffusion.loss_at(target, condition, t, noise)
        return loss.sum() / target.shape[0]

    def next_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(condition, target) of the next micro-batch, on the device in the variant's layout (consumed)."""
        return self._to_device(self._next_batch())

    def micro_batch(self, index: int = 0) -> float:
        condition, target = self.next_inputs()
        loss = self.loss(target, condition, self.generator)
        # Upstream prints loss.item() every micro-batch: a host synchronisation that is part of the workload.
        value = loss.item()
        if not math.isfinite(value):
            raise NonFiniteLoss(value, self.step_index, index, self.settings)
        (loss / self.settings.gradient_accumulation).backward()
        return value

    def step(self) -> list[float]:
        losses = [self.micro_batch(index) for index in range(self.settings.gradient_accumulation)]
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.end_step()
        return losses

    def end_step(self) -> None:
        """What follows the optimizer's update every step: the EMA rule, the step count."""
        if self.step_index % self.settings.ema_update_every == 0:
            self.step_ema()
        self.step_index += 1

    def step_ema(self) -> None:
        if self.step_index < self.settings.ema_start_step:
            self.ema_model.load_state_dict(self.diffusion.state_dict())
        else:
            self.ema.update_model_average(self.ema_model, self.diffusion)

    def resident_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(condition, target) of the next batch, copied to the device, without consuming it."""
        self.prefetch()
        return self._to_device(self._ready[0])

    def warm_up_compiled(self) -> float | None:
        """Compile ahead of the loop (the U-Net's forward and backward, or the fused norm's kernels), on the real
        input shape with random numbers of its own (the loop's generator and data order stay untouched) and the
        gradients dropped after it. Returns the wall-clock seconds this took (compilation plus one micro-batch),
        None when nothing compiles."""
        if not self.compiled:
            return None
        condition, target = self.resident_batch()
        generator = torch.Generator(device=self.device).manual_seed(self.settings.seed + 7919)
        _synchronize(self.device)
        started = time.perf_counter()
        self.loss(target, condition, generator).backward()
        _synchronize(self.device)
        seconds = time.perf_counter() - started
        self.optimizer.zero_grad(set_to_none=True)
        return seconds

    def bare_step(self, condition: torch.Tensor, target: torch.Tensor, generator: torch.Generator) -> None:
        """One optimizer step as the bare loop of the upstream comparison: forward, backward and Adam on resident
        tensors, with no `loss.item()`, no EMA and no data loading."""
        for _ in range(self.settings.gradient_accumulation):
            (self.loss(target, condition, generator) / self.settings.gradient_accumulation).backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def checkpoint(self) -> dict:
        """Plain tensors and numbers only, so that `torch.load(..., weights_only=True)` reads it."""
        return {
            "step": self.step_index,
            "model": self.diffusion.state_dict(),
            "ema": self.ema_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }


def data_batches(dataset, seed: int) -> Iterator[dict]:
    """Shuffled batches of one case, cycling, in an order fixed by `seed` (the same for every variant)."""
    generator = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=1, shuffle=True, generator=generator)
    return cycle(loader)
