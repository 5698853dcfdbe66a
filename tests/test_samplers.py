"""The samplers (medddpm.samplers): the respacing and upstream's iPNDM grid and coefficients pinned to values read
from upstream, each solver's update against its paper's formula written out by hand on a small schedule in
float64, convergence to the known probability-flow solution of Gaussian data and the solvers' orders, the clamp,
and what a caller relies on (the DDPM chain itself, x_T drawn as GaussianDiffusion draws it, dtype and memory
format kept, no host synchronisation, no U-Net output kept across evaluations)."""

import math

import numpy as np
import pytest
import torch
from medddpm.diffusion import GaussianDiffusion
from medddpm.samplers import (
    DDIM,
    SAMPLERS,
    DeisIPNDM,
    DPMSolverPP2M,
    accepted_steps,
    build_sampler,
    sample_steps,
    schedule_of,
    spaced_timesteps,
)
from torch import nn
from torch.overrides import TorchFunctionMode

ODE_SOLVERS = (DDIM, DeisIPNDM, DPMSolverPP2M)
T = 250


@pytest.fixture(scope="module")
def diffusion():
    """The paper's 250-step diffusion; the denoiser is never called (every test passes its own noise function)."""
    return GaussianDiffusion(nn.Identity(), timesteps=T, channels=1)


@pytest.fixture(scope="module")
def schedule(diffusion):
    return schedule_of(diffusion)


def run(sampler, x, denoise, generator=None):
    """Every state the sampler yields, from x."""
    return [state for _, state in sampler.trajectory(x, None, denoise, generator)]


# -- the respacing and upstream's iPNDM --------------------------------------------------------------------------

def test_spaced_timesteps_are_upstreams_respacing():
    # upstream's space_timesteps(250, "10") (fast_sampling/guided_diffusion/respace.py), sorted
    assert spaced_timesteps(250, 10) == (0, 28, 55, 83, 111, 138, 166, 194, 221, 249)
    # its running sum of the stride 12.45 reaches 124.50000000000001 at the 11th of 21: upstream takes 125
    assert spaced_timesteps(250, 21)[10] == 125
    assert spaced_timesteps(250, 2) == (0, 249)
    assert spaced_timesteps(250, 250) == tuple(range(250))


def test_schedule_is_the_diffusions_in_float64(diffusion, schedule):
    assert schedule.dtype == np.float64 and schedule.shape == (T,)
    np.testing.assert_allclose(schedule, diffusion.alphas_cumprod.double().numpy(), rtol=1e-6)


def test_deis_ipndm_at_ten_steps_has_upstreams_grid_and_coefficients(schedule):
    """Read from upstream: th_deis's DisVPSDE built on the alphas_cumprod of upstream's make_diffusion(..., 250, 10)
    (SpacedDiffusion over space_timesteps(250, "10")) with this cosine schedule's betas, then
    get_rev_timesteps(10, "uniform") = [9, 8, ..., 1, 0, 0] (respaced indices, here as timesteps) and
    get_ipndm_coef of that grid, run with jax in float64 and printed to 16 digits. The first row's 549.17 is
    sqrt(alpha_bar(221) / 1e-7): upstream clips alpha_bar(249) = 3.9e-8 to 1e-7."""
    sampler = DeisIPNDM(schedule, 10)
    assert sampler.timesteps == (249, 221, 194, 166, 138, 111, 83, 55, 28, 0)
    upstream = [
        [549.1664273256824, -548.181594493944, 0.0, 0.0, 0.0],
        [1.935846017419214, -1.4469519190653917, 0.4823173063551306, 0.0, 0.0],
        [1.471316630065166, -0.9901081520452114, 0.6887708883792776, -0.21524090261852422, 0.0],
        [1.289952149024429, -0.8046192323253882, 0.8631369946763254, -0.5412893017461702, 0.13166496528960897],
        [1.1880431665617461, -0.6017195320720344, 0.6454809525863642, -0.4047931397575504, 0.098463196157242],
        [1.134244093214294, -0.5250911534855441, 0.5632796010117656, -0.3532431396175479, 0.08592400693399814],
        [1.0879710646007579, -0.4630335299813879, 0.4967086957982161, -0.31149528380566094, 0.07576912308786349],
        [1.0492140784860169, -0.41083009008915555, 0.4407086420956396, -0.2763766060599774, 0.0672267420145891],
        [1.018786254377727, -0.4154897945890416, 0.4457072341955174, -0.27951131635990073, 0.06798923911457046],
        [1.0, 0.0, 0.0, 0.0, 0.0],
    ]
    np.testing.assert_allclose(np.array(sampler.coefficients), np.array(upstream), rtol=1e-12, atol=1e-15)


