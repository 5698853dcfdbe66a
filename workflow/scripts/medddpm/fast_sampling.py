"""The fast samplers' timing job of one (hardware label, variant): every sampler of the config's `samplers` at each of
its step counts, whole chains timed at each batch size of fast_sampling.batch_sizes, on the variant's own evaluation
path (compiled, CUDA graphs: engine.Sampling) with the trained EMA weights; at batch 1 beside them the T-step chain
(`ddpm`) itself, so that each sampler's speed-up over the chain is paired.

One job for all of them: the U-Net evaluation is the same function whatever the sampler, so it is compiled and its
CUDA graphs captured once per shape (in the untimed steps that open each batch size), and every sampler's chains then
replay them. A chain is timed as a whole, from its first evaluation to its last update (the updates run eagerly
between the evaluations: a few element-wise kernels a step, inside the time). The chains run in rounds: each round
times every sampler once, in an order that rotates from round to round, from the round's own noise, so that a change
of load hits every sampler of a round alike (measurement.pairing: the speed-up over the chain is the median of the
rounds' ratios, with the sign test's interval once there are enough rounds). The quality of each sampler is the
quality study's (medddpm.study): on its trained models, against the T-step chain of the same run.

File: results/<workload>/<label>/<variant>/samplers.json: per sampler and step count the chain's seconds per volume,
volumes per hour at each batch size (3600 x batch / chain seconds) and the best, peak memory, every round's seconds,
and at batch 1 the speed-up over the T-step chain with its interval and verdict.
"""

from __future__ import annotations

import gc
import statistics
from pathlib import Path

import torch
from tqdm import tqdm

from jobio.errors import write_json
from measurement import pairing, throughput
from measurement.timing import DeviceTimer, summary

from . import compile_cache
from .build import ModelSpec
from .dataset import HeldOut
from .engine import Sampling
from .jobs import free_memory, room_for_batch_shapes
from .runs import Run, peak_memory, reset_peak_memory
from .samplers import Sampler, build_sampler
from .settings import ComparisonSettings, SampleSettings, as_dict


CHAIN = "ddpm"
# Untimed steps of every sampler before the rounds. Compilation and CUDA graph capture happen at a batch size's first
# U-Net evaluation, whatever the sampler; what a sampler adds (its update's kernels, a multistep method's first
# lower-order step) comes in its first two. Whole untimed chains cost one round more (about 46 s of the paper
# configuration's H200 job, where 250 of a round's 515 evaluations are the T-step chain's).
WARM_UP_STEPS = 2


def timed_rounds(sampling: Sampling, samplers: dict[tuple[str, int], Sampler], condition: torch.Tensor, rounds: int,
                 seed: int) -> tuple[dict[tuple[str, int], list[float]], dict]:
    """The first WARM_UP_STEPS steps of every sampler untimed (the first compiles and captures for the shape, each
    meets its own update's first steps), then `rounds` rounds, each timing one whole chain of every sampler in a
    rotating order from the round's own noise. Returns each sampler's rounds' seconds (in round order) and the peak
    memory of the batch: every sampler evaluates the same U-Net through the same graphs, so the batch's peak, from its
    first steps on, is each sampler's (a sampler's own chain after the first would miss the graphs' memory, allocated
    once)."""
    device = sampling.placement.device
    keys = list(samplers)
    seconds = {key: [] for key in keys}
    reset_peak_memory(device)
    with sampling.running():
        for key in keys:
            for _ in sampling.fast_chain(samplers[key], condition, torch.Generator(device=device).manual_seed(seed),
                                         WARM_UP_STEPS):
                pass
        for index in range(rounds):
            for key in keys[index % len(keys):] + keys[:index % len(keys)]:
                generator = torch.Generator(device=device).manual_seed(seed + 1 + index)
                # Outside the timed region: a garbage collection that the previous chain's objects would otherwise set
                # off inside this one (on an H200 the chain timed right after the 250-step one paid about 0.1 s).
                gc.collect()
                timer = DeviceTimer(device)
                started = timer.start()
                for _ in sampling.fast_chain(samplers[key], condition, generator):
                    pass
                timer.stop(started)
                seconds[key].append(timer.elapsed_ms()[0] / 1e3)
    return seconds, peak_memory(device)


def batch_record(batch: int, seconds: list[float], peak: dict) -> dict:
    chain_s = statistics.median(seconds)
    return {"batch": batch, "fits": True, "chain_seconds": summary([1e3 * s for s in seconds]),
            "round_seconds": seconds, "seconds_per_volume": chain_s / batch, "volumes_per_hour": 3600 * batch / chain_s,
            **peak}


