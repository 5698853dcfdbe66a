"""The workload table: model and diffusion settings, parameters, FLOPs per step, dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import torch
from torch.utils.flop_counter import FlopCounterMode

from medddpm.build import build_diffusion
from medddpm.unet import parameter_count


def flops(config: dict) -> dict:
    """FLOPs of one U-Net forward and of one training micro-batch (forward + backward, attention recomputed),
    counted by PyTorch's FLOP counter on meta tensors (shapes only, nothing computed)."""
    with torch.device("meta"):
        diffusion = build_diffusion(config["model"], config["diffusion"], config["train"]["seed"])
    shape = (1, config["model"]["in_channels"], *config["dataset"]["shape"])
    x = torch.randn(shape, device="meta")
    t = torch.zeros(1, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as forward:
        diffusion.denoiser(x, t)
    with FlopCounterMode(display=False) as train:
        diffusion.denoiser(x, t).abs().mean().backward()
    return {"forward": forward.get_total_flops(), "train_micro_batch": train.get_total_flops(),
            "parameters": parameter_count(diffusion.denoiser)}


def workload_table(config: dict, manifest: Path) -> pd.DataFrame:
    counted = flops(config)
    model, train, data = config["model"], config["train"], config["dataset"]
    prepared = json.loads(Path(manifest).read_text())
    rows = [
        ("volume (D x W x H), batch", f"{' x '.join(map(str, data['shape']))}, batch 1"),
        ("U-Net base width, channel multipliers", f"{model['base_width']}, {tuple(model['channel_mult'])}"),
        ("ResBlocks per level (encoder / decoder)", f"{model['num_res_blocks']} / {model['num_res_blocks'] + 1}"),
        ("attention at downsample rates", ", ".join(map(str, model["attention_downsample_rates"]))),
        ("input / output channels", f"{model['in_channels']} / {model['out_channels']}"),
        ("parameters", f"{counted['parameters']:,}"),
        ("FLOPs per U-Net forward (sampling step)", f"{counted['forward'] / 1e12:.3f} TFLOP"),
        ("FLOPs per training micro-batch", f"{counted['train_micro_batch'] / 1e12:.3f} TFLOP"),
        ("FLOPs per optimizer step",
         f"{counted['train_micro_batch'] * train['gradient_accumulation'] / 1e12:.3f} TFLOP"),
        ("diffusion steps T (cosine schedule, L1 on noise)", str(config["diffusion"]["timesteps"])),
        ("optimizer", f"Adam lr {train['lr']:g}, gradient accumulation {train['gradient_accumulation']}"),
        ("EMA", f"decay {train['ema_decay']}, every {train['ema_update_every']} steps from step "
                f"{train['ema_start_step']}"),
        ("dataset", f"{data['source']}: {prepared['counts']['train']} training cases, "
                    f"{prepared['counts']['heldout']} held-out"),
        ("timed steps (warm-up + measured)", f"{train['warmup_steps']} + {train['measured_steps']}"),
    ]
    return pd.DataFrame(rows, columns=["setting", "value"])
