"""The diffusion's numbers against reference values computed here, in float64, from the formulas of the papers.

Ho et al. 2020 (DDPM): q(x_t | x_0) = N(sqrt(abar_t) x_0, (1 - abar_t) I); the posterior q(x_{t-1} | x_t, x_0) is the
product of the prior N(sqrt(abar_{t-1}) x_0, 1 - abar_{t-1}) and the likelihood N(x_t; sqrt(alpha_t) x_{t-1}, beta_t),
so its mean and variance come here from precision-weighting those two Gaussians, not from the library's closed-form
coefficients. Nichol & Dhariwal 2021: abar(t) = f(t) / f(0), f(t) = cos^2((t / T + s) / (1 + s) * pi / 2), beta_t =
1 - abar_t / abar_{t-1} clipped at 0.999, s = 0.008. Everything is computed with math and plain loops, one timestep at
a time, so that a wrong offset, a square root dropped or a standard deviation used as a variance shows as a number.
The denoiser is a fixed function of its input here: the tests check the diffusion, not the U-Net.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from medddpm.diffusion import GaussianDiffusion, cosine_beta_schedule
from medddpm.placement import Placement
from config_settings import configured
from medddpm.settings import TrainSettings
from medddpm.ema import EMA
from medddpm.training import Trainer
from medddpm.variants import Variant

S = 0.008
CLIP = 0.999
STEPS = [(10, t) for t in (0, 1, 5, 9)] + [(250, t) for t in (0, 1, 125, 248, 249)]


def reference_abar(timesteps: int, s: float = S) -> list[float]:
    """abar_0 .. abar_{T-1}, from the cosine f of Nichol & Dhariwal with the betas clipped at 0.999."""
    f = [math.cos((k / timesteps + s) / (1 + s) * math.pi / 2) ** 2 for k in range(timesteps + 1)]
    abar, product = [], 1.0
    for k in range(1, timesteps + 1):
        beta = min(1.0 - (f[k] / f[0]) / (f[k - 1] / f[0]), CLIP)
        product *= 1.0 - beta
        abar.append(product)
    return abar


def reference_posterior(timesteps: int, t: int, x0: np.ndarray, xt: np.ndarray) -> tuple[np.ndarray, float]:
    """(mean, variance) of q(x_{t-1} | x_t, x_0) as the product of the prior over x_{t-1} given x_0 and the
    likelihood of x_t given x_{t-1}. At t = 0 the prior is a point mass at x_0: mean x_0, variance 0."""
    abar = reference_abar(timesteps)
    if t == 0:
        return x0.copy(), 0.0
    beta = 1.0 - abar[t] / abar[t - 1]
    alpha = 1.0 - beta
    prior_mean, prior_var = math.sqrt(abar[t - 1]) * x0, 1.0 - abar[t - 1]
    # x_t = sqrt(alpha) x_{t-1} + sqrt(beta) eps, as a Gaussian in x_{t-1}: mean x_t / sqrt(alpha), var beta / alpha.
    like_mean, like_var = xt / math.sqrt(alpha), beta / alpha
    precision = 1.0 / prior_var + 1.0 / like_var
    return (prior_mean / prior_var + like_mean / like_var) / precision, 1.0 / precision


class FixedDenoiser(nn.Module):
    """eps_hat = 0.5 x + 0.25 (first condition channel) - 0.1 (second) + 0.01 t: known, and different for every
    input, so that the image/condition concatenation order and the timestep passed both matter."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, inputs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        self.calls.append((inputs.detach().clone(), t.detach().clone()))
        return reference_eps(inputs.double(), t).to(inputs.dtype)


def reference_eps(inputs, t):
    x, c0, c1 = inputs[:, :1], inputs[:, 1:2], inputs[:, 2:3]
    return 0.5 * x + 0.25 * c0 - 0.1 * c1 + 0.01 * t.reshape(-1, 1, 1, 1, 1).to(inputs.dtype)


