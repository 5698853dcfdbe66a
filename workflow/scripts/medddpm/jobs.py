"""The workflow's measured jobs: training and sampling of one (hardware label, variant), written to files."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import nibabel as nib
import pandas as pd
import torch
from tqdm import tqdm

from errors import writing
from measurement.timing import DeviceTimer, summary

from .build import Workload
from .checkpoints import load_checkpoint, load_weights_into, save_checkpoint, workload_record
from .dataset import PreparedPairs, load_condition
from .flops import step_flops
from .prepare import condition_values, heldout_images, heldout_masks
from .prepare import write_nifti
from .runs import Run, peak_memory, reset_peak_memory
from .sampling import UNetEvaluation
from .settings import SampleSettings, TrainSettings, as_dict
from .training import Trainer, data_batches
from .unet import parameter_count
from .variants import autocast, compile_model, compiles_on, prepare_input, prepare_model


def _non_finite(value, key: str = "") -> str | None:
    """The key path of the first NaN or infinity in a JSON-ready payload, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return key or "(the value)"
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return None
    for name, item in items:
        found = _non_finite(item, f"{key}.{name}" if key else str(name))
        if found:
            return found
    return None


def write_json(path: Path, payload: dict) -> None:
    """`payload` as JSON, written whole (a temporary file renamed into place). Strict JSON only: a NaN or infinity
    (which json.dumps would write as the invalid NaN/Infinity) is a bug upstream and raises ValueError naming it."""
    bad = _non_finite(payload)
    if bad:
        raise ValueError(f"{path}: {bad} is not a finite number, and JSON has none; refusing to write it")
    text = json.dumps(payload, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with writing(path):
            temporary.write_text(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_trainer(workload: Workload, train: TrainSettings, run: Run, dataset_dir: Path) -> Trainer:
    """The upstream trainer on the run's device, with every switch of the run's variant applied."""
    diffusion = workload.build(train.seed).to(run.device)
    prepare_model(diffusion, run.variant, run.device)
    generator = torch.Generator(device=run.device).manual_seed(train.seed)
    return Trainer(
        diffusion,
        data_batches(PreparedPairs(dataset_dir, "train"), train.seed),
        run.variant,
        run.device,
        train,
        generator,
        # Upstream's DataLoader pins memory; pinning only exists for copies to a GPU.
        pin_memory=run.device.type == "cuda",
    )


def bare_loop(trainer: Trainer, steps: int) -> dict | None:
    """Time `steps` optimizer steps of the bare loop (Trainer.bare_step on one resident batch) after one untimed
    step: the same measurement as the bare loop timed over the upstream code, for a like-for-like comparison."""
    if steps <= 0:
        return None
    device = trainer.device
    condition, target = trainer.resident_batch()
    generator = torch.Generator(device=device).manual_seed(trainer.settings.seed + 1)
    trainer.bare_step(condition, target, generator)
    reset_peak_memory(device)
    timer = DeviceTimer(device)
    for _ in range(steps):
        started = timer.start()
        trainer.bare_step(condition, target, generator)
        timer.stop(started)
    timing = summary(timer.elapsed_ms())
    per_step = trainer.settings.gradient_accumulation
    return {"step_time": timing, "ms_per_sample": timing["median_ms"] / per_step, **peak_memory(device)}


def run_training(workload: Workload, train: TrainSettings, run: Run, dataset_dir: Path, out_json: Path,
                 out_steps: Path, out_ckpt: Path) -> None:
    trainer = make_trainer(workload, train, run, dataset_dir)
    reset_peak_memory(run.device)
    # Compilation happens here, before the warm-up steps and outside every timed region.
    compile_seconds = trainer.warm_up_compiled()
    rows = []
    for _ in tqdm(range(train.warmup_steps), desc="warm-up steps", mininterval=5):
        trainer.prefetch()
        rows.append({"step": trainer.step_index, "phase": "warmup", "losses": trainer.step()})
    timer = DeviceTimer(run.device)
    for _ in tqdm(range(train.measured_steps), desc="measured steps", mininterval=5):
        trainer.prefetch()  # batch assembly and pinning, as upstream's loader workers do, outside the timed step
        started = timer.start()
        losses = trainer.step()
        timer.stop(started)
        rows.append({"step": trainer.step_index - 1, "phase": "measured", "losses": losses})
    step_ms = timer.elapsed_ms()
    memory = peak_memory(run.device)
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
    with writing(out_steps):
        steps.to_csv(out_steps, index=False)
    save_checkpoint({**trainer.checkpoint(), "workload": workload_record(workload)}, out_ckpt)
    bare = bare_loop(trainer, train.bare_loop_steps)  # after the checkpoint: it changes the weights
    timing = summary(step_ms)
    samples_per_step = train.gradient_accumulation  # batch size 1, as upstream
    shape = _file_shape(PreparedPairs(dataset_dir, "train").images[0])
    write_json(
        out_json,
        {
            "provenance": run.provenance,
            "parameters": parameter_count(trainer.diffusion.denoiser),
            "volume_shape": shape,
            "flops": step_flops(workload.unet, tuple(shape), run.variant.checkpointing),
            "settings": as_dict(train),
            "step_time": timing,
            "micro_batch_median_ms": timing["median_ms"] / samples_per_step,
            "train_ms_per_sample": timing["median_ms"] / samples_per_step,
            "samples_per_second": 1e3 * samples_per_step / timing["median_ms"],
            "final_loss": float(steps["loss"].iloc[-1]),
            "compile_seconds": compile_seconds,
            "bare_loop": bare,
            "bare_loop_ms_per_sample": bare["ms_per_sample"] if bare else None,
            **memory,
        },
    )


def load_weights(workload: Workload, run: Run, checkpoint: Path, which: str, train_seed: int = 0):
    """The diffusion with the `model` or `ema` weights of a checkpoint, for evaluation under the run's variant:
    model-level switches applied, gradients off (the weights are constants here, which also keeps autocast from
    caching their casts across CUDA graph captures)."""
    diffusion = workload.build(train_seed)
    state = load_checkpoint(checkpoint, workload_record(workload))
    load_weights_into(diffusion, state[which], checkpoint, which)
    return _for_evaluation(diffusion, run)


def evaluation_model(workload: Workload, run: Run, weights: dict, train_seed: int = 0):
    """The diffusion with `weights` (a state_dict held in memory, as a study run's EMA copy) for evaluation under the
    run's variant, as `load_weights` prepares it."""
    diffusion = workload.build(train_seed)
    diffusion.load_state_dict(weights)
    return _for_evaluation(diffusion, run)


def _for_evaluation(diffusion, run: Run):
    diffusion.to(run.device)
    prepare_model(diffusion, run.variant, run.device)
    diffusion.requires_grad_(False)
    return diffusion.eval()


def warm_up_sampling(diffusion, evaluate: UNetEvaluation, condition: torch.Tensor, run: Run, seed: int) -> float:
    """One sampling step on throw-away noise (its own generator) before any chain: compilation, CUDA graph
    capture and cuDNN autotuning happen here. Returns its wall-clock seconds."""
    generator = torch.Generator(device=run.device).manual_seed(seed + 7919)
    shape = (condition.shape[0], diffusion.channels, *condition.shape[2:])
    x = prepare_input(torch.randn(shape, device=run.device, generator=generator), run.variant)
    _synchronize(run.device)
    started = time.perf_counter()
    with autocast(run.variant, run.device):
        diffusion.p_sample(x, condition, diffusion.num_timesteps // 2, generator, evaluate)
    _synchronize(run.device)
    return time.perf_counter() - started


@torch.no_grad()
def run_sampling(workload: Workload, sample: SampleSettings, run: Run, checkpoint: Path, dataset_dir: Path,
                 out_json: Path, out_steps: Path, out_volumes: list[Path]) -> None:
    diffusion = load_weights(workload, run, checkpoint, "ema")
    compile_model(diffusion, run.variant)
    compiled = compiles_on(run.variant, run.device)
    evaluate = UNetEvaluation(diffusion, run.variant, run.device)
    masks = heldout_masks(dataset_dir)[: len(out_volumes)]
    images = heldout_images(dataset_dir)
    max_steps = sample.max_steps
    chain = diffusion.num_timesteps if max_steps is None else min(max_steps, diffusion.num_timesteps)
    reset_peak_memory(run.device)
    values = condition_values(dataset_dir)
    conditions = [prepare_input(load_condition(mask, values).unsqueeze(0).to(run.device), run.variant)
                  for mask in masks]
    warm_seconds = warm_up_sampling(diffusion, evaluate, conditions[0], run, sample.seed)
    rows = []
    for index, (condition, mask, out_path) in enumerate(zip(conditions, masks, out_volumes)):
        generator = torch.Generator(device=run.device).manual_seed(sample.seed + index)
        timer = DeviceTimer(run.device)
        steps = diffusion.sample_steps(condition, generator, max_steps, evaluate)
        started = timer.start()
        progress = tqdm(total=chain, desc=f"sampling {mask.name}", mininterval=5)
        with autocast(run.variant, run.device):
            for t, volume in steps:
                timer.stop(started)
                started = timer.start()
                progress.update()
        progress.close()
        for position, ms in enumerate(timer.elapsed_ms()):
            rows.append({"volume": index, "position": position, "t": diffusion.num_timesteps - 1 - position,
                         "step_ms": ms})
        write_nifti(_to_image_axes(volume), nib.load(images[index]).affine, out_path)
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
            "volume_shape": _file_shape(images[0]),
            "settings": as_dict(sample),
            "timesteps": diffusion.num_timesteps,
            "chain_steps_run": chain,
            "chain_complete": chain == diffusion.num_timesteps,
            "step_time": timing,
            "volumes": len(out_volumes),
            "volume_seconds_measured": [float(v) / 1e3 for v in per_volume],
            # Median step time x T: the full-chain cost, also when a timing run stopped chains early.
            "volume_seconds_estimate": timing["median_ms"] * diffusion.num_timesteps / 1e3,
            # Compilation (the U-Net, or the fused norm's kernels) and CUDA graph capture, with the few evaluations
            # they run, before any chain: null when the variant neither compiles nor captures on this device.
            "compile_seconds": warm_seconds if compiled or evaluate.graphs else None,
            "cuda_graph_captures": evaluate.captures,
            **peak_memory(run.device),
        },
    )


def _file_shape(path: Path) -> list[int]:
    """(D, W, H) of a prepared volume, in the file's axis order (the dataset's `shape`)."""
    return [int(n) for n in nib.load(str(path)).shape[:3]]


def _to_image_axes(volume: torch.Tensor):
    """(1, C, H, W, D) tensor in the loader's axis order -> float32 array in the file's axis order: (D, W, H) for
    one channel, (D, W, H, C) for several (BraTS's modalities, as the prepared images store them)."""
    image = volume[0].float().permute(3, 2, 1, 0)
    if image.shape[-1] == 1:
        image = image[..., 0]
    return image.contiguous().cpu().numpy()
