"""The workflow's measured jobs: training and sampling of one (hardware label, variant), written to files."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import time
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from jobio.errors import write_json, writing
from measurement import conditions, throughput
from measurement.timing import DeviceTimer, summary, synchronize

from . import compile_cache, data_parallel
from .build import ModelSpec
from .checkpoints import save_checkpoint, workload_record
from .dataset import HeldOut, PreparedPairs
from .engine import Sampling, Training, timed_steps
from .flops import step_flops
from .prepare import file_shape
from .runs import Run, peak_memory, reset_peak_memory
from .settings import SampleSettings, TrainSettings, as_dict
from .unet import parameter_count
from .variants import apply_backend, raise_recompile_limits


TRAINING_PHASES = {"warmup": "warm-up steps", "measured": "measured steps"}  # the progress bars' names


def bare_loop(training: Training, steps: int) -> dict | None:
    """Time `steps` optimizer steps of the bare loop (Trainer.bare_step on one resident batch) after one untimed
    step: the same measurement as the bare loop timed over the upstream code, for a like-for-like comparison. With
    several processes, each step's time is its slowest process's, the peak memory the largest process's."""
    if steps <= 0:
        return None
    trainer = training.trainer
    device = trainer.device
    condition, target = trainer.resident_batch()
    generator = torch.Generator(device=device).manual_seed(trainer.settings.seed + 1)
    # A replayed step leaves its gradients in place (the eager one sets them to None): the bare loop starts from none.
    trainer.optimizer.zero_grad(set_to_none=True)
    step = lambda: trainer.bare_step(condition, target, generator)  # noqa: E731
    step()
    reset_peak_memory(device)
    timer = DeviceTimer(device)
    for _ in timed_steps(step, 0, steps, timer):
        pass
    timing = summary(data_parallel.largest(timer.elapsed_ms(), trainer.processes))
    per_step = trainer.settings.gradient_accumulation
    return {"step_time": timing, "ms_per_sample": timing["median_ms"] / per_step,
            **largest_peak_memory(device, trainer.processes)}


def largest_peak_memory(device: torch.device, processes: data_parallel.Processes) -> dict:
    """peak_memory of this process, or the largest of every process's (each holds a whole model on its own GPU)."""
    memory = peak_memory(device)
    sizes = [key for key in ("peak_memory_bytes", "peak_memory_reserved_bytes") if key in memory]
    for key, value in zip(sizes, data_parallel.largest([float(memory[key]) for key in sizes], processes)):
        memory[key] = int(value)
    return memory


def run_training(model_spec: ModelSpec, train: TrainSettings, run: Run, dataset_dir: Path, out_json: Path,
                 out_steps: Path, out_ckpt: Path) -> None:
    """The training job: one process, or the variant's `data_parallel` processes on one node, one GPU each
    (medddpm.data_parallel), of which process 0 writes the job's outputs."""
    size = run.variant.data_parallel
    if size == 1:
        train_and_write(model_spec, train, run, dataset_dir, out_json, out_steps, out_ckpt)
        return
    if run.device.type == "cuda":
        data_parallel.check_gpus(run.variant.name, size, torch.cuda.device_count())
    data_parallel.spawn(train_in_process, size, model_spec, train, run, dataset_dir, out_json, out_steps, out_ckpt)


def train_in_process(rank: int, size: int, rendezvous: Path, model_spec: ModelSpec, train: TrainSettings, run: Run,
                     dataset_dir: Path, out_json: Path, out_steps: Path, out_ckpt: Path) -> None:
    """Process `rank` of a data-parallel training job, on its own GPU (a new process: the variant's backend switches
    are set again)."""
    apply_backend(run.variant)
    run = dataclasses.replace(run, device=data_parallel.device_of(rank, run.device.type))
    processes = data_parallel.join(rank, size, rendezvous, run.device)
    try:
        train_and_write(model_spec, train, run, dataset_dir, out_json, out_steps, out_ckpt, processes)
    finally:
        data_parallel.leave()