def diffusion(timesteps: int) -> GaussianDiffusion:
    return GaussianDiffusion(FixedDenoiser(), timesteps=timesteps, channels=1)


def volumes(seed: int, batch: int = 1, shape=(3, 2, 4)) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, 1, *shape, generator=generator) * 2 - 1
    condition = (torch.rand(batch, 2, *shape, generator=generator) > 0.5).float() * 2 - 1
    return x, condition


# --- the schedule -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("timesteps", [10, 250, 1000])
def test_cosine_schedule_is_nichol_and_dhariwals_with_offset_and_clip(timesteps):
    betas = cosine_beta_schedule(timesteps)
    abar = reference_abar(timesteps)
    expected = [1.0 - abar[t] / (abar[t - 1] if t > 0 else 1.0) for t in range(timesteps)]
    assert betas.dtype == np.float64 and betas.shape == (timesteps,)
    np.testing.assert_allclose(betas, expected, rtol=1e-10, atol=1e-15)
    assert betas[-1] == CLIP  # abar_T = cos^2(pi / 2) = 0: the last beta is the clip


def test_the_offset_s_is_what_keeps_the_first_beta_away_from_zero():
    """With s = 0.008 the first of 250 betas is 1 - cos^2((1/250 + s)/(1 + s) pi/2) / cos^2(s/(1 + s) pi/2)."""
    first = 1 - math.cos((1 / 250 + S) / (1 + S) * math.pi / 2) ** 2 / math.cos(S / (1 + S) * math.pi / 2) ** 2
    assert cosine_beta_schedule(250)[0] == pytest.approx(first, rel=1e-12)
    without_offset = 1 - math.cos(1 / 250 * math.pi / 2) ** 2  # 3.9e-5
    assert 4.5 * without_offset < first < 5.5 * without_offset  # 1.9e-4
    assert cosine_beta_schedule(250, s=0.08)[0] == pytest.approx(
        1 - math.cos((1 / 250 + 0.08) / 1.08 * math.pi / 2) ** 2 / math.cos(0.08 / 1.08 * math.pi / 2) ** 2,
        rel=1e-12)


@pytest.mark.parametrize("timesteps", [10, 250])
def test_buffers_hold_the_papers_quantities(timesteps):
    model = diffusion(timesteps)
    abar = np.array(reference_abar(timesteps))
    abar_prev = np.append(1.0, abar[:-1])
    betas = 1 - abar / abar_prev
    variance = np.array([reference_posterior(timesteps, t, np.zeros(1), np.zeros(1))[1] for t in range(timesteps)])
    expected = {
        "betas": betas,
        "alphas_cumprod": abar,
        "sqrt_alphas_cumprod": abar ** 0.5,
        "sqrt_one_minus_alphas_cumprod": (1 - abar) ** 0.5,
        "sqrt_recip_alphas_cumprod": abar ** -0.5,
        "sqrt_recipm1_alphas_cumprod": (1 / abar - 1) ** 0.5,
        # log of the posterior variance, clipped at 1e-20 where it is zero (t = 0)
        "posterior_log_variance_clipped": np.log(np.maximum(variance, 1e-20)),
    }
    for name, values in expected.items():
        buffer = getattr(model, name)
        assert buffer.dtype == torch.float32, name
        np.testing.assert_allclose(buffer.double().numpy(), values, rtol=2e-6, atol=1e-30, err_msg=name)
    assert model.posterior_log_variance_clipped[0].item() == pytest.approx(math.log(1e-20), rel=1e-6)