# -- each update against its formula, by hand, in float64 -----------------------------------------------------

ALPHAS_4 = [0.9, 0.6, 0.3, 0.1]


def linear_eps(x, condition, t):
    return 0.5 * x + 0.05 * t.to(x.dtype).reshape(-1, 1, 1, 1, 1)


def volume(*values):
    return torch.tensor(values, dtype=torch.float64).reshape(len(values), 1, 1, 1, 1)


def test_ddim_two_steps_by_hand():
    """T = 4, 2 steps: t = 3 -> 0 -> data. DDIM (eta = 0): x' = sqrt(a') x0 + sqrt(1 - a') eps, x0 from eps."""
    start = [0.3, -0.2]
    sampler = DDIM(ALPHAS_4, 2)
    assert sampler.timesteps == (3, 0)
    states = run(sampler, volume(*start), linear_eps)
    for item, x in enumerate(start):
        a3, a0 = 0.1, 0.9
        eps = 0.5 * x + 0.05 * 3
        x0 = (x - math.sqrt(1 - a3) * eps) / math.sqrt(a3)
        x1 = math.sqrt(a0) * x0 + math.sqrt(1 - a0) * eps
        eps1 = 0.5 * x1
        final = (x1 - math.sqrt(1 - a0) * eps1) / math.sqrt(a0)
        assert abs(x0) < 1 and abs(final) < 1  # the clamp does not bind here
        assert states[0][item].item() == pytest.approx(x1, rel=1e-14)
        assert states[1][item].item() == pytest.approx(final, rel=1e-14)


def test_dpm_solver_pp_2m_three_steps_by_hand():
    """T = 4, 3 steps: t = 3 -> 2 (first order) -> 0 (second order, Lu et al. 2022 Algorithm 2) -> data."""
    start = [0.3, -0.2]
    sampler = DPMSolverPP2M(ALPHAS_4, 3)
    assert sampler.timesteps == (3, 2, 0)  # 1.5 rounds half to even
    states = run(sampler, volume(*start), linear_eps)

    def alpha(a):
        return math.sqrt(a)

    def sigma(a):
        return math.sqrt(1 - a)

    def lam(a):
        return math.log(alpha(a) / sigma(a))

    for item, x in enumerate(start):
        a3, a2, a0 = 0.1, 0.3, 0.9
        d3 = (x - sigma(a3) * (0.5 * x + 0.15)) / alpha(a3)
        h = lam(a2) - lam(a3)
        x2 = sigma(a2) / sigma(a3) * x - alpha(a2) * (math.exp(-h) - 1) * d3
        d2 = (x2 - sigma(a2) * (0.5 * x2 + 0.1)) / alpha(a2)
        h, h_prev = lam(a0) - lam(a2), h
        r = h_prev / h
        x0_state = sigma(a0) / sigma(a2) * x2 - alpha(a0) * (math.exp(-h) - 1) * ((1 + 1 / (2 * r)) * d2 - d3 / (2 * r))
        final = (x0_state - sigma(a0) * 0.5 * x0_state) / alpha(a0)
        assert max(abs(d3), abs(d2), abs(final)) < 1
        assert [s[item].item() for s in states] == pytest.approx([x2, x0_state, final], rel=1e-13)


def test_deis_ipndm_six_steps_by_hand():
    """T = 6, 6 steps: the grid k = 5, 4, 3, 2, 1, 0, 0 and the Adams-Bashforth orders 1, 2, 3, 4, 4, then the
    null step, on x' = sqrt(a'/a) x + (sqrt(1 - a') - sqrt(a'/a) sqrt(1 - a)) sum_j w_j eps_j."""
    alphas = [0.95, 0.8, 0.6, 0.4, 0.2, 0.05]
    weights = [[1], [3 / 2, -1 / 2], [23 / 12, -16 / 12, 5 / 12]] + [[55 / 24, -59 / 24, 37 / 24, -9 / 24]] * 3
    grid = [5, 4, 3, 2, 1, 0, 0]

    def eps_of(x, t):
        return 0.4 * x + 0.02 * t

    start = [0.3, -0.1]
    sampler = DeisIPNDM(alphas, 6)
    assert sampler.timesteps == (5, 4, 3, 2, 1, 0)
    states = run(sampler, volume(*start), lambda x, c, t: 0.4 * x + 0.02 * t.to(x.dtype).reshape(-1, 1, 1, 1, 1))
    for item, x in enumerate(start):
        history, expected = [], []
        for i in range(6):
            a, a_next = alphas[grid[i]], alphas[grid[i + 1]]
            eps = eps_of(x, grid[i])
            assert abs((x - math.sqrt(1 - a) * eps) / math.sqrt(a)) < 1  # so eps is its own clamped rederivation
            history.insert(0, eps)
            keep = math.sqrt(a_next / a)
            x = keep * x + (math.sqrt(1 - a_next) - keep * math.sqrt(1 - a)) * sum(
                w * e for w, e in zip(weights[i], history)
            )
            expected.append(x)
        assert expected[-1] == expected[-2]
        assert [s[item].item() for s in states] == pytest.approx(expected, rel=1e-13)


