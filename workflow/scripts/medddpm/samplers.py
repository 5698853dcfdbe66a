"""Samplers of Med-DDPM: the ancestral chain it was trained for, and fast solvers of its probability-flow ODE.

Every sampler walks from x_T (pure noise at the last timestep of the T-step schedule) towards an image, one U-Net
evaluation per step, and yields each new state so that the caller can time every step. The U-Net is always given
integer timesteps of the T-step schedule (a LongTensor of shape (batch,)), the inputs it was trained on: every
fast solver here runs on a subsequence of those timesteps, so none needs a continuous time.

- `ddpm`: the T-step ancestral chain, GaussianDiffusion.p_sample itself (Ho et al. 2020; T steps only).
- `deis_ipndm`: upstream Med-DDPM's fast sampler, DEIS's iPNDM (Zhang & Chen 2023) as upstream's
  fast_sampling/inference_deis.py runs it; its grid, coefficients and clamp are described at `DeisIPNDM`.
  `deis_ipndm_as_shipped`: the same with the U-Net given upstream's respaced index instead of the timestep.
- `ddim`: DDIM with eta = 0 (Song et al. 2021) on the respaced timesteps.
- `dpm_solver_pp_2m`: DPM-Solver++(2M) (Lu et al. 2022), data prediction, multistep, on the same timesteps.

Every sampler clamps its prediction of x0 to [-1, 1] at every step, as upstream's p_sample and its fast sampler
do. The per-step update is a few multiply-adds with Python-float coefficients computed at construction, with no
host synchronisation and no branching on tensor values, so that it can be captured in a CUDA graph with the U-Net
evaluation; tensors keep the dtype and memory format of x_T. A sampler never keeps the U-Net's output across an
evaluation (only tensors it computed from it), so an evaluation may return a buffer that the next one overwrites.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar, Protocol

import numpy as np
import torch

from .diffusion import GaussianDiffusion, _memory_format_of, cosine_beta_schedule

Denoise = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

# upstream's discrete VP-SDE keeps alpha_bar inside [1e-7, 1 - 1e-7] when it computes its step coefficients
DEIS_ALPHA_CLIP = 1e-7
# Adams-Bashforth weights of the current and up to three earlier noise predictions (iPNDM's warm start by order)
ADAMS_BASHFORTH = ((1.0,), (3 / 2, -1 / 2), (23 / 12, -16 / 12, 5 / 12), (55 / 24, -59 / 24, 37 / 24, -9 / 24))


def schedule_of(diffusion: GaussianDiffusion) -> np.ndarray:
    """The diffusion's alphas_cumprod in float64 (its buffers hold them in float32), from the same cosine schedule."""
    return np.cumprod(1.0 - cosine_beta_schedule(diffusion.num_timesteps))


def spaced_timesteps(timesteps: int, steps: int) -> tuple[int, ...]:
    """`steps` timesteps of a `timesteps`-step schedule spread evenly from 0 to timesteps - 1, ascending: improved
    DDPM's respacing with one section, which upstream's SpacedDiffusion uses for its fast sampling (both ends
    included, so a solver starts where x_T is pure noise and ends next to the data). Each is the running sum of
    the stride rounded half to even, as there, so that ties at .5 fall where upstream's floating-point sum puts
    them (N = 21: 124.50000000000001 -> 125, where 10 * 12.45 would round to 124)."""
    stride = (timesteps - 1) / (steps - 1)
    spaced, position = [], 0.0
    for _ in range(steps):
        spaced.append(round(position))
        position += stride
    return tuple(spaced)


class Sampler(Protocol):
    name: ClassVar[str]
    steps: int
    timesteps: tuple[int, ...]

    @staticmethod
    def accepted_steps(timesteps: int) -> range: ...

    @property
    def evaluations(self) -> int: ...

    def trajectory(self, x: torch.Tensor, condition: torch.Tensor, denoise: Denoise,
                   generator: torch.Generator | None = None) -> Iterator[tuple[int, torch.Tensor]]: ...


def _check_steps(name: str, steps: int, accepted: range) -> None:
    if steps not in accepted:
        raise ValueError(f"sampler {name!r} takes {accepted.start} to {accepted.stop - 1} steps, not {steps}")


