"""The upstream training loop: Adam, gradient accumulation, EMA, one `loss.item()` per micro-batch.

Upstream's trainer feeds batches from a DataLoader with pinned memory and four worker processes: by the time a step
asks for its batch, the batch is assembled and pinned, and the step only copies it to the GPU. `Trainer.prefetch`
does the same assembling and pinning before the timed region, so the timed step holds the same work as upstream's
(the copy from pinned memory, `loss.item()`, Adam, the EMA rule) and no more.

A placement that captures (`Placement.graph_capture`: the `cuda_graph_training` switch, or the quality study) replays
the optimizer step from a CUDA graph after the first eager step: `StepGraph`.
"""

from __future__ import annotations

import copy
import inspect
import math
import time
from collections import deque
from collections.abc import Iterator

import torch

from jobio.errors import ExpectedError
from measurement.timing import synchronize

from .data_parallel import ONE_PROCESS, Processes, no_sync_unless
from .diffusion import GaussianDiffusion
from .placement import Placement
from .settings import TrainSettings

__all__ = ["DiffusionLoss", "NonFiniteLoss", "StepGraph", "Trainer", "TrainSettings", "cycle", "data_batches"]


class NonFiniteLoss(ExpectedError, FloatingPointError):
    """Training diverged: the first loss that is NaN or infinite stops it, before anything is written."""

    def __init__(self, value: float, step: int, micro_batch: int, settings: TrainSettings) -> None:
        super().__init__(
            f"training diverged: the loss is {value} at optimizer step {step}, micro-batch {micro_batch} of "
            f"{settings.gradient_accumulation} (numbered from 0, as the step and loss_micro_N columns of "
            f"train_steps.csv); nothing was written; fix: lower train.lr (now {settings.lr:g}), or check the "
            "variant's precision switches (autocast) and the prepared dataset"
        )
        self.step, self.micro_batch = step, micro_batch


def cycle(loader) -> Iterator:
    while True:
        yield from loader


