"""Several seeds of one variant trained in one process: the quality study's runs of a variant.

At the study's size (32^3) an optimizer step launches thousands of small kernels and the GPU waits for the launches,
not for the arithmetic. So on CUDA (`graphs`) each run's optimizer step is captured once in a CUDA graph and
replayed: the same kernels (every micro-batch's forward and backward, then a capturable Adam), launched as one. Each
run has its own stream, so the replays of different seeds overlap on the GPU. The first step of every run is the
eager upstream step (it initialises Adam's state and the allocator; compilation and cuDNN autotuning happen before
it); the data copies, the random draws of every micro-batch (GaussianDiffusion.draw, from the run's own generator in
upstream's order) and the EMA rule stay eager, between replays. A run's numbers are those of its eager loop: the
same batches, draws and kernels.

`deterministic_algorithms` makes the same seed give the same model bit for bit (the study's precondition for
pairing variants by seed); a rerun of the first seed in the same job checks it (`weights_identical`).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .build import ModelSpec
from .engine import Training, synchronize
from .runs import Run
from .settings import TrainSettings
from .training import NonFiniteLoss

# cuBLAS needs a fixed workspace for deterministic results (CUDA's documented setting); read when cuBLAS starts.
CUBLAS_DETERMINISTIC_WORKSPACE = ":4096:8"


def deterministic_algorithms() -> None:
    """Deterministic kernels from here on (an operation without one raises instead of running): cuDNN's deterministic
    algorithms, cuBLAS with a fixed workspace. Uninitialised memory is not filled (torch.empty stays as fast as
    without it: nothing of the study reads memory before writing it)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.deterministic = True


def determinism_state() -> dict:
    """The process's determinism settings, read back (run.json records them)."""
    return {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }


@dataclass
class Member:
    """One run of the ensemble: its training, its stream (CUDA) and its losses, (steps, micro-batches)."""

    seed: int
    training: Training
    losses: torch.Tensor
    stream: torch.cuda.Stream | None = None

    def on_stream(self) -> contextlib.AbstractContextManager:
        return on_stream(self.stream)


def on_stream(stream: torch.cuda.Stream | None) -> contextlib.AbstractContextManager:
    """Work on `stream` (CUDA), or where it is (no stream: the CPU)."""
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


class Ensemble:
    """The runs of one variant, one per entry of `seeds` (a seed may repeat: a rerun), trained step by step together.

    `graphs` replays each run's optimizer step from a CUDA graph on the run's own stream (CUDA only; elsewhere the
    eager loop runs, one run after another within each step)."""

    def __init__(self, model_spec: ModelSpec, train: TrainSettings, seeds: list[int], run: Run, dataset_dir: Path,
                 steps: int, graphs: bool):
        self.run = run
        self.steps = steps
        self.graphs = graphs and run.device.type == "cuda"
        self.accumulation = train.gradient_accumulation
        self.members: list[Member] = []
        for seed in seeds:
            stream = torch.cuda.Stream(run.device) if self.graphs else None
            settings = replace(train, seed=seed)
            with on_stream(stream):
                training = Training(model_spec, settings, run, dataset_dir, graph_capture=self.graphs)
                losses = torch.full((steps, self.accumulation), math.nan, device=run.device)
            self.members.append(Member(seed, training, losses, stream))

    def warm_up(self) -> float | None:
        """Compilation before any step (Training.warm_up, on throw-away numbers): the first run compiles, the
        others reuse its code. Seconds, None when nothing compiles."""
        seconds = None
        for member in self.members:
            with member.on_stream():
                spent = member.training.warm_up()
            if spent is not None:
                seconds = (seconds or 0.0) + spent
        synchronize(self.run.device)
        return seconds

    def train(self, progress: Callable[[int], Iterable[int]] = range) -> float:
        """Every run's `steps` optimizer steps; returns the wall-clock seconds (the GPU synchronised at both ends)."""
        synchronize(self.run.device)
        started = time.perf_counter()
        for step in progress(self.steps):
            for member in self.members:
                trainer = member.training.trainer
                with member.on_stream():
                    if trainer.graph is None:
                        # The eager step; with graphs, the trainer captures its step right after it (StepGraph).
                        values = trainer.step()
                        member.losses[step].copy_(torch.tensor(values, dtype=member.losses.dtype))
                    else:
                        # No host synchronisation: the runs' replays overlap; the losses are checked at the end.
                        member.losses[step].copy_(trainer.graph.replay())
        synchronize(self.run.device)
        seconds = time.perf_counter() - started
        self._check_finite()
        for member in self.members:
            # The replayed step leaves its last gradients in place (the eager step sets them to None): drop them, so
            # that the float64 check's backward starts from none, as after the eager loop.
            member.training.trainer.optimizer.zero_grad(set_to_none=True)
        return seconds

    @property
    def capture_seconds(self) -> float:
        """Seconds spent capturing the runs' step graphs (0 without graphs)."""
        return sum(member.training.trainer.graph.capture_seconds for member in self.members
                   if member.training.trainer.graph is not None)

    def losses(self, member: Member) -> list[list[float]]:
        """A run's loss of every optimizer step and micro-batch."""
        return member.losses.cpu().tolist()

    def _check_finite(self) -> None:
        """The first non-finite loss of any run stops the study before anything is written (the eager loop checks
        every micro-batch as it goes; replays are checked here, once)."""
        for member in self.members:
            values = member.losses.cpu()
            bad = (~torch.isfinite(values)).nonzero()
            if len(bad):
                step, micro = (int(v) for v in bad[0])
                settings = member.training.trainer.settings
                raise NonFiniteLoss(float(values[step, micro]), step, micro, settings)


def weights_identical(first: torch.nn.Module, second: torch.nn.Module) -> tuple[bool, float]:
    """Whether two models' state_dicts are equal bit for bit, and their largest absolute difference."""
    a, b = first.state_dict(), second.state_dict()
    largest = 0.0
    identical = True
    for key, value in a.items():
        other = b[key]
        identical &= bool(torch.equal(value, other))
        if value.is_floating_point():
            largest = max(largest, float((value.double() - other.double()).abs().max()))
    return identical, largest