class DDPM:
    """The ancestral chain over all T timesteps: GaussianDiffusion.p_sample at T-1, ..., 0, its noise drawn from
    `generator`. The only sampler that draws random numbers after x_T."""

    name: ClassVar[str] = "ddpm"

    def __init__(self, diffusion: GaussianDiffusion, steps: int):
        _check_steps(self.name, steps, self.accepted_steps(diffusion.num_timesteps))
        self.diffusion = diffusion
        self.steps = steps
        self.timesteps = tuple(reversed(range(diffusion.num_timesteps)))

    @staticmethod
    def accepted_steps(timesteps: int) -> range:
        return range(timesteps, timesteps + 1)

    @property
    def evaluations(self) -> int:
        return self.steps

    def trajectory(self, x: torch.Tensor, condition: torch.Tensor, denoise: Denoise,
                   generator: torch.Generator | None = None) -> Iterator[tuple[int, torch.Tensor]]:
        for step in self.timesteps:
            x = self.diffusion.p_sample(x, condition, step, generator, denoise)
            yield step, x


class OdeSolver:
    """A deterministic solver of the probability-flow ODE on the respaced timesteps of an alphas_cumprod schedule
    (float64, T entries): `timesteps` are the U-Net's timesteps, one a step, descending from T - 1 to 0, and
    `alpha_bar` the schedule there; subclasses set the per-step coefficients."""

    name: ClassVar[str]

    def __init__(self, alphas_cumprod: Sequence[float], steps: int):
        self.alphas_cumprod = np.asarray(alphas_cumprod, dtype=np.float64)
        _check_steps(self.name, steps, self.accepted_steps(len(self.alphas_cumprod)))
        self.steps = steps
        self.timesteps = tuple(reversed(spaced_timesteps(len(self.alphas_cumprod), steps)))
        self.alpha_bar = self.alphas_cumprod[list(self.timesteps)]
        self._x0_from_x = [float(v) for v in 1.0 / np.sqrt(self.alpha_bar)]
        self._x0_from_eps = [float(v) for v in np.sqrt(1.0 / self.alpha_bar - 1.0)]

    @staticmethod
    def accepted_steps(timesteps: int) -> range:
        return range(2, timesteps + 1)

    @property
    def evaluations(self) -> int:
        return self.steps

    @property
    def unet_timesteps(self) -> tuple[int, ...]:
        """The timestep the U-Net is given at each step: the step's own (subclasses may differ)."""
        return self.timesteps

    def _predict_x0(self, x: torch.Tensor, eps: torch.Tensor, index: int) -> torch.Tensor:
        """x0 from x_t and the predicted noise at the `index`-th step, clamped to [-1, 1]. In-place arithmetic on a
        tensor made from x gives it x's memory format whatever the layout of eps."""
        return (x * self._x0_from_x[index]).sub_(eps, alpha=self._x0_from_eps[index]).clamp_(-1.0, 1.0)

    def trajectory(self, x: torch.Tensor, condition: torch.Tensor, denoise: Denoise,
                   generator: torch.Generator | None = None) -> Iterator[tuple[int, torch.Tensor]]:
        """(t, x after the step) for every step; `generator` is unused (the solver draws nothing)."""
        t = [torch.full((x.shape[0],), step, device=x.device, dtype=torch.long) for step in self.unet_timesteps]
        history: list[torch.Tensor] = []
        for index, step in enumerate(self.timesteps):
            x, history = self._update(x, denoise(x, condition, t[index]), index, history)
            yield step, x

    def _update(self, x: torch.Tensor, eps: torch.Tensor, index: int,
                history: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        raise NotImplementedError


class DDIM(OdeSolver):
    """DDIM, eta = 0 (Song et al. 2021, eq. 12): x' = sqrt(a') x0 + sqrt(1 - a') eps on the respaced timesteps
    (`spaced_timesteps`: both ends, so the first step starts at T - 1 where x_T is drawn; the "leading" spacing
    of the DDIM paper would start below it), the last step from t = 0 to a' = 1, which returns x0. x0 is clamped
    and eps derived again from the clamped x0, as upstream's vendored guided-diffusion DDIM does."""

    name: ClassVar[str] = "ddim"

    def __init__(self, alphas_cumprod: Sequence[float], steps: int):
        super().__init__(alphas_cumprod, steps)
        alpha_bar = self.alpha_bar
        alpha_bar_next = np.append(alpha_bar[1:], 1.0)
        keep = np.sqrt((1.0 - alpha_bar_next) / (1.0 - alpha_bar))
        self._x_coef = [float(v) for v in keep]
        self._x0_coef = [float(v) for v in np.sqrt(alpha_bar_next) - np.sqrt(alpha_bar) * keep]

    def _update(self, x, eps, index, history):
        x0 = self._predict_x0(x, eps, index)
        return (x * self._x_coef[index]).add_(x0, alpha=self._x0_coef[index]), history


class DPMSolverPP2M(OdeSolver):
    """DPM-Solver++(2M) (Lu et al. 2022, Algorithm 2), data prediction, on the respaced timesteps: uniform in t,
    which the reference implementation recommends for high-resolution images over uniform in log-SNR, and which
    keeps the U-Net on the integer timesteps it was trained on. With lambda = log(alpha / sigma), h = lambda' - lambda and r = h_prev / h:
        x' = (sigma' / sigma) x - alpha' (exp(-h) - 1) ((1 + 1 / (2 r)) x0 - x0_prev / (2 r)).
    The first step is first order (no x0_prev yet), and so is the last (t = 0 to the data, where sigma' = 0 and
    the update returns x0), as the reference implementation's lower-order final step; x0 is clamped to [-1, 1]
    (static thresholding) where upstream clamps it."""

    name: ClassVar[str] = "dpm_solver_pp_2m"

    def __init__(self, alphas_cumprod: Sequence[float], steps: int):
        super().__init__(alphas_cumprod, steps)
        alpha_bar = self.alpha_bar
        alpha, sigma = np.sqrt(alpha_bar), np.sqrt(1.0 - alpha_bar)
        lam = np.log(alpha) - np.log(sigma)
        self._x_coef, self._x0_coef, self._x0_prev_coef = [], [], []
        for i in range(steps - 1):
            h = lam[i + 1] - lam[i]
            first = -alpha[i + 1] * np.expm1(-h)
            half_over_r = 0.0 if i == 0 else 0.5 * h / (lam[i] - lam[i - 1])
            self._x_coef.append(float(sigma[i + 1] / sigma[i]))
            self._x0_coef.append(float(first * (1.0 + half_over_r)))
            self._x0_prev_coef.append(float(-first * half_over_r))
        self._x_coef.append(0.0)
        self._x0_coef.append(1.0)
        self._x0_prev_coef.append(0.0)

    def _update(self, x, eps, index, history):
        x0 = self._predict_x0(x, eps, index)
        new = (x * self._x_coef[index]).add_(x0, alpha=self._x0_coef[index])
        if history:
            new.add_(history[0], alpha=self._x0_prev_coef[index])
        return new, [x0]


class DeisIPNDM(OdeSolver):
    """Upstream Med-DDPM's fast sampler (fast_sampling/inference_deis.py: th_deis's iPNDM, from DEIS, Zhang & Chen
    2023), reproduced from the paper's equations and upstream's choices:

    - the discrete VP-SDE is built on the respaced schedule alpha_k = alphas_cumprod[spaced_timesteps(T, N)[k]],
      k = 0..N-1 (upstream builds it from its N-step SpacedDiffusion), its time the index k;
    - the time grid is DEIS's "uniform" one over k, floor(linspace(0, N - 1, N + 1)) reversed, which is
      N-1, N-2, ..., 1, 0, 0: the U-Net is evaluated at the respaced timesteps from T - 1 down to 0 and the last
      step, from k = 0 to k = 0, has zero noise coefficients (it returns its input: upstream spends that
      evaluation, and so does this sampler). The sample is the state at t = 0, not a further-denoised x0;
    - each step is DDIM's exponential-integrator step with the noise replaced by an Adams-Bashforth combination of
      the current and up to three earlier noise predictions (orders 1, 2, 3, then 4: iPNDM's lower-order warm start):
      x' = sqrt(a'/a) x + (sqrt(1 - a') - sqrt(a'/a) sqrt(1 - a)) sum_j w_j eps_j, with a and a' clipped to
      [1e-7, 1 - 1e-7] as upstream's VP-SDE does (with T = 250 this moves only alpha_bar at T - 1, 3.9e-8);
    - each noise prediction is first turned into x0 with the unclipped alpha_bar, x0 clamped to [-1, 1], and the
      noise derived again from the clamped x0 (upstream's predict_eps).

    The U-Net is given the respaced timestep itself (spaced_timesteps(T, N)[k]). Upstream passes it the index k,
    a value in 0..N-1 that its U-Net, trained on 0..T-1, never saw (its own DDPM sampler in the same folder
    passes the respaced timestep); this is the one place where this sampler departs from upstream."""

    name: ClassVar[str] = "deis_ipndm"

    def __init__(self, alphas_cumprod: Sequence[float], steps: int):
        super().__init__(alphas_cumprod, steps)
        alpha_bar = self.alpha_bar
        self._eps_from_x = [float(v) for v in 1.0 / np.sqrt(1.0 - alpha_bar)]
        self._eps_from_x0 = [float(v) for v in np.sqrt(alpha_bar / (1.0 - alpha_bar))]
        grid = np.clip(np.append(alpha_bar, alpha_bar[-1]), DEIS_ALPHA_CLIP, 1.0 - DEIS_ALPHA_CLIP)
        current, following = grid[:-1], grid[1:]
        keep = np.sqrt(following / current)
        noise = np.sqrt(1.0 - following) - keep * np.sqrt(1.0 - current)
        # a row a step, as upstream's table: the coefficient of x, then those of the current and earlier noises
        # (zeros pad the warm-up steps' rows to four noises)
        weights = [ADAMS_BASHFORTH[min(i, 3)] + (0.0,) * (3 - min(i, 3)) for i in range(steps)]
        self.coefficients = [(float(keep[i]), *(float(noise[i] * w) for w in weights[i])) for i in range(steps)]

    def _clamped_eps(self, x: torch.Tensor, eps: torch.Tensor, index: int) -> torch.Tensor:
        x0 = self._predict_x0(x, eps, index)
        return (x * self._eps_from_x[index]).sub_(x0, alpha=self._eps_from_x0[index])

    def _update(self, x, eps, index, history):
        history = [self._clamped_eps(x, eps, index), *history]
        x_coef, *eps_coefs = self.coefficients[index]
        new = x * x_coef
        for coef, past in zip(eps_coefs, history):
            new.add_(past, alpha=coef)
        return new, history[: len(ADAMS_BASHFORTH) - 1]


class DeisIPNDMAsShipped(DeisIPNDM):
    """`deis_ipndm` exactly as upstream's fast_sampling/inference_deis.py calls its U-Net: with the respaced index
    k (N-1, ..., 0) as the timestep instead of the timestep k stands for. Everything else is DeisIPNDM's. Kept to
    measure what upstream's sampler produces as shipped (its U-Net never saw the timesteps 0..N-1 for these noise
    levels), beside the same solver given the timesteps it was trained on."""

    name: ClassVar[str] = "deis_ipndm_as_shipped"

    @property
    def unet_timesteps(self) -> tuple[int, ...]:
        return tuple(reversed(range(self.steps)))


SAMPLERS: dict[str, type] = {cls.name: cls for cls in (DDPM, DeisIPNDM, DeisIPNDMAsShipped, DDIM, DPMSolverPP2M)}


def accepted_steps(name: str, timesteps: int) -> range:
    """The step counts sampler `name` takes on a `timesteps`-step schedule."""
    return _sampler_class(name).accepted_steps(timesteps)


def build_sampler(name: str, diffusion: GaussianDiffusion, steps: int) -> Sampler:
    """Sampler `name` (a key of SAMPLERS) for `diffusion`'s schedule at `steps` steps."""
    cls = _sampler_class(name)
    if cls is DDPM:
        return DDPM(diffusion, steps)
    return cls(schedule_of(diffusion), steps)


def _sampler_class(name: str) -> type:
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}: known are {', '.join(SAMPLERS)}")
    return SAMPLERS[name]


def sample_steps(sampler: Sampler, diffusion: GaussianDiffusion, condition: torch.Tensor,
                 generator: torch.Generator | None = None, max_steps: int | None = None,
                 denoise: Denoise | None = None) -> Iterator[tuple[int, torch.Tensor]]:
    """(t, x) over the sampler's steps from pure noise, as GaussianDiffusion.sample_steps (which `ddpm` is): x_T
    drawn first from `generator` in the layout of `condition`; `max_steps` stops early (timing runs)."""
    if isinstance(sampler, DDPM):
        yield from diffusion.sample_steps(condition, generator, max_steps, denoise)
        return
    shape = (condition.shape[0], diffusion.channels, *condition.shape[2:])
    x = torch.randn(shape, device=condition.device, generator=generator).to(
        memory_format=_memory_format_of(condition)
    )
    yield from itertools.islice(sampler.trajectory(x, condition, denoise or diffusion.denoise, generator), max_steps)
