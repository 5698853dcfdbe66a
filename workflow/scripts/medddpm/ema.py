"""The EMA of the weights as upstream keeps it (a module of its own: the placement builds it, the trainer uses it)."""

from __future__ import annotations

import torch
from torch import nn


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