@pytest.mark.parametrize("solver", ODE_SOLVERS)
def test_first_step_clamps_x0_and_derives_the_noise_again(solver):
    """A noise prediction whose x0 lies outside [-1, 1]: every solver's first step is then DDIM's with x0 clamped
    and the noise derived again from it (upstream's p_sample, its predict_eps, guided-diffusion's DDIM)."""
    start = [0.5, -0.5, 0.05]
    sampler = solver(ALPHAS_4, 4)
    first = run(sampler, volume(*start), lambda x, c, t: -4.0 * x)[0]
    a, a_next = 0.1, ALPHAS_4[sampler.timesteps[1]]
    for item, x in enumerate(start):
        x0 = (x + math.sqrt(1 - a) * 4.0 * x) / math.sqrt(a)
        clamped = max(-1.0, min(1.0, x0))
        eps = (x - math.sqrt(a) * clamped) / math.sqrt(1 - a)
        assert first[item].item() == pytest.approx(math.sqrt(a_next) * clamped + math.sqrt(1 - a_next) * eps,
                                                   rel=1e-13)
        assert (abs(x0) > 1) == (item < 2)  # two clamped, one not


def test_the_last_ddim_and_dpm_solver_steps_return_the_clamped_x0():
    sampler_inputs = []

    def recording(x, c, t):
        sampler_inputs.append(x.clone())
        return -4.0 * x

    for solver in (DDIM, DPMSolverPP2M):
        sampler_inputs.clear()
        final = run(solver(ALPHAS_4, 3), volume(0.4, -0.01), recording)[-1]
        x = sampler_inputs[-1]
        x0 = (x + math.sqrt(1 - 0.9) * 4.0 * x) / math.sqrt(0.9)
        torch.testing.assert_close(final, x0.clamp(-1, 1), rtol=1e-14, atol=0)


# -- a problem with a known answer: Gaussian data ----------------------------------------------------------------

MU, S = 0.2, 0.2


class GaussianNoise:
    """The exact noise prediction for data N(MU, S^2): eps*(x, t) = sqrt(1-a) (x - sqrt(a) MU) / (a S^2 + 1 - a).
    Records the largest |x0| it implies, to show the clamp never binds."""

    def __init__(self, alphas_cumprod):
        self.alphas = torch.tensor(alphas_cumprod, dtype=torch.float64)
        self.largest_x0 = 0.0

    def __call__(self, x, condition, t):
        a = self.alphas[t].reshape(-1, 1, 1, 1, 1)
        eps = (1 - a).sqrt() * (x - a.sqrt() * MU) / (a * S**2 + 1 - a)
        self.largest_x0 = max(self.largest_x0, ((x - (1 - a).sqrt() * eps) / a.sqrt()).abs().max().item())
        return eps


def flow_solution(x_T, a_T, a_end):
    """The probability-flow ODE keeps z = (x - sqrt(a) MU) / sqrt(a S^2 + 1 - a) along a path: its state at a_end."""
    z = (x_T - math.sqrt(a_T) * MU) / math.sqrt(a_T * S**2 + 1 - a_T)
    return math.sqrt(a_end) * MU + math.sqrt(a_end * S**2 + 1 - a_end) * z


def gaussian_errors(solver, schedule, step_counts):
    """Largest error of the final state against the exact solution, at each step count. The x_T span +-3 sd;
    deis_ipndm ends at t = 0 (alpha_bar[0]), the others at the data."""
    x_T = torch.linspace(-3, 3, 48, dtype=torch.float64).reshape(2, 1, 2, 3, 4)
    a_end = schedule[0] if solver is DeisIPNDM else 1.0
    exact = flow_solution(x_T, schedule[-1], a_end)
    noise = GaussianNoise(schedule)
    errors = [(run(solver(schedule, steps), x_T, noise)[-1] - exact).abs().max().item() for steps in step_counts]
    assert noise.largest_x0 < 0.99
    return errors


