"""The quality study: does a variant change what the trained model synthesises?

Every variant trains its own model from every seed of the study (the same seeds for every variant: the same initial
weights, data order and training noise, so a variant and the baseline pair by seed), for the same number of optimizer
steps of the upstream loop (Adam, gradient accumulation, EMA), with deterministic algorithms where the study asks for
them (the same seed then gives the same model bit for bit, and a paired difference is the variant's effect alone).
The seeds of one variant train together in one job (ensemble.Ensemble). Each run samples the first held-out masks
from the same noise through its own sampling path and is measured against the held-out real images of those masks;
a second job per hardware label compares every run with the baseline's run of the same seed (the baseline's own
seeds with its first): samples from the same noise and mask, and the loss curve. The verdict pairs the runs by seed
(data/paper_claims.yaml, reporting.claims).

Files of one run, `<root>/<workload>/<label>/study/<variant>/seed<k>/` (`<root>` is results/ when measured,
data/reference/ when shipped; the samples are never shipped):
  run.json          budget and settings, the job's training time and this run's share, sampling time, float64 errors
                    at the trained weights, the samples against the real images (3D SSIM, PSNR, Wasserstein distance
                    per label, lesion contrast); the baseline's first seed also `rerun` (the same seed trained again)
  losses.csv        the training loss of every optimizer step (and its micro-batches)
  slice.npy         float32 (2, H, W): the middle axial slice of the first sample and of the real image of its mask
  comparison.json   against the baseline's run of the same seed: samples from the same noise and mask, loss curve
  samples/sample_<k>.nii.gz
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from jobio.errors import write_json, writing
from measurement.timing import synchronize

from .build import ModelSpec
from .curves import final_loss, smoothed, smoothing_window
from .dataset import HeldOut
from .engine import Sampling, Training
from .ensemble import Ensemble, determinism_state, deterministic_algorithms, weights_identical
from .prepare import read_manifest
from .samplers import build_sampler
from .quality import compare_with_real, float64_reference, fidelity_inputs, image_similarity, summarise_similarity
from .quality import variant_errors
from .runs import Run, peak_memory, reset_peak_memory
from .settings import QualitySettings, StudySettings, TrainSettings, as_dict
from .unet import parameter_count


def middle_slice(volume: np.ndarray) -> np.ndarray:
    """The middle axial slice of a (D, W, H) volume (the first channel of a (D, W, H, C) one), rotated for display."""
    if volume.ndim == 4:
        volume = volume[..., 0]
    return np.ascontiguousarray(np.rot90(volume[:, :, volume.shape[2] // 2])).astype(np.float32)


def slices(sample: Path, image: Path) -> np.ndarray:
    """float32 (2, H, W): the middle slices of a sample and of the real image of its mask."""
    planes = [middle_slice(np.asarray(nib.load(str(path)).get_fdata(), dtype=np.float32)) for path in (sample, image)]
    return np.stack(planes)


@dataclass(frozen=True)
class RunFiles:
    """The files one run of the study writes."""

    summary: Path
    losses: Path
    slice: Path
    volumes: list[Path]


def study_run(run: Run, deterministic: bool) -> Run:
    """The run as the study trains it: with deterministic algorithms, the upsampling computed as shifted sums (the
    same function; F.interpolate's CUDA backward has no deterministic kernel), recorded in the provenance."""
    if not deterministic:
        return run
    deterministic_algorithms()
    variant = replace(run.variant, gather_upsampling=True)
    # switches_effective stays: which switches act on the device does not depend on this one's value.
    record = {**run.provenance, "switches": variant.switches(), "determinism": determinism_state()}
    return replace(run, variant=variant, provenance=record)


def run_study(model_spec: ModelSpec, train: TrainSettings, study: StudySettings, run: Run, dataset_dir: Path,
              outputs: dict[int, RunFiles], rerun: bool, samplers: dict[str, list[int]] | None = None) -> None:
    """Train one variant from every seed of `outputs` for `study.steps` optimizer steps (together: ensemble.Ensemble),
    then for each run sample the first held-out masks with its EMA weights from noise of `study.noise_seed`, and
    measure it (module docstring). `rerun` trains the first seed twice and records how far the second lies from the
    first in the first's run.json. `samplers` (fast_sampling.samplers, for the study's sampler variants): each run
    samples the same masks from the same noise with each of them too (`fast_samples`)."""
    begun = time.perf_counter()
    run = study_run(run, study.deterministic)
    seeds = list(outputs)
    ensemble = Ensemble(model_spec, train, seeds + seeds[:1] * rerun, run, dataset_dir, study.steps, study.graphs)
    reset_peak_memory(run.device)
    compile_seconds = ensemble.warm_up()
    train_seconds = ensemble.train(lambda count: tqdm(range(count), desc=f"optimizer steps of {len(seeds)} runs"
                                                      f"{' and a rerun' if rerun else ''}", mininterval=10))
    training_memory = peak_memory(run.device)
    members = ensemble.members
    shared = {
        "optimizer_steps": study.steps,
        "samples_seen": study.steps * train.gradient_accumulation,
        # The runs of the job train together: each run's share of the job's training time.
        "job_runs": len(members),
        "job_seconds": train_seconds,
        "seconds": train_seconds / len(members),
        "ms_per_step": 1000 * train_seconds / (len(members) * study.steps),
        "graphs": ensemble.graphs,
        "capture_seconds": ensemble.capture_seconds,
        "compile_seconds": compile_seconds,
        **training_memory,
    }
    rerun_record = None
    if rerun:
        first, again = members[0].training.trainer, members[-1].training.trainer
        identical, largest = weights_identical(first.diffusion, again.diffusion)
        ema_identical, ema_largest = weights_identical(first.ema_model, again.ema_model)
        rerun_record = {"seed": seeds[0], "weights_identical": identical and ema_identical,
                        "max_abs_weight_difference": max(largest, ema_largest)}
        # How far the run-to-run noise that is left moves the metrics: the rerun's samples (in a scratch folder),
        # measured as every run's are.
        with tempfile.TemporaryDirectory() as scratch:
            volumes = [Path(scratch) / path.name for path in outputs[seeds[0]].volumes]
            sample_run(model_spec, members[-1].training, study, run, dataset_dir, volumes)
            rerun_record["vs_real"] = measure_samples(volumes, dataset_dir, study, run)
    for member in members[: len(seeds)]:
        write_run(model_spec, study, run, dataset_dir, member.training, ensemble.losses(member),
                  outputs[member.seed], shared, rerun_record if member is members[0] else None, begun, samplers or {})


def sample_run(model_spec: ModelSpec, training: Training, study: StudySettings, run: Run, dataset_dir: Path,
               out_volumes: list[Path]) -> tuple[Sampling, dict]:
    """Sample the first held-out masks with the run's EMA weights, `study.sample_batch` masks at a time; a batch's
    noise comes from a generator seeded `noise_seed + its first mask's index` (the same for every run). Returns the
    sampling (its evaluation, for the float64 check) and the sampling's record."""
    trainer = training.trainer
    sampling = Sampling.from_weights(model_spec, run, trainer.ema_model.state_dict(), trainer.settings.seed)
    held_out = HeldOut(dataset_dir, len(out_volumes))
    conditions = held_out.conditions(sampling.placement)
    batches = [range(start, min(start + study.sample_batch, len(conditions)))
               for start in range(0, len(conditions), study.sample_batch)]
    warm_up = sampling.warm_up(torch.cat([conditions[i] for i in batches[0]]), study.noise_seed)
    synchronize(run.device)
    started = time.perf_counter()
    for batch in batches:
        generator = torch.Generator(device=run.device).manual_seed(study.noise_seed + batch[0])
        with sampling.running():
            for _, volume in sampling.chain(torch.cat([conditions[i] for i in batch]), generator, None):
                pass
        for offset, index in enumerate(batch):
            held_out.write(volume[offset: offset + 1], index, out_volumes[index])
    seconds = time.perf_counter() - started
    return sampling, {
        "volumes": len(out_volumes),
        "batch": study.sample_batch,
        "chain_steps": model_spec.diffusion.timesteps,
        "seconds": seconds,
        "seconds_per_volume": seconds / len(out_volumes),
        "warm_up_seconds": warm_up,
    }


def fast_samples(sampling: Sampling, samplers: dict[str, list[int]], study: StudySettings, run: Run,
                 dataset_dir: Path, masks: int) -> list[dict]:
    """The run's EMA weights through every fast sampler at each of its step counts (medddpm.samplers): the same masks
    as its T-step chain, in the same batches, from the same initial noise (a batch's generator seeded `noise_seed +
    its first mask's index`), measured against the real images as the chain's samples are (in a scratch folder: the
    samples are not kept). Each with its U-Net evaluations and its seconds per volume."""
    if not samplers:
        return []
    held_out = HeldOut(dataset_dir, masks)
    conditions = held_out.conditions(sampling.placement)
    batches = [range(start, min(start + study.sample_batch, masks)) for start in range(0, masks, study.sample_batch)]
    records = []
    for name, counts in samplers.items():
        for steps in counts:
            sampler = build_sampler(name, sampling.diffusion, steps)
            with tempfile.TemporaryDirectory() as scratch:
                volumes = [Path(scratch) / f"sample_{k:03d}.nii.gz" for k in range(masks)]
                synchronize(run.device)
                started = time.perf_counter()
                for batch in batches:
                    generator = torch.Generator(device=run.device).manual_seed(study.noise_seed + batch[0])
                    with sampling.running():
                        for _, volume in sampling.fast_chain(sampler, torch.cat([conditions[i] for i in batch]),
                                                             generator):
                            pass
                    for offset, index in enumerate(batch):
                        held_out.write(volume[offset: offset + 1], index, volumes[index])
                seconds = time.perf_counter() - started
                vs_real = measure_samples(volumes, dataset_dir, study, run)
            records.append({"sampler": name, "steps": steps, "evaluations": sampler.evaluations,
                            "seconds_per_volume": seconds / masks, "vs_real": vs_real})
    return records


def measure_samples(volumes: list[Path], dataset_dir: Path, study: StudySettings, run: Run) -> dict:
    """The samples against the held-out real images of their masks (quality.compare_with_real)."""
    held_out = HeldOut(dataset_dir, len(volumes))
    return compare_with_real(volumes, held_out.images, held_out.masks, read_manifest(dataset_dir)["workload"],
                             study.ssim_kernel, run.device)


def write_run(model_spec: ModelSpec, study: StudySettings, run: Run, dataset_dir: Path, training: Training,
              losses: list[list[float]], files: RunFiles, shared: dict, rerun: dict | None,
              begun: float, samplers: dict[str, list[int]]) -> None:
    """Sample, check against float64 and measure one trained run, and write its files."""
    trainer = training.trainer
    table = pd.DataFrame({"step": range(len(losses)), "loss": [float(np.mean(r)) for r in losses],
                          **{f"loss_micro_{i}": [r[i] for r in losses] for i in range(len(losses[0]))}})
    with writing(files.losses):
        table.to_csv(files.losses, index=False, float_format="%.7g")
    sampling, sampled = sample_run(model_spec, training, study, run, dataset_dir, files.volumes)

    # float64 at the trained weights, through the very modules that trained (forward and gradients) and sampled.
    inputs = fidelity_inputs(model_spec, QualitySettings(reference_shape=None, seed=study.noise_seed), run,
                             dataset_dir)
    reference = float64_reference(model_spec, trainer.diffusion.state_dict(), run, inputs,
                                  sampling_state=trainer.ema_model.state_dict())
    numeric = variant_errors(trainer.diffusion, lambda: sampling.evaluate, run, inputs, reference)
    del reference

    vs_real = measure_samples(files.volumes, dataset_dir, study, run)
    fast = fast_samples(sampling, samplers, study, run, dataset_dir, len(files.volumes))
    held_out = HeldOut(dataset_dir, len(files.volumes))
    with writing(files.slice):
        np.save(files.slice, slices(files.volumes[0], held_out.images[0]))
    record = {
        "provenance": run.provenance,
        "parameters": parameter_count(trainer.diffusion.denoiser),
        "volume_shape": held_out.shape(),
        "timesteps": model_spec.diffusion.timesteps,
        "settings": {"train": as_dict(trainer.settings), "study": as_dict(study)},
        # Since the job started: building, compiling, training every run, and this run's sampling and checks.
        "wall_seconds": time.perf_counter() - begun,
        "training": shared | {"final_loss": final_loss(table["loss"])},
        "sampling": sampled,
        "numeric": numeric,
        "vs_real": vs_real,
    }
    if rerun is not None:
        record["rerun"] = rerun
    if fast:
        record["samplers"] = fast
    write_json(files.summary, record)


def reference_of(run: tuple[str, int], first_seed: int) -> tuple[str, int]:
    """The run a study run is compared with: the baseline's run of the same seed (the pair the verdict judges); for
    the baseline's own runs, its first seed (the seed-to-seed difference)."""
    variant, seed = run
    return ("baseline", first_seed) if variant == "baseline" else ("baseline", seed)


def compare_runs(runs: dict[tuple[str, int], Path], first_seed: int, kernel: int,
                 outputs: dict[tuple[str, int], Path], device: torch.device = torch.device("cpu")) -> None:
    """The runs of `outputs` against their reference runs (`reference_of`): samples against the reference's from
    the same noise and masks (3D SSIM, PSNR, largest absolute difference), and the smoothed loss curve against the
    reference's. `runs`: (variant, seed) -> the run's folder (the references among them); `outputs`: (variant,
    seed) -> the comparison.json to write."""
    for key in outputs:
        reference = reference_of(key, first_seed)
        base = runs[reference]
        base_losses = pd.read_csv(base / "losses.csv")
        base_samples = sorted((base / "samples").glob("sample_*.nii.gz"))
        folder = runs[key]
        samples = sorted((folder / "samples").glob("sample_*.nii.gz"))
        if [p.name for p in samples] != [p.name for p in base_samples]:
            raise ValueError(f"{folder}: samples {[p.name for p in samples]} differ from the reference's "
                             f"{[p.name for p in base_samples]}")
        losses = pd.read_csv(folder / "losses.csv")
        merged = losses.merge(base_losses, on="step", suffixes=("", "_reference"))
        steps = len(merged)
        deviation = (smoothed(merged["loss"], steps) - smoothed(merged["loss_reference"], steps)).abs()
        write_json(outputs[key], {
            "variant": key[0], "seed": key[1],
            "reference": {"variant": reference[0], "seed": reference[1]},
            "vs_baseline": summarise_similarity(image_similarity(samples, base_samples, kernel, device)),
            "loss_curve": {
                "steps_compared": steps,
                "smoothing_steps": smoothing_window(steps),
                "mean_abs_deviation": float(deviation.mean()) if steps else None,
                "final_loss": final_loss(losses["loss"]),
                "final_loss_reference": final_loss(base_losses["loss"]),
            },
        })
