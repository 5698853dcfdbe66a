"""Data-parallel training on the processes of one node (the variant's `data_parallel` switch).

Upstream's optimizer step accumulates the gradients of `train.gradient_accumulation` micro-batches of batch 1. With N
processes (a GPU each; on a CPU each with its share of the cores), process r runs micro-batches r*m .. (r+1)*m - 1 of
every step (m = gradient_accumulation / N), draws the random numbers of the others without using them (so that its
own draws are those the one-process loop draws for them), divides each loss by m, and DistributedDataParallel
averages the gradients across the N processes: (1/N) sum_r sum_j g_rj / m = sum_i g_i / gradient_accumulation, the
one-process step. Every process then takes the same Adam step and EMA rule; only process 0 writes.

Processes are started by `spawn` (torch.multiprocessing) from the job's own script, with their rendezvous in a file of
a temporary folder: the rule stays a `script:` rule like every other measured job (its params, log and provenance), a
port cannot clash with another job's on the same node, and nothing beyond one node is needed (torchrun's elastic
agent adds restarts and multi-node rendezvous, which a measurement must not do silently).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from jobio.errors import ExpectedError


@dataclass(frozen=True)
class Processes:
    """This process's place among the job's processes: its rank and how many there are."""

    rank: int = 0
    size: int = 1

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def share(self, micro_batches: int) -> range:
        """The micro-batches of an optimizer step that this process runs (numbered as the one-process loop does)."""
        if micro_batches % self.size:
            raise ValueError(f"{self.size} processes cannot share {micro_batches} micro-batches equally")
        each = micro_batches // self.size
        return range(self.rank * each, (self.rank + 1) * each)


ONE_PROCESS = Processes()


def backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def device_of(rank: int, kind: str) -> torch.device:
    """Process `rank`'s device: its own GPU of the node, or the CPU."""
    return torch.device("cuda", rank) if kind == "cuda" else torch.device("cpu")


def check_gpus(variant: str, asked: int, found: int) -> None:
    """One line when the node has fewer GPUs than the variant's processes."""
    if asked > found:
        raise ExpectedError(
            f"variant {variant!r} trains with data_parallel {asked} processes, one GPU each, but this job sees "
            f"{found} GPU(s) (CUDA_VISIBLE_DEVICES or the allocation); fix: run it where {asked} GPUs of one node are "
            f"free (--resources gpu={asked} locally, or the SLURM profiles, which ask gpu: {asked} and one node), or "
            "leave it out of run_variants"
        )


def join(rank: int, size: int, rendezvous: Path, device: torch.device) -> Processes:
    """Join the job's process group (the rendezvous file is shared by its processes, and by no other job)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend(device), init_method=rendezvous.as_uri(), rank=rank, world_size=size)
    return Processes(rank, size)


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def spawn(function: Callable, size: int, *args) -> None:
    """Run `function(rank, size, rendezvous, *args)` in `size` new processes and wait for all of them. A process
    that raises stops the others; its ExpectedError is raised here with its one line, anything else as
    torch.multiprocessing's ProcessRaisedException, with the process's traceback."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="medddpm-rendezvous-") as folder:
        try:
            mp.spawn(_process, args=(function, size, Path(folder), args), nprocs=size, join=True)
        except mp.ProcessRaisedException:
            told = sorted(Path(folder).glob("expected-error-*.txt"))
            if told:
                raise ExpectedError(told[0].read_text()) from None
            raise


def _process(rank: int, function: Callable, size: int, folder: Path, args: tuple) -> None:
    """A spawned process: `function`, its ExpectedError's message left in `folder` for the parent to raise."""
    try:
        function(rank, size, folder / "rendezvous", *args)
    except ExpectedError as error:
        (folder / f"expected-error-{rank}.txt").write_text(str(error))
        raise


def largest(values: list[float], processes: Processes) -> list[float]:
    """Element by element, the largest of every process's `values`: the step times (a step ends when its slowest
    process ends) and the peak memory (each process holds a whole model on its own GPU)."""
    if not processes.distributed:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def gathered(values: list[float], processes: Processes) -> list[float]:
    """Every process's `values` (each its own micro-batches' losses), in rank order: the order of the one-process
    loop's micro-batches."""
    if not processes.distributed:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=_collective_device())
    parts = [torch.empty_like(tensor) for _ in range(processes.size)]
    dist.all_gather(parts, tensor)
    return torch.cat(parts).tolist()


def _collective_device() -> torch.device:
    """Where a collective's tensors live: NCCL reduces CUDA tensors only."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def no_sync_unless(last: bool, module) -> contextlib.AbstractContextManager:
    """DistributedDataParallel's `no_sync` for every micro-batch of a process but its last: the gradients are averaged
    across processes once per optimizer step, after the last backward."""
    if last or not isinstance(module, torch.nn.parallel.DistributedDataParallel):
        return contextlib.nullcontext()
    return module.no_sync()
