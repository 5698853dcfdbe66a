"""The upstream training loop: Adam, gradient accumulation, EMA, one `loss.item()` per micro-batch."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from .diffusion import GaussianDiffusion
from .variants import Variant, autocast, prepare_input


@dataclass(frozen=True)
class TrainSettings:
    lr: float = 1e-5
    gradient_accumulation: int = 2
    ema_decay: float = 0.995
    ema_update_every: int = 10
    ema_start_step: int = 2000


class EMA:
    """Exponential moving average of the weights, as upstream: old * beta + (1 - beta) * new."""

    def __init__(self, beta: float):
        self.beta = beta

    @torch.no_grad()
    def update_model_average(self, ma_model: nn.Module, current_model: nn.Module) -> None:
        for ma_param, current in zip(ma_model.parameters(), current_model.parameters()):
            ma_param.data = ma_param.data * self.beta + (1 - self.beta) * current.data


def cycle(loader) -> Iterator:
    while True:
        yield from loader


class Trainer:
    """One `step()` = one optimizer step over `gradient_accumulation` micro-batches, then the EMA rule."""

    def __init__(
        self,
        diffusion: GaussianDiffusion,
        batches: Iterator[dict],
        variant: Variant,
        device: torch.device,
        settings: TrainSettings,
        generator: torch.Generator,
    ):
        self.diffusion = diffusion
        self.batches = batches
        self.variant = variant
        self.device = device
        self.settings = settings
        self.generator = generator
        self.ema = EMA(settings.ema_decay)
        self.ema_model = copy.deepcopy(diffusion)
        self.optimizer = torch.optim.Adam(diffusion.parameters(), lr=settings.lr)
        self.step_index = 0

    def micro_batch(self) -> float:
        data = next(self.batches)
        condition = prepare_input(data["input"].to(self.device), self.variant)
        target = prepare_input(data["target"].to(self.device), self.variant)
        with autocast(self.variant, self.device):
            loss = self.diffusion.loss(target, condition, self.generator)
        loss = loss.sum() / target.shape[0]
        # Upstream prints loss.item() every micro-batch: a host synchronisation that is part of the workload.
        value = loss.item()
        (loss / self.settings.gradient_accumulation).backward()
        return value

    def step(self) -> list[float]:
        losses = [self.micro_batch() for _ in range(self.settings.gradient_accumulation)]
        self.optimizer.step()
        self.optimizer.zero_grad()
        if self.step_index % self.settings.ema_update_every == 0:
            self.step_ema()
        self.step_index += 1
        return losses

    def step_ema(self) -> None:
        if self.step_index < self.settings.ema_start_step:
            self.ema_model.load_state_dict(self.diffusion.state_dict())
        else:
            self.ema.update_model_average(self.ema_model, self.diffusion)

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
