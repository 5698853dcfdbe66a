"""The quality study: does a variant change what the trained model synthesises?

Every variant trains its own model from the same seed and data for the same number of optimizer steps (the upstream
loop: Adam, gradient accumulation, EMA), samples the first held-out masks from the same noise through its own sampling
path, and is measured against the held-out real images of those masks; the baseline trains once more per extra seed,
which gives the seed-to-seed spread that the verdict judges the variants by (data/paper_claims.yaml). A second job per
hardware label compares every run with the baseline's first seed: its samples from the same noise and mask, and its
loss curve.

Files of one run, `<root>/<workload>/<label>/study/<variant>/seed<k>/` (`<root>` is results/ when measured,
data/reference/ when shipped; the samples are never shipped):
  run.json          budget and settings, training and sampling wall time, float64 errors at the trained weights, the
                    samples against the real images (3D SSIM, PSNR, Wasserstein distance per label, lesion contrast)
  losses.csv        the training loss of every optimizer step (and its micro-batches), the step time
  slice.npy         float32 (2, H, W): the middle axial slice of the first sample and of the real image of its mask
  comparison.json   against the baseline's first seed: samples from the same noise and mask, and the loss curve
  samples/sample_<k>.nii.gz
"""

from __future__ import annotations

import time
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from errors import writing
from measurement.timing import DeviceTimer, summary

from .build import Workload
from .curves import final_loss, smoothed, smoothing_window
from .engine import Sampling, Training, synchronize, timed_steps
from .jobs import _file_shape, _to_image_axes, held_out_conditions, write_json
from .prepare import heldout_images, heldout_masks, read_manifest, write_nifti
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


def run_study(workload: Workload, train: TrainSettings, study: StudySettings, run: Run, dataset_dir: Path,
              out_json: Path, out_losses: Path, out_slice: Path, out_volumes: list[Path]) -> None:
    """Train `study.steps` optimizer steps from `train.seed`, sample the first held-out masks with the EMA weights
    from noise of `study.noise_seed`, and measure the run (module docstring)."""
    begun_run = time.perf_counter()
    training = Training(workload, train, run, dataset_dir)
    trainer = training.trainer
    reset_peak_memory(run.device)
    compile_seconds = training.warm_up()
    timer = DeviceTimer(run.device)
    synchronize(run.device)
    started = time.perf_counter()
    rows = [losses for _, losses in timed_steps(
        training.step, 0, study.steps, timer, prepare=training.prepare,
        progress=lambda _, count: tqdm(range(count), desc="optimizer steps", mininterval=10))]
    step_ms = timer.elapsed_ms()  # synchronises
    train_seconds = time.perf_counter() - started
    table = pd.DataFrame({"step": range(len(rows)), "loss": [float(np.mean(r)) for r in rows],
                          **{f"loss_micro_{i}": [r[i] for r in rows] for i in range(len(rows[0]))},
                          "step_ms": step_ms})
    with writing(out_losses):
        table.to_csv(out_losses, index=False, float_format="%.7g")
    training_memory = peak_memory(run.device)

    # Sampling: the EMA weights, as upstream samples, through the variant's sampling path.
    sampling = Sampling.from_weights(workload, run, trainer.ema_model.state_dict(), train.seed)
    masks, images = heldout_masks(dataset_dir)[: len(out_volumes)], heldout_images(dataset_dir)[: len(out_volumes)]
    conditions = held_out_conditions(sampling, dataset_dir, masks)
    sample_compile = sampling.warm_up(conditions[0], study.noise_seed)
    synchronize(run.device)
    started = time.perf_counter()
    for index, (condition, image, out_path) in enumerate(zip(conditions, images, out_volumes)):
        generator = torch.Generator(device=run.device).manual_seed(study.noise_seed + index)
        with sampling.running():
            for _, volume in sampling.chain(condition, generator, None):
                pass
        write_nifti(_to_image_axes(volume), nib.load(images[index]).affine, out_path)
    sample_seconds = time.perf_counter() - started

    # float64 at the trained weights, through the very modules that trained (forward and gradients) and sampled.
    inputs = fidelity_inputs(workload, QualitySettings(reference_shape=None, seed=study.noise_seed), run,
                             dataset_dir)
    reference = float64_reference(workload, trainer.diffusion.state_dict(), run, inputs,
                                  sampling_state=trainer.ema_model.state_dict())
    numeric = variant_errors(trainer.diffusion, lambda: sampling.evaluate, run, inputs, reference)
    del reference

    vs_real = compare_with_real(out_volumes, images, masks, read_manifest(dataset_dir)["workload"],
                                study.ssim_kernel, run.device)
    with writing(out_slice):
        np.save(out_slice, slices(out_volumes[0], images[0]))
    per_step = summary(step_ms)
    write_json(out_json, {
        "provenance": run.provenance,
        "parameters": parameter_count(trainer.diffusion.denoiser),
        "volume_shape": _file_shape(images[0]),
        "timesteps": workload.diffusion.timesteps,
        "settings": {"train": as_dict(train), "study": as_dict(study)},
        # The whole run after start-up: building, compiling, training, sampling, the float64 check, the metrics.
        "wall_seconds": time.perf_counter() - begun_run,
        "training": {
            "optimizer_steps": study.steps,
            "samples_seen": study.steps * train.gradient_accumulation,
            "seconds": train_seconds,
            "compile_seconds": compile_seconds,
            "step_time": per_step,
            "final_loss": final_loss(table["loss"]),
            **training_memory,
        },
        "sampling": {
            "volumes": len(out_volumes),
            "chain_steps": workload.diffusion.timesteps,
            "seconds": sample_seconds,
            "seconds_per_volume": sample_seconds / len(out_volumes),
            "warm_up_seconds": sample_compile,
        },
        "numeric": numeric,
        "vs_real": vs_real,
    })


def compare_runs(runs: dict[tuple[str, int], Path], reference: tuple[str, int], kernel: int,
                 outputs: dict[tuple[str, int], Path], device: torch.device = torch.device("cpu")) -> None:
    """The runs of `outputs` against the reference run (the baseline's first seed): samples against the reference's
    from the same noise and masks (3D SSIM, PSNR, largest absolute difference), and the smoothed loss curve against
    the reference's. `runs`: (variant, seed) -> the run's folder (the reference's among them); `outputs`: (variant,
    seed) -> the comparison.json to write."""
    base = runs[reference]
    base_losses = pd.read_csv(base / "losses.csv")
    base_samples = sorted((base / "samples").glob("sample_*.nii.gz"))
    for key in outputs:
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