def train_and_write(model_spec: ModelSpec, train: TrainSettings, run: Run, dataset_dir: Path, out_json: Path,
                    out_steps: Path, out_ckpt: Path,
                    processes: data_parallel.Processes = data_parallel.ONE_PROCESS) -> None:
    """Warm-up and timed steps of one process of the job; process 0 writes the steps CSV, the checkpoint and
    train.json. Every process times its own steps; a step's time is that of its slowest process."""
    writes = processes.rank == 0
    training = Training(model_spec, train, run, dataset_dir, processes=processes)
    reset_peak_memory(run.device)
    # Compilation happens here, before the warm-up steps and outside every timed region.
    with compile_cache.counting() as cache:
        compile_seconds = training.warm_up()
    timer = DeviceTimer(run.device)
    before, load = conditions.snapshot(run.device), conditions.OtherLoad()
    load.start()
    rows = [
        # Every micro-batch's loss, each process's own gathered in the one-process order (after the timed step).
        {"step": training.trainer.step_index - 1, "phase": phase, "losses": data_parallel.gathered(losses, processes)}
        for phase, losses in timed_steps(
            training.step, train.warmup_steps, train.measured_steps, timer,
            prepare=training.prepare,  # batch assembly and pinning, as upstream's loader workers do
            progress=lambda phase, count: tqdm(range(count), desc=TRAINING_PHASES[phase], mininterval=5,
                                               disable=not writes),
        )
    ]
    step_ms = data_parallel.largest(timer.elapsed_ms(), processes)
    # Process 0's machine conditions (its GPU); the job's other processes count among the other load of the cores.
    timed_conditions = conditions.measured(before, load, run.device)
    memory = largest_peak_memory(run.device, processes)
    measured = [row for row in rows if row["phase"] == "measured"]
    for row, ms in zip(measured, step_ms):
        row["step_ms"] = ms
    steps = pd.DataFrame(
        [
            {
                "step": row["step"],
                "phase": row["phase"],
                "step_ms": row.get("step_ms"),
                "loss": sum(row["losses"]) / len(row["losses"]),
                **{f"loss_micro_{i}": value for i, value in enumerate(row["losses"])},
            }
            for row in rows
        ]
    )
    trainer = training.trainer
    if writes:
        with writing(out_steps):
            steps.to_csv(out_steps, index=False)
        save_checkpoint({**trainer.checkpoint(), "workload": workload_record(model_spec)}, out_ckpt)
    bare = bare_loop(training, train.bare_loop_steps)  # after the checkpoint: it changes the weights
    if not writes:
        return
    timing = summary(step_ms)
    samples_per_step = train.gradient_accumulation  # batch size 1, as upstream
    shape = file_shape(PreparedPairs(dataset_dir, "train").images[0])
    write_json(
        out_json,
        {
            "provenance": run.provenance,
            "parameters": parameter_count(trainer.diffusion.denoiser),
            "volume_shape": shape,
            "flops": step_flops(model_spec.unet, tuple(shape), run.variant.checkpointing),
            "settings": as_dict(train),
            # Processes (one GPU each) that trained: each ran gradient_accumulation / data_parallel micro-batches of
            # every step, and every time below is the slowest process's.
            "data_parallel": processes.size,
            "step_time": timing,
            "micro_batch_median_ms": timing["median_ms"] / samples_per_step,
            "train_ms_per_sample": timing["median_ms"] / samples_per_step,
            "samples_per_second": 1e3 * samples_per_step / timing["median_ms"],
            "final_loss": float(steps["loss"].iloc[-1]),
            "compile_seconds": compile_seconds,
            # Inductor's cache lookups during that compilation (medddpm.compile_cache): a warm cache's time is not a
            # cold compile's.
            "compile_cache": cache if compile_seconds is not None else None,
            # Capturing the optimizer step's CUDA graph (cuda_graph_training), in the first warm-up step; None without.
            "graph_capture_seconds": trainer.graph.capture_seconds if trainer.graph is not None else None,
            "bare_loop": bare,
            "bare_loop_ms_per_sample": bare["ms_per_sample"] if bare else None,
            "conditions": timed_conditions,
            **memory,
        },
    )