class DiffusionLoss(torch.nn.Module):
    """The diffusion's training loss as a module's forward: what DistributedDataParallel wraps (it hooks the gradients
    of a module it calls). The diffusion stays the trainer's own module, so its state_dict keys stay those of a
    one-process run's checkpoint."""

    def __init__(self, diffusion: GaussianDiffusion):
        super().__init__()
        self.diffusion = diffusion

    def forward(self, target: torch.Tensor, condition: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.diffusion.loss(target, condition, generator)


class Trainer:
    """One `step()` = one optimizer step over `gradient_accumulation` micro-batches, then the EMA rule.

    With several `processes` (medddpm.data_parallel) this process runs its share of the step's micro-batches (and
    draws the random numbers of the others' without using them), its loss divided by its share, through
    DistributedDataParallel, which averages the gradients: the same optimizer step as the one-process loop's.

    `placement` (medddpm.placement) applies the variant: its optimizer and EMA kernels, the compilation of the U-Net
    and the layout and autocast of every micro-batch; `diffusion` comes placed (engine.Training). The EMA copy is
    taken before compiling, so it is a plain module with the same state_dict keys.
    """

    def __init__(
        self,
        diffusion: GaussianDiffusion,
        batches: Iterator[dict],
        placement: Placement,
        settings: TrainSettings,
        generator: torch.Generator,
        pin_memory: bool = False,
        processes: Processes = ONE_PROCESS,
    ):
        self.diffusion = diffusion
        self.batches = batches
        self.placement = placement
        self.device = placement.device
        self.settings = settings
        self.generator = generator
        self.pin_memory = pin_memory
        self.ema = placement.ema(settings.ema_decay)
        self.ema_model = copy.deepcopy(diffusion)
        self.optimizer = placement.optimizer(diffusion.parameters(), settings.lr)
        placement.compile(diffusion)
        self.compiled = placement.compiles
        self.processes = processes
        # This process's micro-batches of every step, numbered as the one-process loop numbers them.
        self.own = processes.share(settings.gradient_accumulation)
        self.micro_batches = len(self.own)
        # The loss a micro-batch's forward computes: the diffusion's own with one process (nothing between the loop
        # and the model), through DistributedDataParallel with several (it hooks the gradients of a module it calls).
        self.loss_module = diffusion.loss
        if processes.distributed:
            if placement.graph_capture:
                raise ValueError("a captured training step (StepGraph) cannot hold the gradients' all-reduce")
            self.loss_module = torch.nn.parallel.DistributedDataParallel(
                DiffusionLoss(diffusion), device_ids=[self.device.index] if self.device.type == "cuda" else None,
                **_constant_buffers())
        self._draw_like: torch.Tensor | None = None
        # The variant's stacked_micro_batches: the step's micro-batches as one batch (one process; the variant refuses
        # it beside data_parallel).
        self.stacked = placement.variant.stacked_micro_batches and not processes.distributed
        self.step_index = 0
        self._ready: deque[dict] = deque()
        # Whether `step` captures its graph after the first eager step (StepGraph; the placement then captures), and
        # the graph, replayed from then on.
        self.captures = placement.graph_capture
        self.graph: StepGraph | None = None

    def prefetch(self) -> None:
        """Assemble (and pin) this process's batches of the next optimizer step now, outside any timed region. Every
        process reads the step's batches in the shared order and keeps its own."""
        while len(self._ready) < self.micro_batches:
            for index in range(self.settings.gradient_accumulation):
                batch = next(self.batches)
                if index not in self.own:
                    continue
                if self.pin_memory:
                    batch = {key: value.pin_memory() for key, value in batch.items()}
                self._ready.append(batch)

    def _next_batch(self) -> dict:
        if not self._ready:
            self.prefetch()
        return self._ready.popleft()

    def _to_device(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        # From pinned memory the copy is asynchronous and the caching host allocator keeps the buffer until it ends.
        condition = self.placement.input(batch["input"], non_blocking=True)
        target = self.placement.input(batch["target"], non_blocking=True)
        return condition, target

    def loss(self, target: torch.Tensor, condition: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        with self.placement.autocast():
            loss = self.loss_module(target, condition, generator)
        return loss.sum() / target.shape[0]

    def accumulate(self, loss: torch.Tensor) -> None:
        """The backward of one of this process's micro-batches: its loss divided by the micro-batches this process
        accumulates (upstream's loss / gradient_accumulation with one process; with N, the average across processes
        makes up the other factor N)."""
        (loss / self.micro_batches).backward()

    def skip_draws(self, count: int, like: torch.Tensor) -> None:
        """Draw the random numbers of `count` micro-batches that other processes run (GaussianDiffusion.draw, as
        their loss does), so that this process's own draws are those of the one-process loop."""
        for _ in range(count):
            self.diffusion.draw(like, self.generator)

    def loss_at(self, target: torch.Tensor, condition: torch.Tensor, t: torch.Tensor,
                noise: torch.Tensor) -> torch.Tensor:
        """`loss` at steps and noise drawn beforehand (GaussianDiffusion.draw): the step a CUDA graph replays."""
        with self.placement.autocast():
            loss = self.diffusion.loss_at(target, condition, t, noise)
        return loss.sum() / target.shape[0]

    def item_losses_at(self, target: torch.Tensor, condition: torch.Tensor, t: torch.Tensor,
                       noise: torch.Tensor) -> torch.Tensor:
        """Each sample's loss at drawn steps and noise: a stacked step's micro-batches (one sample each), whose
        mean is upstream's accumulated loss (the mean of each micro-batch's loss / gradient_accumulation)."""
        with self.placement.autocast():
            return self.diffusion.item_losses_at(target, condition, t, noise)

    def stack(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Each tensor (one sample) repeated gradient_accumulation times along the batch, inputs in the variant's
        layout: the stacked step's shapes, for compiling and capturing ahead of the loop."""
        count = self.settings.gradient_accumulation
        return tuple(self.placement.input(torch.cat([x] * count)) for x in tensors)

    def stacked_inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(condition, target, t, noise) of the step's micro-batches stacked into one batch: each micro-batch's batch
        and draws (GaussianDiffusion.draw) in upstream's order, as the one-by-one loop takes them."""
        parts = []
        for _ in range(self.settings.gradient_accumulation):
            condition, target = self.next_inputs()
            parts.append((condition, target, *self.diffusion.draw(target, self.generator)))
        condition, target, t, noise = (torch.cat(column) for column in zip(*parts))
        return self.placement.input(condition), self.placement.input(target), t, noise

    def backward_stacked(self, target: torch.Tensor, condition: torch.Tensor, t: torch.Tensor,
                         noise: torch.Tensor) -> torch.Tensor:
        """Forward and backward of stacked micro-batches (one sample each): the backward of their losses' mean,
        upstream's accumulated loss. Each micro-batch's loss, detached (the eager step, the bare loop and the
        captured step all take the stacked step this way)."""
        losses = self.item_losses_at(target, condition, t, noise)
        losses.mean().backward()
        return losses.detach()

    def stacked_micro_batches(self) -> list[float]:
        """The step's micro-batches as one forward and backward (the variant's stacked_micro_batches); each
        micro-batch's loss, read once after the backward (the one-by-one loop reads each before its backward)."""
        condition, target, t, noise = self.stacked_inputs()
        values = self.backward_stacked(target, condition, t, noise).tolist()
        for index, value in enumerate(values):
            if not math.isfinite(value):
                raise NonFiniteLoss(value, self.step_index, index, self.settings)
        return values

    def next_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(condition, target) of the next micro-batch, on the device in the variant's layout (consumed)."""
        return self._to_device(self._next_batch())

    def micro_batch(self, index: int = 0) -> float:
        """The micro-batch numbered `index` in the step (one of this process's own), forward and backward."""
        condition, target = self.next_inputs()
        with no_sync_unless(index == self.own[-1], self.loss_module):
            loss = self.loss(target, condition, self.generator)
            # Upstream prints loss.item() every micro-batch: a host synchronisation that is part of the workload.
            value = loss.item()
            if not math.isfinite(value):
                raise NonFiniteLoss(value, self.step_index, index, self.settings)
            self.accumulate(loss)
        return value

    def step(self) -> list[float]:
        """One optimizer step; the loss of each of this process's micro-batches (every one with one process). Eager
        (upstream's loop), or replayed from the step's CUDA graph once it is captured: a placement that captures does
        so right after its first eager step."""
        if self.graph is not None:
            return self.replayed_step()
        losses = self.stacked_micro_batches() if self.stacked else self.own_micro_batches()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.end_step()
        if self.captures:
            self.graph = StepGraph(self)
        return losses

    def own_micro_batches(self) -> list[float]:
        """This process's micro-batches of the step one by one (every one with one process: upstream's loop), the
        other processes' draws taken and skipped around them."""
        if self.processes.distributed:
            self.skip_draws(self.own.start, self.draw_like())
        losses = [self.micro_batch(index) for index in self.own]
        if self.processes.distributed:
            self.skip_draws(self.settings.gradient_accumulation - self.own.stop, self.draw_like())
        return losses

    def replayed_step(self) -> list[float]:
        """The step replayed from its graph, with the losses read once after it (the eager loop reads each
        micro-batch's before its backward: one host synchronisation per step instead of one per micro-batch)."""
        step_index = self.step_index
        values = self.graph.replay().tolist()
        for index, value in enumerate(values):
            if not math.isfinite(value):
                raise NonFiniteLoss(value, step_index, index, self.settings)
        return values

    def draw_like(self) -> torch.Tensor:
        """A tensor of a micro-batch's shape on the device, for the draws of the other processes' micro-batches."""
        if self._draw_like is None:
            self.prefetch()
            self._draw_like = torch.empty(self._ready[0]["target"].shape, device=self.device)
        return self._draw_like

    def end_step(self) -> None:
        """What follows the optimizer's update every step: the EMA rule, the step count."""
        if self.step_index % self.settings.ema_update_every == 0:
            self.step_ema()
        self.step_index += 1

    def step_ema(self) -> None:
        if self.step_index < self.settings.ema_start_step:
            self.ema_model.load_state_dict(self.diffusion.state_dict())
        else:
            self.ema.update_model_average(self.ema_model, self.diffusion)

    def resident_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(condition, target) of the next batch, copied to the device, without consuming it."""
        self.prefetch()
        return self._to_device(self._ready[0])

    def warm_up_compiled(self) -> float | None:
        """Compile ahead of the loop (the U-Net's forward and backward, or the fused norm's kernels), on the real
        input shape with random numbers of its own (the loop's generator and data order stay untouched) and the
        gradients dropped after it. Returns the wall-clock seconds this took (compilation plus one micro-batch),
        None when nothing compiles."""
        if not self.compiled:
            return None
        condition, target = self.resident_batch()
        if self.stacked:  # compiled for the stacked step's batch
            condition, target = self.stack(condition, target)
        generator = torch.Generator(device=self.device).manual_seed(self.settings.seed + 7919)
        synchronize(self.device)
        started = time.perf_counter()
        self.loss(target, condition, generator).backward()
        synchronize(self.device)
        seconds = time.perf_counter() - started
        self.optimizer.zero_grad(set_to_none=True)
        return seconds

    def bare_step(self, condition: torch.Tensor, target: torch.Tensor, generator: torch.Generator) -> None:
        """One optimizer step as the bare loop of the upstream comparison: forward, backward and Adam on resident
        tensors, with no `loss.item()`, no EMA and no data loading."""
        if self.stacked:
            condition, target = self.stack(condition, target)
            self.backward_stacked(target, condition, *self.diffusion.draw(target, generator))
        else:
            for index in self.own:
                with no_sync_unless(index == self.own[-1], self.loss_module):
                    self.accumulate(self.loss(target, condition, generator))
        self.optimizer.step()
        self.optimizer.zero_grad()

    def checkpoint(self) -> dict:
        """Plain tensors and numbers only, so that `torch.load(..., weights_only=True)` reads it."""
        return {
            "step": self.step_index,
            "model": self.diffusion.state_dict(),
            "ema": self.ema_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
        }


class StepGraph:
    """A trainer's optimizer step captured in one CUDA graph: every micro-batch's forward and backward
    (`Trainer.loss_at`, the loss of each kept on the device) and Adam (capturable), launched as one graph.

    Captured after the first eager step, which initialised Adam's state and the allocator (compilation and cuDNN
    autotuning happened before it), on the current stream (a side stream of its own when that is the default one),
    with the gradients None: the first backward of every replay writes them, the next ones add, as in the eager loop.
    The static inputs are copies of a resident batch and throw-away draws; `replay` copies each micro-batch's batch and
    draws (GaussianDiffusion.draw from the trainer's generator, in upstream's order) into them, so a replayed step
    computes what the eager one would from the same batches. The data copies, the draws and the EMA rule stay eager.
    (torch.cuda.graph releases the caching allocator's free blocks before it captures: the graph's private pool then
    takes the memory the eager step had cached.)"""

    def __init__(self, trainer: Trainer):
        device = trainer.device
        started = time.perf_counter()
        self.trainer = trainer
        accumulation = trainer.settings.gradient_accumulation
        condition, target = trainer.resident_batch()
        t, noise = trainer.diffusion.draw(target, torch.Generator(device=device).manual_seed(0))
        if trainer.stacked:  # one batch of the micro-batches; each micro-batch's inputs a view of one sample of it
            stacked = (*trainer.stack(condition, target), *(torch.cat([v] * accumulation) for v in (t, noise)))
            self.static_inputs = [tuple(v[index:index + 1] for v in stacked) for index in range(accumulation)]
        else:
            self.static_inputs = [tuple(v.clone() for v in (condition, target, t, noise)) for _ in range(accumulation)]
        self.losses = torch.zeros(accumulation, device=device)
        trainer.optimizer.zero_grad(set_to_none=True)
        stream = torch.cuda.current_stream(device)
        stream.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        side = None if stream == torch.cuda.default_stream(device) else stream
        with torch.cuda.graph(self.graph, stream=side):
            if trainer.stacked:
                condition, target, t, noise = stacked
                self.losses.copy_(trainer.backward_stacked(target, condition, t, noise))
            else:
                for index, (condition, target, t, noise) in enumerate(self.static_inputs):
                    loss = trainer.loss_at(target, condition, t, noise)
                    self.losses[index].copy_(loss.detach())
                    (loss / accumulation).backward()
            trainer.optimizer.step()
        self.capture_seconds = time.perf_counter() - started

    def replay(self) -> torch.Tensor:
        """One optimizer step and the EMA rule after it; the micro-batches' losses, on the device (overwritten by
        the next replay)."""
        trainer = self.trainer
        for static in self.static_inputs:
            condition, target = trainer.next_inputs()
            t, noise = trainer.diffusion.draw(target, trainer.generator)
            for buffer, value in zip(static, (condition, target, t, noise)):
                buffer.copy_(value)
        self.graph.replay()
        trainer.end_step()
        return self.losses


def _constant_buffers() -> dict:
    """DistributedDataParallel's option that leaves the buffers alone at every forward (they are the diffusion's
    constant schedules, equal in every process): `forward_sync_buffers` where this torch has it (it deprecates
    `broadcast_buffers`), else `broadcast_buffers`."""
    parameters = inspect.signature(torch.nn.parallel.DistributedDataParallel).parameters
    return {"forward_sync_buffers": False} if "forward_sync_buffers" in parameters else {"broadcast_buffers": False}


def data_batches(dataset, seed: int) -> Iterator[dict]:
    """Shuffled batches of one case, cycling, in an order fixed by `seed` (the same for every variant)."""
    generator = torch.Generator().manual_seed(seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=1, shuffle=True, generator=generator)
    return cycle(loader)
