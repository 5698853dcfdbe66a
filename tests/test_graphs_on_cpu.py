"""The CUDA graph paths on a CPU (tests/cpu_graphs.py records a capture and replays its operations): a replayed
optimizer step (training.StepGraph) trains exactly as the eager step does, with fresh draws and batches copied in
before every replay and no gradient carried over from before the capture; a replayed sampling evaluation
(sampling.UNetEvaluation) gives the plain evaluation's output for every input and timestep copied into it. The same
paths run natively in tests/test_gpu_paths.py and tests/test_study_ensemble.py on a GPU."""

from __future__ import annotations

import itertools

import pytest
import torch

import cpu_graphs
from config_settings import configured
from medddpm.diffusion import GaussianDiffusion
from medddpm.placement import Placement
from medddpm.sampling import UNetEvaluation
from medddpm.settings import TrainSettings
from medddpm.switches import Variant
from medddpm.training import StepGraph, Trainer
from unet_helpers import TINY, TINY_SHAPE, tiny_inputs, tiny_unet

BASELINE = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False}
STEPS = 4


def _batches(seed: int):
    """An endless stream of different (condition, target) batches, the same for every trainer of one seed."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield {"input": torch.randn(1, TINY.in_channels - TINY.out_channels, *TINY_SHAPE, generator=generator),
               "target": torch.randn(1, TINY.out_channels, *TINY_SHAPE, generator=generator)}


def _trainer(captures: bool) -> Trainer:
    """The tiny network's trainer with a capturing placement (capturable Adam, autocast without its cast cache):
    `captures` replays from a graph after the first step, else every step stays eager, from the same weights."""
    settings = configured(TrainSettings, "train", gradient_accumulation=2, lr=1e-3, ema_start_step=0,
                          ema_update_every=1)
    diffusion = GaussianDiffusion(tiny_unet(), timesteps=10)
    trainer = Trainer(diffusion, _batches(7), Placement(Variant.from_config("baseline", BASELINE),
                                                          torch.device("cpu"), graph_capture=True),
                      settings, torch.Generator().manual_seed(41))
    trainer.captures = captures
    return trainer


def _train_steps(trainer: Trainer, steps: int = STEPS) -> list[list[float]]:
    return [[float(loss) for loss in trainer.step()] for _ in range(steps)]


@pytest.fixture
def graphs(monkeypatch):
    cpu_graphs.install(monkeypatch)


def test_a_replayed_optimizer_step_trains_as_the_eager_step(graphs):
    eager, replayed = _trainer(captures=False), _trainer(captures=True)
    eager_losses, replayed_losses = _train_steps(eager), _train_steps(replayed)
    assert eager.graph is None and isinstance(replayed.graph, StepGraph)
    assert replayed.graph.graph.replays == STEPS - 1  # the first step eager, its graph captured after it
    assert 0 < replayed.graph.capture_seconds < 600
    assert replayed_losses == eager_losses
    assert len({loss for step in eager_losses for loss in step}) == 2 * STEPS  # every micro-batch its own loss
    for (name, weight), same in zip(eager.diffusion.named_parameters(), replayed.diffusion.parameters()):
        assert torch.equal(weight, same), name
    for weight, same in zip(eager.ema_model.parameters(), replayed.ema_model.parameters()):
        assert torch.equal(weight, same)
    assert replayed.step_index == eager.step_index == STEPS


def _float64_batches(seed: int):
    for batch in _batches(seed):
        yield {key: value.double() for key, value in batch.items()}


def _stacked_or_not(stacked: bool, captures: bool = False, dtype: torch.dtype = torch.float32) -> Trainer:
    """The tiny network's trainer with the step's two micro-batches one by one, or stacked into one batch (the
    variant's stacked_micro_batches), from the same weights, batches and generator; a capturing placement, as
    `_trainer`'s, and `captures` replays from a graph after the first step."""
    settings = configured(TrainSettings, "train", gradient_accumulation=2, lr=1e-3, ema_start_step=0,
                          ema_update_every=1)
    diffusion = GaussianDiffusion(tiny_unet(), timesteps=10).to(dtype)
    variant = Variant.from_config("stacked" if stacked else "baseline",
                                  {**BASELINE, "stacked_micro_batches": stacked})
    trainer = Trainer(diffusion, (_float64_batches if dtype == torch.float64 else _batches)(7),
                      Placement(variant, torch.device("cpu"), graph_capture=True), settings,
                      torch.Generator().manual_seed(41))
    trainer.captures = captures
    return trainer


def _recording_gradients(trainer: Trainer) -> list[list[torch.Tensor]]:
    """The gradients each optimizer step of `trainer` steps with, recorded as it takes them."""
    recorded, step = [], trainer.optimizer.step

    def recording(*args, **kwargs):
        recorded.append([p.grad.detach().clone() for p in trainer.diffusion.parameters()])
        return step(*args, **kwargs)

    trainer.optimizer.step = recording
    return recorded


def test_stacked_micro_batches_take_the_one_by_one_steps_in_float64(graphs):
    """One forward and backward of the two micro-batches stacked against upstream's two, in float64: the same
    batches and random numbers, each micro-batch's loss and every step's gradients to rounding."""
    one_by_one, stacked = _stacked_or_not(False, dtype=torch.float64), _stacked_or_not(True, dtype=torch.float64)
    gradients = _recording_gradients(one_by_one), _recording_gradients(stacked)
    losses = _train_steps(one_by_one), _train_steps(stacked)
    assert stacked.stacked and not one_by_one.stacked
    assert len({loss for step in losses[0] for loss in step}) == 2 * STEPS  # every micro-batch its own loss
    # Measured: losses 2.7e-16 apart (relative), gradients 9.7e-16 of the step's largest gradient at most: the
    # float64 rounding of sums taken in another order (the stack's mean against the two halves accumulated), against
    # the largest gradient of the step (a bias in front of a one-channel group's GroupNorm has the gradient zero,
    # computed as rounding noise of 1e-19 either way). A micro-batch with the other's draws, or a stack's loss not
    # divided as upstream's, is off by percents.
    loss_gap = max(abs(a - b) / abs(a) for x, y in zip(*losses) for a, b in zip(x, y))
    gradient_gap = max(max(float((a - b).abs().max()) for a, b in zip(first, second))
                       / max(float(a.abs().max()) for a in first) for first, second in zip(*gradients))
    assert loss_gap < 1e-13 and gradient_gap < 1e-13, (loss_gap, gradient_gap)
    assert len(gradients[0]) == len(gradients[1]) == STEPS


def test_a_stacked_step_replayed_from_its_graph_trains_as_the_eager_stacked_step(graphs):
    eager, replayed = _stacked_or_not(True, captures=False), _stacked_or_not(True, captures=True)
    eager_losses, replayed_losses = _train_steps(eager), _train_steps(replayed)
    assert eager.graph is None and isinstance(replayed.graph, StepGraph)
    assert replayed.graph.graph.replays == STEPS - 1
    assert replayed_losses == eager_losses
    for weight, same in zip(eager.diffusion.parameters(), replayed.diffusion.parameters()):
        assert torch.equal(weight, same)
    # and the stacked step is the one-by-one step to float32 rounding
    one_by_one = _train_steps(_stacked_or_not(False))
    assert max(abs(a - b) / abs(a) for x, y in zip(one_by_one, eager_losses) for a, b in zip(x, y)) < 1e-5


def test_a_graph_captured_over_leftover_gradients_still_trains_as_the_eager_step(graphs):
    """StepGraph starts its capture from no gradients, whatever the step before it left: a gradient present at capture
    would be added into by every replay."""
    eager, replayed = _trainer(captures=False), _trainer(captures=False)
    assert _train_steps(eager, 1) == _train_steps(replayed, 1)
    for weight in replayed.diffusion.parameters():
        weight.grad = torch.ones_like(weight)
    replayed.graph = StepGraph(replayed)
    assert _train_steps(replayed, 2) == _train_steps(eager, 2)
    for weight, same in zip(eager.diffusion.parameters(), replayed.diffusion.parameters()):
        assert torch.equal(weight, same)


def test_a_step_graph_is_captured_on_the_stream_the_trainer_works_on_and_draws_nothing_of_its_own(graphs):
    """A trainer working on a stream of its own device (the study's ensemble gives every run one) has its step
    captured on that stream (on the default stream, which cannot capture, a side stream is the graph's: the tests
    above). Capturing takes its throw-away draws from a generator of its own: torch's global one (a job's seeded
    draws) is left where it was."""
    trainer = _trainer(captures=False)
    _train_steps(trainer, 1)
    own = torch.cuda.Stream(torch.device("cpu"))
    torch.manual_seed(5)
    before = torch.get_rng_state()
    with torch.cuda.stream(own):
        trainer.graph = StepGraph(trainer)
        assert torch.equal(torch.get_rng_state(), before)
        assert trainer.graph.graph.capture_stream is own
        _train_steps(trainer, 1)
    assert trainer.graph.graph.replays == 1


def test_the_fake_graph_replays_only_what_was_captured(graphs):
    """The stand-in is a graph, not a second eager step: a capture leaves the parameters it updated as they were, a
    replay reads its static input as it is then and adds into the gradient the capture left, and a read to the host
    inside a capture fails."""
    weight = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    static = torch.tensor([3.0, 4.0])
    optimizer = torch.optim.SGD([weight], lr=0.5)
    recorded = torch.cuda.CUDAGraph()
    with torch.cuda.graph(recorded):
        (weight * static * 2.0).sum().backward()
        optimizer.step()
    assert torch.equal(weight.detach(), torch.tensor([1.0, 2.0]))  # the capture computed nothing that lasts
    recorded.replay()
    # The gradient existed after the capture (autograd set it there): the replay adds into the captured one.
    assert torch.allclose(weight.detach(), torch.tensor([1.0, 2.0]) - 0.5 * 2.0 * static)
    static.copy_(torch.tensor([10.0, 10.0]))
    before = weight.detach().clone()
    recorded.replay()
    assert torch.allclose(weight.detach(), before - 0.5 * 2.0 * torch.tensor([10.0, 10.0]))
    with pytest.raises(RuntimeError, match="read to the host"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            weight.sum().item()


def test_a_replayed_sampling_evaluation_gives_the_plain_output_for_every_input_and_timestep(graphs):
    diffusion = GaussianDiffusion(tiny_unet(), timesteps=10).eval()
    evaluation = UNetEvaluation(diffusion, Variant.from_config("graphs", BASELINE | {"cuda_graphs": True}),
                                torch.device("cpu"))
    assert evaluation.graphs is False  # CUDA graphs are for a CUDA device
    evaluation.graphs = True  # what the variant gives on one
    generator = torch.Generator().manual_seed(3)
    outputs = []
    # Two shapes one after the other, then the first again: one graph is kept, of the last shape, so each change of
    # shape captures anew and the calls of one shape replay.
    for shape, captures in ((TINY_SHAPE, 1), ((8, 8, 16), 2), (TINY_SHAPE, 3)):
        condition = torch.randn(1, TINY.in_channels - TINY.out_channels, *shape, generator=generator)
        for step, seed in itertools.product((9, 4, 0), (0, 1)):
            x = torch.randn(1, TINY.out_channels, *shape, generator=torch.Generator().manual_seed(seed))
            t = torch.tensor([step])
            with torch.no_grad():
                expected = diffusion.denoise(x, condition, t)
            got = evaluation(x, condition, t).clone()
            assert torch.equal(got, expected), (shape, step, seed)
            outputs.append(got)
        assert evaluation.captures == captures, shape
    assert len({tuple(o.flatten()[:4].tolist()) for o in outputs}) == len(outputs)  # every call its own output


def test_the_evaluation_warms_up_on_a_side_stream_before_it_captures(graphs):
    """The warm-up runs (cuDNN autotuning, compilation) happen on a side stream that waited for the current one, the
    capture on a stream of the graph's own, never on the default stream."""
    diffusion = GaussianDiffusion(tiny_unet(), timesteps=10).eval()
    evaluation = UNetEvaluation(diffusion, Variant.from_config("graphs", BASELINE | {"cuda_graphs": True}),
                                torch.device("cpu"))
    evaluation.graphs = True
    plain, streams = diffusion.denoise, []

    def denoise(*args):
        streams.append(torch.cuda.current_stream())
        return plain(*args)

    diffusion.denoise = denoise
    x, _ = tiny_inputs(shape=TINY_SHAPE)
    condition, x = x[:, TINY.out_channels:], x[:, :TINY.out_channels]
    with torch.no_grad():
        evaluation(x, condition, torch.tensor([3]))
        evaluation(x, condition, torch.tensor([5]))  # a replay: no evaluation of its own
    warm_up, capture = streams[:UNetEvaluation.WARMUP_RUNS], streams[UNetEvaluation.WARMUP_RUNS:]
    assert len(warm_up) == UNetEvaluation.WARMUP_RUNS and len(capture) == 1
    assert len(set(warm_up)) == 1 and not warm_up[0].default
    assert not capture[0].default and capture[0] is not warm_up[0]
    assert torch.cuda.current_stream().default  # the side stream only for the warm-up


def test_only_a_cuda_device_replays_the_evaluation_from_a_graph():
    diffusion = GaussianDiffusion(tiny_unet(), timesteps=10)
    graphs = Variant.from_config("graphs", BASELINE | {"cuda_graphs": True})
    plain = Variant.from_config("baseline", BASELINE)
    assert UNetEvaluation(diffusion, graphs, torch.device("cuda")).graphs is True  # decided, nothing run on it
    assert UNetEvaluation(diffusion, plain, torch.device("cuda")).graphs is False
    assert UNetEvaluation(diffusion, graphs, torch.device("cpu")).graphs is False