# --- forward process --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("timesteps", [10, 250])
def test_q_sample_is_sqrt_abar_x0_plus_sqrt_one_minus_abar_noise(timesteps):
    model = diffusion(timesteps)
    x0, _ = volumes(0, batch=3)
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(1))
    t = torch.tensor([0, timesteps // 2, timesteps - 1])  # one timestep per batch element
    abar = reference_abar(timesteps)
    x0_64, noise_64 = x0.double().numpy(), noise.double().numpy()
    expected = np.stack([math.sqrt(abar[k]) * x0_64[i] + math.sqrt(1 - abar[k]) * noise_64[i]
                         for i, k in enumerate(t.tolist())])
    np.testing.assert_allclose(model.q_sample(x0, t, noise).double().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_loss_is_the_l1_between_the_drawn_noise_and_the_prediction_at_the_drawn_step():
    timesteps = 10
    model = diffusion(timesteps)
    x0, condition = volumes(2, batch=2)
    loss = model.loss(x0, condition, torch.Generator().manual_seed(7))
    # The same draws, in the same order: the steps first, then the noise.
    generator = torch.Generator().manual_seed(7)
    t = torch.randint(0, timesteps, (2,), generator=generator)
    noise = torch.randn(x0.shape, generator=generator).double()
    abar = reference_abar(timesteps)
    noisy = torch.stack([math.sqrt(abar[k]) * x0[i].double() + math.sqrt(1 - abar[k]) * noise[i]
                         for i, k in enumerate(t.tolist())])
    (inputs, t_seen), = model.denoiser.calls
    assert torch.equal(t_seen, t)
    torch.testing.assert_close(inputs.double(), torch.cat([noisy, condition.double()], dim=1), rtol=1e-5, atol=1e-6)
    expected = (noise - reference_eps(torch.cat([noisy, condition.double()], dim=1), t)).abs().mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


# --- reverse process --------------------------------------------------------------------------------------------


def reference_p_sample(timesteps: int, t: int, x: torch.Tensor, condition: torch.Tensor, noise: torch.Tensor | None):
    """x_{t-1}: eps from the denoiser, x_0 = (x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t) clamped to [-1, 1], then the
    posterior mean plus its standard deviation times the noise (none at t = 0)."""
    abar = reference_abar(timesteps)
    x64 = x.double()
    eps = reference_eps(torch.cat([x64, condition.double()], dim=1), torch.tensor([t]))
    x0 = ((x64 - math.sqrt(1 - abar[t]) * eps) / math.sqrt(abar[t])).clamp(-1, 1)
    mean, variance = reference_posterior(timesteps, t, x0.numpy(), x64.numpy())
    if t == 0:
        return mean
    return mean + math.sqrt(variance) * noise.double().numpy()


@pytest.mark.parametrize(("timesteps", "t"), STEPS, ids=[f"T{T}-t{t}" for T, t in STEPS])
def test_p_sample_is_the_posterior_mean_plus_its_standard_deviation_times_noise(timesteps, t):
    model = diffusion(timesteps)
    x0, condition = volumes(3)
    x = x0 * 1.7  # beyond [-1, 1], so that the clamp of the predicted x_0 acts somewhere
    got = model.p_sample(x, condition, t, torch.Generator().manual_seed(11))
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(11))
    expected = reference_p_sample(timesteps, t, x, condition, noise)
    np.testing.assert_allclose(got.double().numpy(), expected, rtol=1e-4, atol=2e-5)
    (inputs, t_seen), = model.denoiser.calls
    assert t_seen.tolist() == [t] and torch.equal(inputs, torch.cat([x, condition], dim=1))


def test_p_sample_gives_every_batch_element_the_step():
    model = diffusion(10)
    x, condition = volumes(12, batch=2)
    got = model.p_sample(x, condition, 6, torch.Generator().manual_seed(1))
    (inputs, t_seen), = model.denoiser.calls
    assert t_seen.tolist() == [6, 6] and t_seen.dtype == torch.long
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    for i in range(2):
        expected = reference_p_sample(10, 6, x[i:i + 1], condition[i:i + 1], noise[i:i + 1])
        np.testing.assert_allclose(got[i:i + 1].double().numpy(), expected, rtol=1e-4, atol=2e-5)


def test_sample_steps_evaluate_the_denoising_function_they_are_given():
    model = diffusion(4)
    _, condition = volumes(13)
    seen = []

    def denoise(x, cond, t):
        seen.append(int(t[0]))
        return torch.zeros_like(x)

    steps = list(model.sample_steps(condition, torch.Generator().manual_seed(0), denoise=denoise))
    assert seen == [3, 2, 1, 0] and not model.denoiser.calls
    assert len(steps) == 4


def test_memory_format_is_channels_last_only_for_channels_last_volumes():
    from medddpm.diffusion import _memory_format_of

    volume = torch.zeros(1, 2, 3, 4, 5)
    assert _memory_format_of(volume) == torch.contiguous_format
    assert _memory_format_of(volume.to(memory_format=torch.channels_last_3d)) == torch.channels_last_3d
    assert _memory_format_of(volume.transpose(2, 4)) == torch.contiguous_format  # strided, but not channels-last
    assert _memory_format_of(torch.zeros(2, 3, 4).transpose(0, 2)) == torch.contiguous_format


def test_p_sample_draws_no_noise_at_the_last_step():
    model = diffusion(10)
    x, condition = volumes(4)
    generator = torch.Generator().manual_seed(3)
    state = generator.get_state()
    model.p_sample(x, condition, 0, generator)
    assert torch.equal(generator.get_state(), state)


def test_sample_steps_run_the_reversed_chain_from_noise():
    timesteps = 5
    model = diffusion(timesteps)
    _, condition = volumes(5)
    steps = list(model.sample_steps(condition, torch.Generator().manual_seed(2)))
    assert [t for t, _ in steps] == [4, 3, 2, 1, 0]
    generator = torch.Generator().manual_seed(2)
    x = torch.randn((1, 1, *condition.shape[2:]), generator=generator)
    for t, got in steps:
        noise = torch.randn(x.shape, generator=generator) if t > 0 else None
        x = torch.from_numpy(reference_p_sample(timesteps, t, x, condition, noise)).float()
        np.testing.assert_allclose(got.numpy(), x.numpy(), rtol=1e-4, atol=1e-5)
    assert [t for t, _ in model.sample_steps(condition, max_steps=2)] == [4, 3]


class TwoChannels(nn.Module):
    def forward(self, inputs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return 0.5 * inputs[:, :2]


@pytest.mark.parametrize("layout", [torch.channels_last_3d, torch.contiguous_format])
def test_sampling_and_training_noise_keep_the_layout_of_the_input(layout):
    """Channels-last inputs get channels-last noise (and chains); a layout is only seen with two channels or more."""
    model = GaussianDiffusion(TwoChannels(), timesteps=3, channels=2)
    condition = torch.randn(2, 2, 2, 3, 4).to(memory_format=layout)
    for _, x in model.sample_steps(condition, torch.Generator().manual_seed(0)):
        assert x.shape == (2, 2, 2, 3, 4)
        assert x.is_contiguous(memory_format=layout)
        assert x.is_contiguous() == (layout == torch.contiguous_format)
    seen = []
    model.q_sample = lambda x_start, t, noise: seen.append(noise) or x_start
    model.loss(torch.randn(2, 2, 2, 3, 4).to(memory_format=layout), condition, torch.Generator().manual_seed(0))
    noise = seen[0]
    assert noise.is_contiguous(memory_format=layout) and noise.is_contiguous() == (layout == torch.contiguous_format)


def test_sample_channels_default_to_the_denoisers_output_channels():
    class Configured(FixedDenoiser):
        config = type("Config", (), {"out_channels": 4})()

    assert GaussianDiffusion(Configured(), timesteps=3).channels == 4
    assert GaussianDiffusion(FixedDenoiser(), timesteps=3).channels == 1
    assert GaussianDiffusion(Configured(), timesteps=3, channels=2).channels == 2


# --- EMA --------------------------------------------------------------------------------------------------------


class ConvDenoiser(nn.Module):
    """A trainable denoiser of the U-Net's signature: one 1x1x1 convolution of image and condition."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv3d(3, 1, 1)

    def forward(self, inputs: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return self.conv(inputs)


def linear(weight: list[list[float]], bias: list[float]) -> nn.Linear:
    layer = nn.Linear(len(weight[0]), len(weight))
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight))
        layer.bias.copy_(torch.tensor(bias))
    return layer


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("beta", [0.995, 0.9])
def test_ema_moves_the_average_by_one_minus_beta_towards_the_model(beta, foreach):
    average = linear([[1.0, -2.0], [0.5, 4.0]], [0.0, 10.0])
    current = linear([[3.0, 2.0], [-0.5, 0.0]], [1.0, -10.0])
    old = [p.detach().double().clone() for p in average.parameters()]
    new = [p.detach().double().clone() for p in current.parameters()]
    EMA(beta, foreach=foreach).update_model_average(average, current)
    for got, a, c in zip(average.parameters(), old, new):
        np.testing.assert_allclose(got.detach().double().numpy(), (beta * a + (1 - beta) * c).numpy(), rtol=1e-6)
    # The model itself is left as it was.
    for p, c in zip(current.parameters(), new):
        assert torch.equal(p.detach().double(), c)


def test_trainer_resets_the_ema_before_its_start_step_and_averages_every_n_steps_after():
    """ema_start_step 2, every 2 steps: step 0 copies the model, step 1 leaves the copy alone, step 2 averages."""
    torch.manual_seed(0)
    model = GaussianDiffusion(ConvDenoiser(), timesteps=4, channels=1)
    settings = configured(TrainSettings, "train", lr=0.1, gradient_accumulation=1, ema_decay=0.5, ema_update_every=2,
                          ema_start_step=2)
    x, condition = volumes(8, shape=(2, 2, 2))
    batches = iter([{"input": condition, "target": x}] * 10)
    trainer = Trainer(model, batches, Placement(Variant("b", False, False, False), torch.device("cpu")), settings,
                      torch.Generator().manual_seed(0))

    def weights(module):
        return [p.detach().clone() for p in module.parameters()]

    initial = weights(trainer.ema_model)
    trainer.step()  # step 0: reset to the model after Adam's step
    after_0 = weights(model)
    assert not all(torch.equal(a, b) for a, b in zip(initial, after_0))
    assert all(torch.equal(a, b) for a, b in zip(weights(trainer.ema_model), after_0))
    trainer.step()  # step 1: not an update step
    after_1 = weights(model)
    assert all(torch.equal(a, b) for a, b in zip(weights(trainer.ema_model), after_0))
    trainer.step()  # step 2: the average, 0.5 old + 0.5 new
    after_2 = weights(model)
    assert not all(torch.equal(a, b) for a, b in zip(after_1, after_2))
    for got, old, new in zip(weights(trainer.ema_model), after_0, after_2):
        torch.testing.assert_close(got, 0.5 * old + 0.5 * new)
    assert trainer.step_index == 3 and trainer.checkpoint()["step"] == 3


def test_gradient_accumulation_divides_each_micro_batch_loss():
    """Two micro-batches of the same batch, step and noise accumulate the gradient of one."""
    x, condition = volumes(9, shape=(2, 2, 2))
    grads = {}
    for accumulation in (1, 2):
        torch.manual_seed(1)
        model = GaussianDiffusion(ConvDenoiser(), timesteps=4, channels=1)
        loss = model.loss
        model.loss = lambda target, cond, generator: loss(target, cond, torch.Generator().manual_seed(5))
        settings = configured(TrainSettings, "train", lr=0.0, gradient_accumulation=accumulation)
        trainer = Trainer(model, iter([{"input": condition, "target": x}] * 4),
                          Placement(Variant("b", False, False, False), torch.device("cpu")), settings,
                          torch.Generator().manual_seed(0))
        trainer.optimizer.zero_grad = lambda: None  # keep the accumulated gradient for the check
        losses = trainer.step()
        assert len(losses) == accumulation and len(set(losses)) == 1 and losses[0] > 0
        grads[accumulation] = model.denoiser.conv.weight.grad.clone()
    assert grads[1].abs().sum() > 0
    torch.testing.assert_close(grads[2], grads[1])
