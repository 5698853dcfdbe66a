"""Med-DDPM's Gaussian diffusion: cosine schedule, L1 noise-prediction loss, ancestral sampling.

The schedule and posterior follow the upstream code (an early denoising-diffusion-pytorch), quirks included:
the cosine schedule evaluates `linspace(0, T + 1, T + 1)` (not `T` intervals), betas are clipped at 0.999, the
predicted x0 is clamped to [-1, 1], the posterior log-variance is clipped at 1e-20, and no noise is added at t = 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn


def cosine_beta_schedule(timesteps: int, s: float = 0.008) -> np.ndarray:
    steps = timesteps + 1
    x = np.linspace(0, steps, steps)
    alphas_cumprod = np.cos(((x / steps) + s) / (1 + s) * math.pi * 0.5) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - (alphas_cumprod[1:] / alphas_cumprod[:-1])
    return np.clip(betas, a_min=0, a_max=0.999)


def _gather(buffer: torch.Tensor, t: torch.Tensor, ndim: int) -> torch.Tensor:
    return buffer.gather(0, t).reshape(t.shape[0], *((1,) * (ndim - 1)))


class GaussianDiffusion(nn.Module):
    """Wraps the denoiser; the mask condition is concatenated to the noisy image on the channel axis.

    `channels` is the number of image channels sampled (1 whole-head, 4 BraTS modalities); by default the
    denoiser's output channels."""

    def __init__(self, denoiser: nn.Module, timesteps: int = 250, channels: int | None = None):
        super().__init__()
        self.denoiser = denoiser
        self.num_timesteps = timesteps
        config = getattr(denoiser, "config", None)
        self.channels = channels if channels is not None else getattr(config, "out_channels", 1)
        betas = cosine_beta_schedule(timesteps)
        alphas = 1.0 - betas
        alphas_cumprod = np.cumprod(alphas, axis=0)
        alphas_cumprod_prev = np.append(1.0, alphas_cumprod[:-1])
        posterior_variance = betas * (1.0 - alphas_cumprod_prev) / (1.0 - alphas_cumprod)
        buffers = {
            "betas": betas,
            "alphas_cumprod": alphas_cumprod,
            "sqrt_alphas_cumprod": np.sqrt(alphas_cumprod),
            "sqrt_one_minus_alphas_cumprod": np.sqrt(1.0 - alphas_cumprod),
            "sqrt_recip_alphas_cumprod": np.sqrt(1.0 / alphas_cumprod),
            "sqrt_recipm1_alphas_cumprod": np.sqrt(1.0 / alphas_cumprod - 1),
            "posterior_log_variance_clipped": np.log(np.maximum(posterior_variance, 1e-20)),
            "posterior_mean_coef1": betas * np.sqrt(alphas_cumprod_prev) / (1.0 - alphas_cumprod),
            "posterior_mean_coef2": (1.0 - alphas_cumprod_prev) * np.sqrt(alphas) / (1.0 - alphas_cumprod),
        }
        for name, values in buffers.items():
            self.register_buffer(name, torch.tensor(values, dtype=torch.float32))

    def denoise(self, x: torch.Tensor, condition: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.denoiser(torch.cat([x, condition], dim=1), t)

    def q_sample(self, x_start: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        ndim = x_start.ndim
        return (
            _gather(self.sqrt_alphas_cumprod, t, ndim) * x_start
            + _gather(self.sqrt_one_minus_alphas_cumprod, t, ndim) * noise
        )

    def loss(self, x_start: torch.Tensor, condition: torch.Tensor, generator: torch.Generator | None = None):
        """L1 between the true and the predicted noise at a uniformly drawn step."""
        return self.loss_at(x_start, condition, *self.draw(x_start, generator))

    def draw(self, x_start: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The random numbers of one loss evaluation, in upstream's order: the step of each item, then the noise
        (contiguous; `loss_at` gives it the layout of x_start)."""
        batch = x_start.shape[0]
        t = torch.randint(0, self.num_timesteps, (batch,), device=x_start.device, generator=generator)
        noise = torch.randn(x_start.shape, device=x_start.device, generator=generator)
        return t, noise

    def loss_at(self, x_start: torch.Tensor, condition: torch.Tensor, t: torch.Tensor, noise: torch.Tensor):
        """The loss at drawn steps `t` and `noise` (`draw`): a CUDA graph replays this with new draws copied in."""
        noise = noise.to(memory_format=_memory_format_of(x_start))
        x_noisy = self.q_sample(x_start, t, noise)
        return (noise - self.denoise(x_noisy, condition, t)).abs().mean()

    def item_losses_at(self, x_start: torch.Tensor, condition: torch.Tensor, t: torch.Tensor,
                       noise: torch.Tensor) -> torch.Tensor:
        """Each item's `loss_at` (its mean over its own voxels): items of one size, so their mean is `loss_at` of
        the batch (a stacked optimizer step reads each micro-batch's loss from them)."""
        noise = noise.to(memory_format=_memory_format_of(x_start))
        x_noisy = self.q_sample(x_start, t, noise)
        return (noise - self.denoise(x_noisy, condition, t)).abs().mean(dim=tuple(range(1, x_start.ndim)))

    def p_sample(
        self, x: torch.Tensor, condition: torch.Tensor, step: int, generator: torch.Generator | None = None,
        denoise: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One ancestral step x_t -> x_{t-1}. `denoise` evaluates the U-Net (default `self.denoise`; a variant may
        pass a compiled or graph-replaying evaluation of the same function)."""
        ndim = x.ndim
        t = torch.full((x.shape[0],), step, device=x.device, dtype=torch.long)
        eps = (denoise or self.denoise)(x, condition, t)
        x_start = _gather(self.sqrt_recip_alphas_cumprod, t, ndim) * x - _gather(
            self.sqrt_recipm1_alphas_cumprod, t, ndim
        ) * eps
        x_start = x_start.clamp(-1.0, 1.0)
        mean = _gather(self.posterior_mean_coef1, t, ndim) * x_start + _gather(
            self.posterior_mean_coef2, t, ndim
        ) * x
        if step == 0:
            return mean
        noise = torch.randn(x.shape, device=x.device, generator=generator).to(memory_format=_memory_format_of(x))
        return mean + (0.5 * _gather(self.posterior_log_variance_clipped, t, ndim)).exp() * noise

    def sample_steps(
        self,
        condition: torch.Tensor,
        generator: torch.Generator | None = None,
        max_steps: int | None = None,
        denoise: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield (t, x_t-1) over the reversed chain, from pure noise; `max_steps` stops early (timing runs)."""
        shape = (condition.shape[0], self.channels, *condition.shape[2:])
        x = torch.randn(shape, device=condition.device, generator=generator).to(
            memory_format=_memory_format_of(condition)
        )
        steps = list(reversed(range(self.num_timesteps)))
        if max_steps is not None:
            steps = steps[:max_steps]
        for step in steps:
            x = self.p_sample(x, condition, step, generator, denoise)
            yield step, x


def _memory_format_of(x: torch.Tensor) -> torch.memory_format:
    if x.ndim == 5 and x.is_contiguous(memory_format=torch.channels_last_3d) and not x.is_contiguous():
        return torch.channels_last_3d
    return torch.contiguous_format