def run_sampling(model_spec: ModelSpec, sample: SampleSettings, run: Run, checkpoint: Path, dataset_dir: Path,
                 out_json: Path, out_steps: Path, out_volumes: list[Path]) -> None:
    sampling = Sampling.from_checkpoint(model_spec, run, checkpoint, "ema")
    timesteps = sampling.diffusion.num_timesteps
    held_out = HeldOut(dataset_dir, len(out_volumes))
    max_steps = sample.max_steps
    chain = sampling.chain_length(max_steps)
    reset_peak_memory(run.device)
    held_conditions = held_out.conditions(sampling.placement)
    with compile_cache.counting() as cache:
        warm_seconds = sampling.warm_up(held_conditions[0], sample.seed)
    rows = []
    before, load = conditions.snapshot(run.device), conditions.OtherLoad()
    load.start()
    for index, (condition, out_path) in enumerate(zip(held_conditions, out_volumes)):
        generator = torch.Generator(device=run.device).manual_seed(sample.seed + index)
        timer = DeviceTimer(run.device)
        steps = sampling.chain(condition, generator, max_steps)
        with sampling.running():
            for _, (_, volume) in timed_steps(lambda: next(steps), 0, chain, timer, progress=lambda _, count: tqdm(
                    range(count), desc=f"sampling {held_out.masks[index].name}", mininterval=5)):
                pass
        for position, ms in enumerate(timer.elapsed_ms()):
            rows.append({"volume": index, "position": position, "t": timesteps - 1 - position, "step_ms": ms})
        held_out.write(volume, index, out_path)
    warmed = sampling.compiled or sampling.evaluate.graphs  # the warm-up compiled or captured something
    # What the chains measured, read before the throughput sweep adds its batches' memory and graph captures.
    timed_conditions = conditions.measured(before, load, run.device)
    memory, captures = peak_memory(run.device), sampling.evaluate.captures
    sweep = throughput_sweep(sampling, sample, dataset_dir)
    steps_table = pd.DataFrame(rows)
    with writing(out_steps):
        steps_table.to_csv(out_steps, index=False)
    timed = steps_table[steps_table["position"] >= sample.warmup_steps]["step_ms"]
    per_volume = steps_table.groupby("volume")["step_ms"].sum()
    timing = summary(list(timed))
    write_json(
        out_json,
        {
            "provenance": run.provenance,
            "volume_shape": held_out.shape(),
            "settings": as_dict(sample),
            "timesteps": timesteps,
            "chain_steps_run": chain,
            "chain_complete": chain == timesteps,
            "step_time": timing,
            "volumes": len(out_volumes),
            "volume_seconds_measured": [float(v) / 1e3 for v in per_volume],
            # Median step time x T: the full-chain cost, also when a timing run stopped chains early.
            "volume_seconds_estimate": timing["median_ms"] * timesteps / 1e3,
            # Compilation (the U-Net, or the fused norm's kernels) and CUDA graph capture, with the few evaluations
            # they run, before any chain: null when the variant neither compiles nor captures on this device.
            "compile_seconds": warm_seconds if warmed else None,
            "compile_cache": cache if warmed else None,
            "cuda_graph_captures": captures,
            "conditions": timed_conditions,
            **memory,
            "throughput": sweep,
        },
    )


# -- throughput: volumes per hour at several batch sizes -------------------------------------------------------------
def throughput_sweep(sampling: Sampling, sample: SampleSettings, dataset_dir: Path) -> dict:
    """sample.json's `throughput` (measurement.throughput describes it): the variant's sampling step timed at each of
    `sample.batch_sizes`, in increasing order. A batch that raises torch.cuda.OutOfMemoryError is recorded as not
    fitting (no time of it is kept), its memory is freed, and the larger batches are skipped."""
    device = sampling.placement.device
    held_out = HeldOut(dataset_dir)
    mask_conditions = [held_out.condition(index) for index in range(len(held_out))]
    if sampling.compiled:
        room_for_batch_shapes(len(sample.batch_sizes))
    batches: list[dict] = []
    too_large: int | None = None
    for batch in sorted(sample.batch_sizes):
        if too_large is not None:
            batches.append({"batch": batch, "fits": None, "skipped": f"batch {too_large} did not fit in memory"})
            continue
        try:
            record = timed_batch(sampling, mask_conditions, batch, sample)
        except torch.cuda.OutOfMemoryError as error:
            message = str(error).strip().splitlines() or [type(error).__name__]
            record = {"batch": batch, "fits": False, "error": message[0][:300]}
            too_large = batch
        if too_large == batch:  # out of the except block: its traceback, and the batch's tensors, are released
            free_memory(device)
        batches.append(record)
    best_batch, best_rate = throughput.best_batch(batches)
    return {"timesteps": sampling.diffusion.num_timesteps, "masks": len(mask_conditions), "batches": batches,
            "best_batch": best_batch, "volumes_per_hour_best": best_rate}


