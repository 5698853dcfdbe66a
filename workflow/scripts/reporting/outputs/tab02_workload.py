"""tab02: the workload as configured: model and diffusion settings, parameters, FLOPs per step, dataset."""

from __future__ import annotations

import json

import pandas as pd

from ..render import Table


def workload_rows(settings: dict, manifest: dict, counted: dict) -> list[tuple[str, str]]:
    model, train, data = settings["model"], settings["train"], settings["dataset"]
    return [
        ("volume (D x W x H), batch", f"{' x '.join(map(str, data['shape']))}, batch 1"),
        ("U-Net base width, channel multipliers", f"{model['base_width']}, {tuple(model['channel_mult'])}"),
        ("ResBlocks per level (encoder / decoder)", f"{model['num_res_blocks']} / {model['num_res_blocks'] + 1}"),
        ("attention at downsample rates",
         ", ".join(map(str, model["attention_downsample_rates"])) or "none (the middle block's only)"),
        ("input / output channels", f"{model['in_channels']} / {model['out_channels']}"),
        ("parameters", f"{counted['parameters']:,}"),
        ("FLOPs per U-Net forward (sampling step)", f"{counted['forward'] / 1e12:.3f} TFLOP"),
        ("FLOPs per training micro-batch (model: forward + backward)", f"{counted['train_model'] / 1e12:.3f} TFLOP"),
        ("FLOPs per training micro-batch executed (attention recomputed in backward)",
         f"{counted['train_executed'] / 1e12:.3f} TFLOP"),
        ("FLOPs per optimizer step (executed)",
         f"{counted['train_executed'] * train['gradient_accumulation'] / 1e12:.3f} TFLOP"),
        ("diffusion steps T (cosine schedule, L1 on noise)", str(settings["diffusion"]["timesteps"])),
        ("optimizer", f"Adam lr {train['lr']:g}, gradient accumulation {train['gradient_accumulation']}"),
        ("EMA", f"decay {train['ema_decay']}, every {train['ema_update_every']} steps from step "
                f"{train['ema_start_step']}"),
        ("dataset", f"{data['source']}: {manifest['counts']['train']} training cases, "
                    f"{manifest['counts']['heldout']} held-out"),
        ("timed steps (warm-up + measured)", f"{train['warmup_steps']} + {train['measured_steps']}"),
    ]


def counted(settings: dict) -> dict:
    """Parameters and FLOPs of the configured U-Net at the configured volume (medddpm.flops, on meta tensors)."""
    import torch

    from medddpm.build import unet_config
    from medddpm.flops import unet_flops
    from medddpm.unet import UNet3D, parameter_count

    unet = unet_config(settings["model"])
    shape = tuple(settings["dataset"]["shape"])
    with torch.device("meta"):
        parameters = parameter_count(UNet3D(unet))
    model, executed = unet_flops(unet, shape, "none"), unet_flops(unet, shape, "attention")
    return {"parameters": parameters, "forward": model["forward"]["total"],
            "train_model": model["train_micro_batch"]["total"],
            "train_executed": executed["train_micro_batch"]["total"]}


def build(job) -> Table:
    manifest = json.loads((job.files["dataset"] / "manifest.json").read_text())
    frame = pd.DataFrame(workload_rows(job.settings, manifest, counted(job.settings)), columns=["setting", "value"])
    return Table(frame, "Workload: Med-DDPM U-Net and diffusion as configured; FLOPs counted by PyTorch's counter on "
                        "the U-Net's shapes (model FLOPs without recomputation, and as executed by upstream's "
                        "attention checkpoint)")