def against_chain(chain: list[float], fast: list[float], comparison: ComparisonSettings) -> dict:
    """The chain's seconds over the sampler's, paired by round, with its interval and verdict (measurement.pairing)."""
    ratio = pairing.paired_ratio(chain, fast, comparison.confidence)
    verdict = pairing.verdict(ratio, comparison.band, comparison.precision)
    return {"rounds": ratio.rounds, "speedup": ratio.speedup, "low": ratio.low, "high": ratio.high,
            "coverage": ratio.coverage, "verdict": verdict,
            "why": pairing.undecided_reason(ratio, comparison.confidence, comparison.band, comparison.precision)
            if verdict in pairing.UNDECIDED else None}


def sampler_records(sampling: Sampling, samplers: dict[str, list[int]], mask_conditions: list[torch.Tensor],
                    sample: SampleSettings, chains: int, batch_chains: int, batch_sizes: list[int],
                    comparison: ComparisonSettings) -> list[dict]:
    """Every sampler at every step count and batch size (a batch that does not fit is recorded so, and the larger ones
    are skipped), the T-step chain beside them at batch 1; volumes per hour at each batch and the best. `chains`
    rounds at batch 1, where each sampler is paired with the chain; `batch_chains` at the larger batches, which give
    volumes per hour only."""
    device = sampling.placement.device
    timesteps = sampling.diffusion.num_timesteps
    keys = [(name, steps) for name, counts in samplers.items() for steps in counts]
    built = {key: build_sampler(key[0], sampling.diffusion, key[1]) for key in [(CHAIN, timesteps), *keys]}
    batches: dict[tuple[str, int], list[dict]] = {key: [] for key in built}
    too_large = None
    for batch in tqdm(sorted(batch_sizes), desc="fast samplers, per batch size", mininterval=5):
        timed_keys = [(CHAIN, timesteps), *keys] if batch == 1 else keys
        if too_large is not None:
            for key in timed_keys:
                batches[key].append({"batch": batch, "fits": None, "skipped": f"batch {too_large} did not fit in memory"})
            continue
        condition = sampling.placement.input(torch.stack([mask_conditions[k % len(mask_conditions)]
                                                          for k in range(batch)]))
        try:
            timed, peak = timed_rounds(sampling, {key: built[key] for key in timed_keys}, condition,
                                       chains if batch == 1 else batch_chains, sample.seed + 1000 * batch)
        except torch.cuda.OutOfMemoryError as error:
            message = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
            too_large = batch
            free_memory(device)
            for key in timed_keys:
                batches[key].append({"batch": batch, "fits": False, "error": message})
            continue
        for key in timed_keys:
            batches[key].append(batch_record(batch, timed[key], peak))
    chain_one = next((b for b in batches[(CHAIN, timesteps)] if b.get("fits")), None)
    records = []
    for key, sampler in built.items():
        best_batch, best_rate = throughput.best_batch(batches[key])
        one = next((b for b in batches[key] if b["batch"] == 1 and b.get("fits")), None)
        paired = (against_chain(chain_one["round_seconds"], one["round_seconds"], comparison)
                  if one and chain_one and key[0] != CHAIN else None)
        records.append({"sampler": key[0], "steps": key[1], "evaluations": sampler.evaluations,
                        "batches": batches[key],
                        "seconds_per_volume": one["seconds_per_volume"] if one else None,
                        "volumes_per_hour_b1": one["volumes_per_hour"] if one else None,
                        "best_batch": best_batch, "volumes_per_hour_best": best_rate, "vs_chain": paired})
    return records


def run_fast_sampling(model_spec: ModelSpec, sample: SampleSettings, samplers: dict[str, list[int]], chains: int,
                      batch_chains: int, batch_sizes: list[int], comparison: ComparisonSettings, run: Run, checkpoint: Path, dataset_dir: Path, out_json: Path) -> None:
    sampling = Sampling.from_checkpoint(model_spec, run, checkpoint, "ema")
    held_out = HeldOut(dataset_dir)
    mask_conditions = [held_out.condition(index) for index in range(len(held_out))]
    if sampling.compiled:
        room_for_batch_shapes(len(batch_sizes))
    with compile_cache.counting() as cache:
        warm_seconds = sampling.warm_up(sampling.placement.input(mask_conditions[0].unsqueeze(0)), sample.seed)
    records = sampler_records(sampling, samplers, mask_conditions, sample, chains, batch_chains, batch_sizes,
                              comparison)
    write_json(out_json, {
        "provenance": run.provenance,
        "volume_shape": held_out.shape(),
        "timesteps": sampling.diffusion.num_timesteps,
        "settings": {"sample": as_dict(sample), "samplers": samplers, "chains": chains, "batch_chains": batch_chains,
                     "batch_sizes": batch_sizes,
                     "comparison": {"confidence": comparison.confidence, "band": comparison.band}},
        "compile_seconds": warm_seconds if (sampling.compiled or sampling.evaluate.graphs) else None,
        "compile_cache": cache,
        "cuda_graph_captures": sampling.evaluate.captures,
        "samplers": records,
    })
