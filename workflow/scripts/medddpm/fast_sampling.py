"""The fast samplers' timing job of one (hardware label, variant): every sampler of the config's `samplers` at each of
its step counts, whole chains timed at each batch size of fast_sampling.batch_sizes, on the variant's own evaluation path
(compiled, CUDA graphs: engine.Sampling) with the trained EMA weights.

One job for all of them: the U-Net evaluation is the same function whatever the sampler, so it is compiled and its
CUDA graphs captured once per shape (the warm-up and each batch's untimed chain), and every sampler's chains then
replay them. A chain is timed as a whole, from its first evaluation to its last update (the updates run eagerly
between the evaluations: a few element-wise kernels a step, inside the time). The quality of each sampler is the
quality study's (medddpm.study): on its trained models, against the T-step chain of the same run.

File: results/<workload>/<label>/<variant>/samplers.json: per sampler and step count the chain's seconds per volume,
volumes per hour at each batch size (3600 x batch / chain seconds) and the best, peak memory.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tqdm import tqdm

from jobio.errors import write_json
from measurement import throughput
from measurement.timing import DeviceTimer, summary

from . import compile_cache
from .build import ModelSpec
from .dataset import HeldOut
from .engine import Sampling
from .jobs import free_memory, room_for_batch_shapes
from .runs import Run, peak_memory, reset_peak_memory
from .samplers import build_sampler
from .settings import SampleSettings, as_dict


def timed_chains(sampling: Sampling, sampler, condition: torch.Tensor, chains: int, seed: int) -> dict:
    """One untimed chain (compilation and graph capture for the shapes), then `chains` timed ones, each
    from its own noise; the chains' seconds and the peak memory."""
    device = sampling.placement.device
    seconds = []
    reset_peak_memory(device)
    with sampling.running():
        for chain in range(1 + chains):
            generator = torch.Generator(device=device).manual_seed(seed + chain)
            timer = DeviceTimer(device)
            started = timer.start()
            for _ in sampling.fast_chain(sampler, condition, generator):
                pass
            timer.stop(started)
            if chain:
                seconds.append(timer.elapsed_ms()[0] / 1e3)
    return {"chain_seconds": summary([1e3 * s for s in seconds]), **peak_memory(device)}


def sampler_record(sampling: Sampling, name: str, steps: int, mask_conditions: list[torch.Tensor],
                   sample: SampleSettings, chains: int, batch_sizes: list[int]) -> dict:
    """One sampler at one step count: its chains at every batch size (a batch that does not fit is recorded so, and
    the larger ones are skipped), volumes per hour at each and the best."""
    sampler = build_sampler(name, sampling.diffusion, steps)
    device = sampling.placement.device
    batches, too_large = [], None
    for batch in sorted(batch_sizes):
        if too_large is not None:
            batches.append({"batch": batch, "fits": None, "skipped": f"batch {too_large} did not fit in memory"})
            continue
        condition = sampling.placement.input(torch.stack([mask_conditions[k % len(mask_conditions)]
                                                          for k in range(batch)]))
        try:
            timed = timed_chains(sampling, sampler, condition, chains, sample.seed + 1000 * batch)
        except torch.cuda.OutOfMemoryError as error:
            message = str(error).strip().splitlines() or [type(error).__name__]
            timed, too_large = {"error": message[0][:300]}, batch
        if too_large == batch:
            free_memory(device)
            batches.append({"batch": batch, "fits": False, **timed})
            continue
        chain_s = timed["chain_seconds"]["median_ms"] / 1e3
        batches.append({"batch": batch, "fits": True, **timed, "seconds_per_volume": chain_s / batch,
                        "volumes_per_hour": 3600 * batch / chain_s})
    best_batch, best_rate = throughput.best_batch(batches)
    one = next((b for b in batches if b["batch"] == 1 and b.get("fits")), None)
    return {"sampler": name, "steps": steps, "evaluations": sampler.evaluations, "batches": batches,
            "seconds_per_volume": one["seconds_per_volume"] if one else None,
            "volumes_per_hour_b1": one["volumes_per_hour"] if one else None,
            "best_batch": best_batch, "volumes_per_hour_best": best_rate}


def run_fast_sampling(model_spec: ModelSpec, sample: SampleSettings, samplers: dict[str, list[int]], chains: int,
                      batch_sizes: list[int], run: Run, checkpoint: Path, dataset_dir: Path, out_json: Path) -> None:
    sampling = Sampling.from_checkpoint(model_spec, run, checkpoint, "ema")
    held_out = HeldOut(dataset_dir)
    mask_conditions = [held_out.condition(index) for index in range(len(held_out))]
    if sampling.compiled:
        room_for_batch_shapes(len(batch_sizes))
    with compile_cache.counting() as cache:
        warm_seconds = sampling.warm_up(sampling.placement.input(mask_conditions[0].unsqueeze(0)), sample.seed)
    pairs = [(name, steps) for name, counts in samplers.items() for steps in counts]
    records = [sampler_record(sampling, name, steps, mask_conditions, sample, chains, batch_sizes)
               for name, steps in tqdm(pairs, desc="fast samplers", mininterval=5)]
    write_json(out_json, {
        "provenance": run.provenance,
        "volume_shape": held_out.shape(),
        "timesteps": sampling.diffusion.num_timesteps,
        "settings": {"sample": as_dict(sample), "samplers": samplers, "chains": chains, "batch_sizes": batch_sizes},
        "compile_seconds": warm_seconds if (sampling.compiled or sampling.evaluate.graphs) else None,
        "compile_cache": cache,
        "cuda_graph_captures": sampling.evaluate.captures,
        "samplers": records,
    })
