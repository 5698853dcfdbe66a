"""The workflow's measured jobs: training and sampling of one (hardware label, variant), written to files."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import pandas as pd
import torch
from tqdm import tqdm

from measurement.timing import DeviceTimer, summary

from .build import build_diffusion
from .dataset import PreparedPairs, heldout_images, heldout_masks, load_condition
from .prepare import write_nifti
from .runs import Run, peak_memory, reset_peak_memory
from .training import Trainer, TrainSettings, data_batches
from .unet import parameter_count
from .variants import autocast, prepare_input, prepare_model


def write_json(path: Path, payload: dict) -> None:
    Path(path).write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")


def make_trainer(config: dict, run: Run, dataset_dir: Path) -> Trainer:
    settings = config["train"]
    diffusion = build_diffusion(config["model"], config["diffusion"], settings["seed"]).to(run.device)
    prepare_model(diffusion, run.variant)
    generator = torch.Generator(device=run.device).manual_seed(settings["seed"])
    return Trainer(
        diffusion,
        data_batches(PreparedPairs(dataset_dir, "train"), settings["seed"]),
        run.variant,
        run.device,
        TrainSettings(
            lr=settings["lr"],
            gradient_accumulation=settings["gradient_accumulation"],
            ema_decay=settings["ema_decay"],
            ema_update_every=settings["ema_update_every"],
            ema_start_step=settings["ema_start_step"],
        ),
        generator,
    )


def run_training(config: dict, run: Run, dataset_dir: Path, out_json: Path, out_steps: Path, out_ckpt: Path):
    settings = config["train"]
    trainer = make_trainer(config, run, dataset_dir)
    reset_peak_memory(run.device)
    rows = []
    for _ in tqdm(range(settings["warmup_steps"]), desc="warm-up steps", mininterval=5):
        rows.append({"step": trainer.step_index, "phase": "warmup", "losses": trainer.step()})
    timer = DeviceTimer(run.device)
    for _ in tqdm(range(settings["measured_steps"]), desc="measured steps", mininterval=5):
        started = timer.start()
        losses = trainer.step()
        timer.stop(started)
        rows.append({"step": trainer.step_index - 1, "phase": "measured", "losses": losses})
    step_ms = timer.elapsed_ms()
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
    steps.to_csv(out_steps, index=False)
    timing = summary(step_ms)
    samples_per_step = settings["gradient_accumulation"]  # batch size 1, as upstream
    write_json(
        out_json,
        {
            "provenance": run.provenance,
            "parameters": parameter_count(trainer.diffusion.denoiser),
            "volume_shape": list(config["dataset"]["shape"]),
            "settings": settings,
            "step_time": timing,
            "micro_batch_median_ms": timing["median_ms"] / samples_per_step,
            "train_ms_per_sample": timing["median_ms"] / samples_per_step,
            "samples_per_second": 1e3 * samples_per_step / timing["median_ms"],
            "final_loss": float(steps["loss"].iloc[-1]),
            **peak_memory(run.device),
        },
    )
    torch.save(trainer.checkpoint(), out_ckpt)


def load_weights(config: dict, run: Run, checkpoint: Path, which: str):
    """The diffusion with the `model` or `ema` weights of a checkpoint, in the variant's memory format."""
    diffusion = build_diffusion(config["model"], config["diffusion"], config["train"]["seed"])
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    diffusion.load_state_dict(state[which])
    diffusion.to(run.device)
    prepare_model(diffusion, run.variant)
    return diffusion.eval()


@torch.no_grad()
def run_sampling(config: dict, run: Run, checkpoint: Path, dataset_dir: Path, out_json: Path, out_steps: Path,
                 out_volumes: list[Path]) -> None:
    settings = config["sample"]
    diffusion = load_weights(config, run, checkpoint, "ema")
    masks = heldout_masks(dataset_dir)[: len(out_volumes)]
    images = heldout_images(dataset_dir)
    max_steps = settings["max_steps"]
    chain = diffusion.num_timesteps if max_steps is None else min(max_steps, diffusion.num_timesteps)
    reset_peak_memory(run.device)
    rows = []
    for index, (mask, out_path) in enumerate(zip(masks, out_volumes)):
        condition = prepare_input(load_condition(mask).unsqueeze(0).to(run.device), run.variant)
        generator = torch.Generator(device=run.device).manual_seed(settings["seed"] + index)
        timer = DeviceTimer(run.device)
        steps = diffusion.sample_steps(condition, generator, max_steps)
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
    steps_table.to_csv(out_steps, index=False)
    timed = steps_table[steps_table["position"] >= settings["warmup_steps"]]["step_ms"]
    per_volume = steps_table.groupby("volume")["step_ms"].sum()
    timing = summary(list(timed))
    write_json(
        out_json,
        {
            "provenance": run.provenance,
            "volume_shape": list(config["dataset"]["shape"]),
            "settings": settings,
            "timesteps": diffusion.num_timesteps,
            "chain_steps_run": chain,
            "chain_complete": chain == diffusion.num_timesteps,
            "step_time": timing,
            "volumes": len(out_volumes),
            "volume_seconds_measured": [float(v) / 1e3 for v in per_volume],
            # Median step time x T: the full-chain cost, also when a timing run stopped chains early.
            "volume_seconds_estimate": timing["median_ms"] * diffusion.num_timesteps / 1e3,
            **peak_memory(run.device),
        },
    )


def _to_image_axes(volume: torch.Tensor):
    """(1, 1, ...) tensor in the loader's axis order -> (D, W, H) float32 array in the file's axis order."""
    return volume[0, 0].float().transpose(0, 2).contiguous().cpu().numpy()