# error bounds at 50 steps, above what the solvers reach (0.037, 0.022, 0.00072)
BOUND_AT_50 = {DDIM: 0.05, DPMSolverPP2M: 0.03, DeisIPNDM: 1.2e-3}


@pytest.mark.parametrize("solver", ODE_SOLVERS)
def test_solvers_converge_to_the_flow_of_gaussian_data(solver, schedule):
    ten, twenty_five, fifty, all_steps = gaussian_errors(solver, schedule, (10, 25, 50, 250))
    assert ten > twenty_five > fifty
    assert fifty < BOUND_AT_50[solver]
    assert all_steps < 1e-2


def test_dpm_solver_and_ipndm_errors_fall_faster_than_ddims(schedule):
    """The measured order from 25 to 50 steps: about 1 for DDIM (first order), steeper for the multistep
    solvers (1.64 for DPM-Solver++ 2M, 2.3 for iPNDM here)."""
    slopes = {}
    for solver in ODE_SOLVERS:
        at_25, at_50 = gaussian_errors(solver, schedule, (25, 50))
        slopes[solver] = math.log(at_50 / at_25) / math.log(2)
    assert -1.15 < slopes[DDIM] < -0.85
    assert slopes[DPMSolverPP2M] < slopes[DDIM] - 0.5
    assert slopes[DeisIPNDM] < slopes[DDIM] - 0.5


# -- the registry ------------------------------------------------------------------------------------------------

def test_registry_names_and_step_counts(diffusion):
    assert set(SAMPLERS) == {"ddpm", "deis_ipndm", "deis_ipndm_as_shipped", "ddim", "dpm_solver_pp_2m"}
    assert accepted_steps("ddpm", T) == range(250, 251)
    assert accepted_steps("ddim", T) == range(2, 251)
    for name in SAMPLERS:
        steps = T if name == "ddpm" else 25
        sampler = build_sampler(name, diffusion, steps)
        assert sampler.name == name and sampler.evaluations == steps == len(sampler.timesteps)
        assert sampler.timesteps[0] == T - 1 and sampler.timesteps[-1] == 0


@pytest.mark.parametrize("name, steps, message", [
    ("ddpm", 10, "sampler 'ddpm' takes 250 to 250 steps, not 10"),
    ("ddim", 1, "sampler 'ddim' takes 2 to 250 steps, not 1"),
    ("deis_ipndm", 251, "sampler 'deis_ipndm' takes 2 to 250 steps, not 251"),
    ("plms", 10, "unknown sampler 'plms': known are ddpm, deis_ipndm, deis_ipndm_as_shipped, ddim, dpm_solver_pp_2m"),
])
def test_bad_sampler_or_step_count_is_one_clear_error(diffusion, name, steps, message):
    with pytest.raises(ValueError) as error:
        build_sampler(name, diffusion, steps)
    assert str(error.value) == message


# -- what the caller relies on -----------------------------------------------------------------------------------

def test_ddpm_is_the_diffusions_chain(diffusion):
    condition = torch.zeros(1, 2, 2, 2, 2)

    def eps(x, c, t):
        return torch.tanh(x) * (1 + t.reshape(-1, 1, 1, 1, 1) / T)

    chain = [x for _, x in diffusion.sample_steps(condition, torch.Generator().manual_seed(3), denoise=eps)]
    generator = torch.Generator().manual_seed(3)
    x_T = torch.randn((1, 1, 2, 2, 2), generator=generator)
    ours = run(build_sampler("ddpm", diffusion, T), x_T, eps, generator)
    assert len(ours) == T
    for a, b in zip(chain, ours):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    steps = [step for step, _ in sample_steps(build_sampler("ddpm", diffusion, T), diffusion, condition,
                                              torch.Generator().manual_seed(3), max_steps=4, denoise=eps)]
    assert steps == [249, 248, 247, 246]