def timed_batch(sampling: Sampling, mask_conditions: list[torch.Tensor], batch: int,
                sample: SampleSettings) -> dict:
    """The sampling step at `batch` volumes: `batch` held-out masks' conditions (repeated in turn where there are
    fewer), noise drawn as a chain draws it, then `sample.throughput_warmup_steps` untimed steps (compilation and CUDA graph
    capture for these shapes) and `sample.throughput_steps` timed ones through Sampling.step, the chain's step, at
    t = T - 1, T - 2, ... as a chain runs them (never the cheaper last step, t = 0, unless T = 1)."""
    device = sampling.placement.device
    timesteps = sampling.diffusion.num_timesteps
    condition = sampling.placement.input(torch.stack([mask_conditions[k % len(mask_conditions)]
                                                      for k in range(batch)]))
    generator = torch.Generator(device=device).manual_seed(sample.seed + batch)
    shape = (batch, sampling.diffusion.channels, *condition.shape[2:])
    x = [sampling.placement.input(torch.randn(shape, device=device, generator=generator))]
    steps = itertools.cycle(range(timesteps - 1, 0, -1) if timesteps > 1 else [0])

    def step() -> None:
        x[0] = sampling.step(x[0], condition, next(steps), generator)

    reset_peak_memory(device)
    timer = DeviceTimer(device)
    captures = sampling.evaluate.captures
    with sampling.running():
        synchronize(device)
        started = time.perf_counter()
        for _ in timed_steps(step, sample.throughput_warmup_steps, 0, timer):
            pass
        synchronize(device)
        warmup_seconds = time.perf_counter() - started
        captured = sampling.evaluate.captures - captures
        for _ in timed_steps(step, 0, sample.throughput_steps, timer, progress=lambda _, count: tqdm(
                range(count), desc=f"throughput at batch {batch}", mininterval=5)):
            pass
    step_ms = timer.elapsed_ms()
    if sampling.evaluate.captures != captures + captured:
        raise RuntimeError(f"batch {batch}: a CUDA graph was captured inside the timed steps (raise "
                           "sample.throughput_warmup_steps)")
    timing = summary(step_ms)
    rate = lambda ms: throughput.volumes_per_hour(batch, ms, timesteps)  # noqa: E731
    return {
        "batch": batch,
        "fits": True,
        "step_time": timing,
        "volume_seconds": timing["median_ms"] * timesteps / 1e3 / batch,  # a full chain's share of one volume
        "volumes_per_hour": rate(timing["median_ms"]),
        # Its spread: the rate at the step time's upper quartile, and at its lower one.
        "volumes_per_hour_iqr": [rate(timing["q3_ms"]), rate(timing["q1_ms"])],
        "warmup_seconds": warmup_seconds,
        "cuda_graph_captures": captured,
        **peak_memory(device),
    }


def room_for_batch_shapes(batch_sizes: int) -> None:
    """A compiled evaluation compiles one static-shape graph per shape (the U-Net's, or each fused norm's); every
    batch size adds as many as the chains needed. Raise dynamo's per-function and total recompile limits to match, so
    that no batch falls back to eager silently."""
    raise_recompile_limits(1 + batch_sizes)


def free_memory(device: torch.device) -> None:
    """Release what a batch that did not fit left allocated, before the job goes on."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
