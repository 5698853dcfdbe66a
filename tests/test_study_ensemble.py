"""The quality study's training: the upsampling as shifted sums (the same function as F.interpolate), the seeds of a
variant trained together (ensemble.Ensemble) with the numbers of each seed trained alone, the rerun that checks
determinism, and on a GPU the CUDA-graph replay against the eager loop it replaces (bit for bit), for the study's
runs and for the training job's `cuda_graph_training`."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.nn.functional as F
from config_settings import config_section
from conftest import REPO, random_prepared_dataset

from medddpm import engine
from medddpm.build import ModelSpec
from medddpm.ensemble import Ensemble, deterministic_algorithms, determinism_state, weights_identical
from medddpm.runs import start_run
from medddpm.settings import DeviceSpec, TrainSettings, from_mapping
from medddpm.study import reference_of, study_run
from medddpm.switches import Variant
from medddpm.training import NonFiniteLoss
from medddpm.unet import Upsample, upsample_trilinear_x2

MODEL = {"in_channels": 3, "out_channels": 1, "base_width": 32, "channel_mult": [1, 2], "num_res_blocks": 1,
         "attention_downsample_rates": [2], "num_heads": 1, "dropout": 0.0}
TRAIN = {"lr": 1e-3, "gradient_accumulation": 2, "ema_decay": 0.9, "ema_update_every": 2, "ema_start_step": 2,
         "seed": 0}
CPU = DeviceSpec("cpu", "cpu", None, False)
GPU = DeviceSpec("gpu", "cuda", ".", False)
PAPER = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False}
on_gpu = pytest.mark.cuda


@pytest.fixture(autouse=True)
def determinism_restored():
    """deterministic_algorithms sets process-wide state: put it back after each test."""
    yield
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return random_prepared_dataset(tmp_path_factory, (8, 8, 8), cases=4, heldout=1, seed=3, tumour_start=2)


def model_spec() -> ModelSpec:
    return ModelSpec.from_params(MODEL, {"timesteps": 6})


def run_of(spec: DeviceSpec, switches: dict, name: str = "baseline"):
    return start_run(spec, Variant.from_config(name, switches), REPO, {})


def train_settings(**changes) -> TrainSettings:
    return from_mapping(TrainSettings, TRAIN | changes, "train")


# -- the upsampling ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 2, 4, 4, 4), (2, 3, 1, 2, 5), (1, 4, 3, 6, 2)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_shifted_sums_are_trilinear_interpolation_forward_and_backward(shape, channels_last):
    """float64, every edge case of the clamped neighbours (sides of 1, 2 and odd lengths), both layouts."""
    generator = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, dtype=torch.float64, generator=generator)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    upstream = x.clone().requires_grad_(True)
    ours = x.clone().requires_grad_(True)
    expected = F.interpolate(upstream, scale_factor=2, mode="trilinear")
    got = upsample_trilinear_x2(ours)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-14)
    weight = torch.randn(expected.shape, dtype=torch.float64, generator=generator)
    (expected * weight).sum().backward()
    (got * weight).sum().backward()
    torch.testing.assert_close(ours.grad, upstream.grad, rtol=0, atol=1e-13)


@pytest.mark.parametrize("shape", [(1, 2, 4, 4, 4), (2, 3, 1, 2, 5), (1, 4, 3, 6, 2)])
def test_shifted_sums_in_memory_order_keep_channels_last_and_every_bit(shape):
    """The ndhwc switch's order: over the axes of a channels-last input's memory, the same numbers bit for bit as
    over its logical axes (the same arithmetic per element), forward and backward, and a channels-last result where
    the logical order returns a contiguous one. A contiguous input is interpolated as before."""
    generator = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=generator).contiguous(memory_format=torch.channels_last_3d)
    weight = torch.randn([n * (2 if k > 1 else 1) for k, n in enumerate(shape)], generator=generator)
    results = []
    for in_memory_order in (False, True):
        leaf = x.clone().requires_grad_(True)
        out = upsample_trilinear_x2(leaf, in_memory_order)
        (out * weight).sum().backward()
        results.append((out, leaf.grad))
    (logical, logical_grad), (memory, memory_grad) = results
    assert logical.is_contiguous() and not memory.is_contiguous()
    assert memory.is_contiguous(memory_format=torch.channels_last_3d)
    assert torch.equal(memory, logical) and torch.equal(memory_grad, logical_grad)
    plain = torch.randn(shape, generator=generator)
    assert torch.equal(upsample_trilinear_x2(plain, True), upsample_trilinear_x2(plain))


def test_the_switch_changes_the_formulation_not_the_parameters():
    from medddpm.variants import prepare_model

    torch.manual_seed(0)
    diffusion = model_spec().build(0).double()
    with torch.no_grad():  # the output convolution starts at zero: give every weight a value
        for parameter in diffusion.parameters():
            parameter.normal_(0, 0.1)
    state = {k: v.clone() for k, v in diffusion.state_dict().items()}
    x = torch.randn(1, 3, 8, 8, 8, dtype=torch.float64)
    t = torch.tensor([2])
    with torch.no_grad():
        before = diffusion.denoiser(x, t)
        prepare_model(diffusion, Variant.from_config("g", PAPER | {"gather_upsampling": True}))
        after = diffusion.denoiser(x, t)
    ups = [m for m in diffusion.modules() if isinstance(m, Upsample)]
    assert ups and all(m.gather for m in ups)
    assert diffusion.state_dict().keys() == state.keys()
    assert all(torch.equal(diffusion.state_dict()[k], v) for k, v in state.items())
    torch.testing.assert_close(after, before, rtol=0, atol=1e-12)
    assert not torch.equal(after, torch.zeros_like(after))


# -- the ensemble on the CPU ---------------------------------------------------------------------------------------


def alone(run, dataset, seed: int, steps: int) -> tuple[engine.Training, list[list[float]]]:
    training = engine.Training(model_spec(), train_settings(seed=seed), run, dataset)
    return training, [training.step() for _ in range(steps)]


def test_seeds_trained_together_equal_each_seed_trained_alone(dataset):
    """Interleaving the runs' steps changes nothing: each run has its own generator, data order and optimizer; its
    losses are recorded step by step, and the gradients are dropped at the end (the float64 check starts from none)."""
    run = run_of(CPU, PAPER)
    ensemble = Ensemble(model_spec(), train_settings(), [0, 1], run, dataset, steps=3, graphs=True)
    assert ensemble.graphs is False  # no CUDA: the eager loop
    assert ensemble.warm_up() is None  # nothing compiles
    started = time.perf_counter()
    seconds = ensemble.train()
    assert 0 < seconds <= time.perf_counter() - started and ensemble.capture_seconds == 0.0
    for member in ensemble.members:
        single, losses = alone(run, dataset, member.seed, 3)
        identical, largest = weights_identical(member.training.diffusion, single.diffusion)
        assert identical and largest == 0.0, member.seed
        assert weights_identical(member.training.trainer.ema_model, single.trainer.ema_model)[0]
        assert member.training.trainer.step_index == 3
        assert ensemble.losses(member) == losses  # the float32 losses of each step, as the eager loop returns them
        assert all(p.grad is None for p in member.training.diffusion.parameters())
    first, second = ensemble.members
    assert not weights_identical(first.training.diffusion, second.training.diffusion)[0]  # seeds differ
    assert ensemble.losses(first)[0] != ensemble.losses(first)[1]


def test_a_rerun_of_a_seed_is_bit_identical_under_deterministic_algorithms(dataset, monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    assert study_run(run_of(CPU, PAPER), deterministic=False).variant.gather_upsampling is False
    run = study_run(run_of(CPU, PAPER), deterministic=True)
    assert run.variant.gather_upsampling and run.provenance["switches"]["gather_upsampling"]
    assert run.provenance["switches_effective"]["gather_upsampling"] is True
    assert determinism_state() == {"deterministic_algorithms": True, "cudnn_deterministic": True,
                                   "cublas_workspace_config": ":4096:8"}
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert torch.utils.deterministic.fill_uninitialized_memory is False
    assert run.provenance["determinism"] == determinism_state()
    ensemble = Ensemble(model_spec(), train_settings(), [0, 0], run, dataset, steps=2, graphs=False)
    ensemble.train()
    first, again = ensemble.members
    assert weights_identical(first.training.diffusion, again.training.diffusion) == (True, 0.0)
    assert ensemble.losses(first) == ensemble.losses(again)


def test_weights_identical_reports_the_largest_difference():
    """Any tensor that differs makes them differ, the first as much as the last; integer buffers count too."""
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    for model in (a, b):
        model.register_buffer("count", torch.tensor([3, 4]))
    b.load_state_dict(a.state_dict())
    assert weights_identical(a, b) == (True, 0.0)
    with torch.no_grad():
        b.weight[0, 1] += 0.25  # the first tensor of the state_dict
    identical, largest = weights_identical(a, b)
    assert not identical and largest == pytest.approx(0.25)
    b.load_state_dict(a.state_dict())
    b.count[1] = 5  # the last, an integer buffer
    assert weights_identical(a, b) == (False, 0.0)


def test_a_non_finite_loss_of_any_run_stops_the_study(dataset):
    run = run_of(CPU, PAPER)
    ensemble = Ensemble(model_spec(), train_settings(), [0, 1], run, dataset, steps=2, graphs=False)
    ensemble.train()
    ensemble.members[1].losses[1, 0] = float("nan")
    with pytest.raises(NonFiniteLoss, match="the loss is nan at optimizer step 1, micro-batch 0 of 2"):
        ensemble._check_finite()


def test_each_run_is_compared_with_the_baseline_of_its_own_seed():
    assert reference_of(("tf32", 3), first_seed=0) == ("baseline", 3)
    assert reference_of(("baseline", 3), first_seed=0) == ("baseline", 0)
    assert reference_of(("baseline", 0), first_seed=0) == ("baseline", 0)


# -- on a GPU ---------------------------------------------------------------------------------------------------------


def eager_capturable(run, dataset, seed: int, steps: int) -> tuple[engine.Training, list[list[float]]]:
    """The eager loop with the placement the replay uses (capturable Adam, autocast without its cache), its trainer
    told not to capture; the training and the losses of its steps."""
    training = engine.Training(model_spec(), train_settings(seed=seed), run, dataset, graph_capture=True)
    training.trainer.captures = False
    training.warm_up()
    losses = [training.step() for _ in range(steps)]
    assert training.trainer.graph is None
    return training, losses


@on_gpu
@pytest.mark.parametrize("switches", [PAPER, PAPER | {"channels_last": True},
                                      {"cudnn_tf32": True, "matmul_tf32": True, "channels_last": False,
                                       "autocast": "bfloat16", "fused_adam": True, "foreach_ema": True}],
                         ids=["fp32", "channels_last", "bf16"])
def test_replayed_steps_are_the_eager_steps_bit_for_bit(dataset, switches):
    """Graph replay on per-run streams (with a rerun of seed 0) gives the weights, EMA and losses of the eager loop."""
    run = study_run(run_of(GPU, switches), deterministic=True)
    ensemble = Ensemble(model_spec(), train_settings(), [0, 1, 0], run, dataset, steps=5, graphs=True)
    ensemble.train()
    assert ensemble.graphs and all(m.training.trainer.graph is not None for m in ensemble.members)
    assert ensemble.capture_seconds > 0
    first, second, again = ensemble.members
    assert weights_identical(first.training.diffusion, again.training.diffusion) == (True, 0.0)
    for member in (first, second):
        eager, _ = eager_capturable(run, dataset, member.seed, 5)
        assert weights_identical(member.training.diffusion, eager.diffusion) == (True, 0.0), member.seed
        assert weights_identical(member.training.trainer.ema_model, eager.trainer.ema_model)[0]
    assert not weights_identical(first.training.diffusion, second.training.diffusion)[0]


@on_gpu
def test_the_shifted_sums_have_a_deterministic_cuda_backward():
    deterministic_algorithms()
    x = torch.randn(2, 8, 6, 6, 6, device="cuda", dtype=torch.float64, requires_grad=True)
    weight = torch.randn(2, 8, 12, 12, 12, device="cuda", dtype=torch.float64)
    (upsample_trilinear_x2(x) * weight).sum().backward()
    first = x.grad.clone()
    x.grad = None
    (upsample_trilinear_x2(x) * weight).sum().backward()
    assert torch.equal(first, x.grad)
    reference = x.detach().clone().requires_grad_(True)
    torch.use_deterministic_algorithms(False)
    (F.interpolate(reference, scale_factor=2, mode="trilinear") * weight).sum().backward()
    torch.testing.assert_close(first, reference.grad, rtol=0, atol=1e-12)


# config.yaml's frontier_graphed without cuDNN's autotuning (its picks may differ between two processes' runs) and
# without the sampling graphs (no sampling here).
FRONTIER_GRAPHED = {switch: value for switch, value in config_section("variants")["frontier_graphed"].items()
                    if switch not in ("cudnn_benchmark", "cuda_graphs")}


@on_gpu
@pytest.mark.parametrize("switches", [PAPER, FRONTIER_GRAPHED], ids=["fp32", "frontier_graphed"])
def test_the_training_jobs_replayed_step_is_its_eager_step_bit_for_bit(dataset, switches):
    """cuda_graph_training: the training job's trainer captures its optimizer step right after the first one and
    replays it from then on, with the losses, weights and EMA of the eager loop; the compiled frontier rung too, its
    norms through the NDHWC kernels, under deterministic algorithms."""
    run = study_run(run_of(GPU, switches | {"cuda_graph_training": True}, "graphed"), deterministic=True)
    graphed = engine.Training(model_spec(), train_settings(), run, dataset)
    assert graphed.placement.graph_capture and graphed.trainer.captures
    graphed.warm_up()
    losses = [graphed.step() for _ in range(5)]
    assert graphed.trainer.graph is not None and graphed.trainer.graph.capture_seconds > 0
    eager, eager_losses = eager_capturable(run, dataset, 0, 5)
    assert eager_losses == losses
    assert weights_identical(graphed.diffusion, eager.diffusion) == (True, 0.0)
    assert weights_identical(graphed.trainer.ema_model, eager.trainer.ema_model) == (True, 0.0)
    assert graphed.trainer.step_index == eager.trainer.step_index == 5