def test_fast_samplers_draw_x_T_as_the_diffusion_does(diffusion):
    """The first U-Net input of `sample_steps` is the x_T of GaussianDiffusion.sample_steps (same generator, the
    layout of the condition), and `max_steps` stops after that many evaluations."""
    condition = torch.zeros(2, 2, 3, 3, 3).to(memory_format=torch.channels_last_3d)
    seen = []

    def eps(x, c, t):
        seen.append(x.clone())
        return torch.tanh(x)

    next(iter(diffusion.sample_steps(condition, torch.Generator().manual_seed(5), denoise=eps)))
    sampler = build_sampler("dpm_solver_pp_2m", diffusion, 10)
    steps = [step for step, _ in sample_steps(sampler, diffusion, condition, torch.Generator().manual_seed(5), 3, eps)]
    assert steps == [249, 221, 194] and len(seen) == 4
    torch.testing.assert_close(seen[1], seen[0], rtol=0, atol=0)
    assert seen[1].is_contiguous(memory_format=torch.channels_last_3d)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_every_sampler_gives_the_unet_the_condition_and_one_timestep_per_sample(name):
    """What the U-Net is given at each step of `sample_steps`, as the jobs call it: x_T drawn from the generator in
    the condition's batch and layout with the diffusion's channels (two here: with one channel a tensor is both
    contiguous and channels-last, and the batch differs from the channel counts), the condition itself, and the
    step's timestep as a LongTensor of one entry per sample."""
    diffusion = GaussianDiffusion(nn.Identity(), timesteps=T, channels=2)
    condition = torch.randn(3, 4, 2, 3, 4).to(memory_format=torch.channels_last_3d)
    sampler = build_sampler(name, diffusion, T if name == "ddpm" else 10)
    calls = []

    def eps(x, c, t):
        calls.append((x.clone(memory_format=torch.preserve_format), c, t))
        return torch.tanh(x)

    list(sample_steps(sampler, diffusion, condition, torch.Generator().manual_seed(7), max_steps=3, denoise=eps))
    assert len(calls) == 3
    torch.testing.assert_close(calls[0][0], torch.randn(3, 2, 2, 3, 4, generator=torch.Generator().manual_seed(7)),
                               rtol=0, atol=0)
    for (x, c, t), step in zip(calls, getattr(sampler, "unet_timesteps", sampler.timesteps)[:3]):
        assert x.shape == (3, 2, 2, 3, 4)
        assert x.is_contiguous(memory_format=torch.channels_last_3d) and not x.is_contiguous()
        assert c is condition
        assert t.dtype == torch.long and t.device == x.device and t.tolist() == [step] * 3
    # The sampler's own trajectory too (for ddpm sample_steps takes the diffusion's chain instead).
    calls.clear()
    next(iter(sampler.trajectory(torch.zeros(3, 2, 2, 3, 4), condition, eps, torch.Generator().manual_seed(0))))
    assert calls[0][1] is condition


def test_the_solvers_compute_in_float64_from_a_float32_schedule(schedule):
    """The schedule is taken in float64 whatever it comes in (the diffusion's buffers are float32): the coefficients
    from a float32 copy are those of the same values in float64."""
    single = schedule.astype(np.float32)
    for solver in ODE_SOLVERS:
        taken, exact = solver(single, 10), solver(single.astype(np.float64), 10)
        assert taken.alphas_cumprod.dtype == np.float64
        assert taken._x0_from_x == exact._x0_from_x and taken._x0_from_eps == exact._x0_from_eps


