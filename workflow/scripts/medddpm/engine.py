"""The timed-step engine: the one place where a variant reaches the model, its inputs and its steps.

The training job, the sampling job, the quality study and the profiled program all build their step here, so the
step that is profiled is the step that is timed: the same placement (device, model-level switches, compilation,
input layout, autocast, optimizer and EMA switches, the U-Net evaluation of a sampling step) and the same step
function.

- `Placement` (medddpm.placement): a variant on a device; applies each switch and nothing else does.
- `Training`: the trainer of a job, its model placed and compiled; `step()` is one optimizer step.
- `Sampling`: a diffusion placed for evaluation; `step()` is one DDPM step, `chain()` the reversed chain of them.
- `timed_steps`: warm-up steps, then measured steps each between a timer's start and stop.
The process-wide backend switches (TF32, cuDNN benchmark) are set once per job, by `runs.start_run`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch

from measurement.timing import synchronize

from .build import ModelSpec
from .checkpoints import load_checkpoint, load_weights_into, workload_record
from .data_parallel import ONE_PROCESS, Processes
from .dataset import PreparedPairs
from .diffusion import GaussianDiffusion
from .placement import Placement
from .runs import Run
from .samplers import Sampler, sample_steps
from .settings import TrainSettings
from .training import Trainer, data_batches


class Training:
    """The training step of a job: the trainer, with the model built from `train.seed`, placed and compiled (one of
    the job's `processes` with data_parallel: medddpm.data_parallel)."""

    def __init__(self, model_spec: ModelSpec, train: TrainSettings, run: Run, dataset_dir: Path,
                 graph_capture: bool = False, processes: Processes = ONE_PROCESS):
        self.placement = placement = Placement.of(run, graph_capture)
        diffusion = placement.model(model_spec.build(train.seed))
        self.trainer = Trainer(
            diffusion,
            data_batches(PreparedPairs(dataset_dir, "train"), train.seed),
            placement,
            train,
            torch.Generator(device=run.device).manual_seed(train.seed),
            # Upstream's DataLoader pins memory; pinning only exists for copies to a GPU.
            pin_memory=run.device.type == "cuda",
            processes=processes,
        )

    @property
    def diffusion(self) -> GaussianDiffusion:
        return self.trainer.diffusion

    def warm_up(self) -> float | None:
        """Compilation ahead of every step (Trainer.warm_up_compiled); its seconds, None when nothing compiles."""
        return self.trainer.warm_up_compiled()

    def prepare(self) -> None:
        """Batch assembly and pinning for the next step, as upstream's loader workers do: outside the step."""
        self.trainer.prefetch()

    def step(self) -> list[float]:
        """One optimizer step (every micro-batch, Adam, the EMA rule); the loss of each micro-batch."""
        return self.trainer.step()


class Sampling:
    """The sampling step of a job: a diffusion on the device for evaluation (model-level switches applied, gradients
    off: the weights are constants, which also keeps autocast from caching their casts across CUDA graph captures),
    compiled when the variant asks, with its U-Net evaluation."""

    def __init__(self, diffusion: GaussianDiffusion, placement: Placement):
        self.placement = placement
        self.diffusion = placement.model(diffusion).requires_grad_(False).eval()
        placement.compile(self.diffusion)
        self.compiled = placement.compiles
        self.evaluate = placement.evaluation(self.diffusion)

    @classmethod
    def from_checkpoint(cls, model_spec: ModelSpec, run: Run, checkpoint: Path, which: str,
                        train_seed: int = 0) -> Sampling:
        """The `model` or `ema` weights of a checkpoint."""
        diffusion = model_spec.build(train_seed)
        state = load_checkpoint(checkpoint, workload_record(model_spec))
        load_weights_into(diffusion, state[which], checkpoint, which)
        return cls(diffusion, Placement.of(run))

    @classmethod
    def from_weights(cls, model_spec: ModelSpec, run: Run, weights: dict, train_seed: int = 0) -> Sampling:
        """`weights`, a state_dict held in memory (a study run's EMA copy)."""
        diffusion = model_spec.build(train_seed)
        diffusion.load_state_dict(weights)
        return cls(diffusion, Placement.of(run))

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The state every sampling step runs in: no gradients, the variant's autocast."""
        with torch.no_grad(), self.placement.autocast():
            yield

    def step(self, x: torch.Tensor, condition: torch.Tensor, t: int,
             generator: torch.Generator | None = None) -> torch.Tensor:
        """One ancestral step x_t -> x_{t-1} through the variant's U-Net evaluation."""
        return self.diffusion.p_sample(x, condition, t, generator, self.evaluate)

    def chain(self, condition: torch.Tensor, generator: torch.Generator,
              max_steps: int | None) -> Iterator[tuple[int, torch.Tensor]]:
        """(t, x_{t-1}) over the reversed chain from noise (GaussianDiffusion.sample_steps): at every t the function
        of `step`, p_sample through this evaluation."""
        return self.diffusion.sample_steps(condition, generator, max_steps, self.evaluate)

    def fast_chain(self, sampler: Sampler, condition: torch.Tensor, generator: torch.Generator,
                   max_steps: int | None = None) -> Iterator[tuple[int, torch.Tensor]]:
        """(t, x) over a sampler's steps from noise drawn as `chain` draws it (medddpm.samplers.sample_steps), each
        U-Net evaluation through this variant's evaluation (plain, compiled or replayed from a CUDA graph);
        `max_steps` stops early (warm-ups)."""
        return sample_steps(sampler, self.diffusion, condition, generator, max_steps, self.evaluate)

    def chain_length(self, max_steps: int | None) -> int:
        timesteps = self.diffusion.num_timesteps
        return timesteps if max_steps is None else min(max_steps, timesteps)

    @property
    def middle_step(self) -> int:
        """The step at which warm-ups and profiles evaluate: mid-chain, a step like most of the chain's."""
        return self.diffusion.num_timesteps // 2

    def warm_up(self, condition: torch.Tensor, seed: int, steps: int = 1) -> float:
        """`steps` steps on throw-away noise (its own generator) before any chain: compilation, CUDA graph capture and
        cuDNN autotuning happen here. Returns their wall-clock seconds."""
        device = self.placement.device
        generator = torch.Generator(device=device).manual_seed(seed + 7919)
        shape = (condition.shape[0], self.diffusion.channels, *condition.shape[2:])
        x = self.placement.input(torch.randn(shape, device=device, generator=generator))
        synchronize(device)
        started = time.perf_counter()
        with self.running():
            for _ in range(steps):
                self.step(x, condition, self.middle_step, generator)
        synchronize(device)
        return time.perf_counter() - started


def timed_steps(step: Callable[[], object], warmup: int, measured: int, timer,
                prepare: Callable[[], None] | None = None,
                progress: Callable[[str, int], Iterable] | None = None) -> Iterator[tuple[str, object]]:
    """Run `step` `warmup` times untimed, then `measured` times each between `timer.start()` and `timer.stop()`
    (measurement.timing.DeviceTimer); yield ("warmup" | "measured", what the step returned) after each step.
    `prepare` runs before every step and the caller's loop body after it, both outside the timed region.
    `progress(phase, count)` gives the iterable a phase's steps are counted on (a progress bar), made when the phase
    begins; a phase of no steps has none."""
    progress = progress or (lambda phase, count: range(count))
    for phase, count in (("warmup", warmup), ("measured", measured)):
        if count <= 0:
            continue
        for _ in progress(phase, count):
            if prepare:
                prepare()
            if phase == "warmup":
                yield phase, step()
                continue
            started = timer.start()
            result = step()
            timer.stop(started)
            yield phase, result