def test_deis_ipndm_clips_alpha_bar_below_one_as_upstreams_vp_sde():
    """alpha_bar is clipped to 1 - 1e-7 at the top as at the bottom (the cosine schedule of 250 steps never reaches
    it; a schedule of two steps with alpha_bar = 1 - 1e-9 at t = 0 does): the first step's coefficients by hand,
    with a' = 1 - 1e-7, and the last step's (from k = 0 to k = 0) keeping x and adding no noise."""
    solver = DeisIPNDM([1 - 1e-9, 0.5], 2)
    a, a_next = 0.5, 1 - 1e-7
    keep = math.sqrt(a_next / a)
    assert solver.coefficients[0] == pytest.approx((keep, math.sqrt(1 - a_next) - keep * math.sqrt(1 - a), 0, 0, 0),
                                                   rel=1e-12, abs=0)
    assert solver.coefficients[1] == (1.0, 0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("name", list(SAMPLERS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_and_channels_last_3d_kept(diffusion, name, dtype):
    """channels_last_3d in, channels_last_3d out at every step, in the input's dtype, also where the noise
    prediction comes back contiguous (the solvers; p_sample gets it in the input's layout)."""
    x_T = torch.randn(2, 3, 2, 3, 4, dtype=dtype).to(memory_format=torch.channels_last_3d)
    contiguous = name != "ddpm"
    sampler = build_sampler(name, diffusion, T if name == "ddpm" else 10)
    states = run(sampler, x_T, lambda x, c, t: torch.tanh(x).contiguous() if contiguous else torch.tanh(x),
                 torch.Generator().manual_seed(0))
    for x in states:
        assert x.dtype == dtype and x.is_contiguous(memory_format=torch.channels_last_3d) and not x.is_contiguous()


@pytest.mark.parametrize("name", ["deis_ipndm", "dpm_solver_pp_2m", "ddim"])
def test_an_evaluation_may_overwrite_its_last_output(schedule, name):
    """A CUDA graph's replay writes every output into one static buffer: the solvers keep only what they computed
    from it, so the trajectory is the same as with a fresh output per evaluation."""
    x_T = torch.randn(2, 1, 3, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    static = torch.empty_like(x_T)

    def eps(x, c, t):
        return torch.tanh(x) * (1 + t.reshape(-1, 1, 1, 1, 1) / T)

    def overwriting(x, c, t):
        return static.copy_(eps(x, c, t))

    fresh = run(SAMPLERS[name](schedule, 10), x_T, eps)
    shared = run(SAMPLERS[name](schedule, 10), x_T, overwriting)
    for a, b in zip(fresh, shared):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


SYNCING = {"item", "__bool__", "__float__", "__int__", "__index__", "tolist", "numpy", "cpu", "nonzero"}


class SyncWatch(TorchFunctionMode):
    """Records every tensor operation that hands a value to the host (on a GPU: a synchronisation)."""

    def __init__(self):
        super().__init__()
        self.syncing = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in SYNCING:
            self.syncing.append(name)
        return func(*args, **(kwargs or {}))


def test_sync_watch_sees_host_reads():
    x = torch.ones(3)
    with SyncWatch() as watch:
        if (x > 0).all():
            x.sum().item()
    assert watch.syncing == ["__bool__", "item"]


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_steps_read_nothing_back_to_the_host(diffusion, name):
    sampler = build_sampler(name, diffusion, T if name == "ddpm" else 10)
    x_T = torch.randn(1, 1, 2, 2, 2)
    with SyncWatch() as watch:
        run(sampler, x_T, lambda x, c, t: torch.tanh(x), torch.Generator().manual_seed(0))
    assert watch.syncing == []


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_cuda_steps_do_not_synchronise_and_match_the_cpu(diffusion, name):
    cuda = torch.device("cuda")
    sampler = build_sampler(name, diffusion.to(cuda), T if name == "ddpm" else 10)
    x_T = torch.randn(2, 1, 4, 4, 4, device=cuda).to(memory_format=torch.channels_last_3d)

    def eps(x, c, t):
        return torch.tanh(x) * (1 + t.reshape(-1, 1, 1, 1, 1) / T)

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        states = run(sampler, x_T, eps, torch.Generator(device=cuda).manual_seed(0))
    finally:
        torch.cuda.set_sync_debug_mode("default")
        diffusion.to("cpu")
    assert states[-1].is_contiguous(memory_format=torch.channels_last_3d)
    if name != "ddpm":  # the chain's noise comes from the CUDA generator
        cpu = run(build_sampler(name, diffusion, 10), x_T.cpu(), eps)
        torch.testing.assert_close(states[-1].cpu(), cpu[-1], rtol=1e-4, atol=1e-4)


def test_the_as_shipped_sampler_gives_the_unet_upstreams_respaced_index(schedule):
    """deis_ipndm_as_shipped is deis_ipndm with the U-Net called at k = N-1, ..., 0 (upstream's eps_fn passes the
    index of its respaced diffusion), its coefficients the same."""
    from medddpm.samplers import DeisIPNDMAsShipped

    shipped, fixed = DeisIPNDMAsShipped(schedule, 10), DeisIPNDM(schedule, 10)
    assert shipped.unet_timesteps == (9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
    assert fixed.unet_timesteps == fixed.timesteps == (249, 221, 194, 166, 138, 111, 83, 55, 28, 0)
    assert shipped.coefficients == fixed.coefficients and shipped.timesteps == fixed.timesteps
    seen = []

    def eps(x, condition, t):
        seen.append(int(t[0]))
        return torch.zeros_like(x)

    run(shipped, torch.zeros(1, 1, 2, 2, 2, dtype=torch.float64), eps)
    assert seen == list(range(9, -1, -1))
    assert SAMPLERS["deis_ipndm_as_shipped"] is DeisIPNDMAsShipped
