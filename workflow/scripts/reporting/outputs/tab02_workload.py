"""tab02: the workload as configured: model and diffusion settings, parameters, FLOPs per step, dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from jobio.errors import ExpectedError

from ..render import Table


# What the baseline's checkpointing recomputes in backward (medddpm.switches.CHECKPOINTING; upstream: attention).
RECOMPUTED = {"attention": "attention recomputed in backward", "all": "every block recomputed in backward",
              "none": "nothing recomputed"}


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
        ("FLOPs per U-Net forward (sampling step)", f"{counted['forward'] / 1e12:.4g} TFLOP"),
        ("FLOPs per training micro-batch (model: forward + backward)", f"{counted['train_model'] / 1e12:.4g} TFLOP"),
        (f"FLOPs per training micro-batch executed ({RECOMPUTED[counted['checkpointing']]})",
         f"{counted['train_executed'] / 1e12:.4g} TFLOP"),
        ("FLOPs per optimizer step (executed)",
         f"{counted['train_executed'] * train['gradient_accumulation'] / 1e12:.4g} TFLOP"),
        ("diffusion steps T (cosine schedule, L1 on noise)", str(settings["diffusion"]["timesteps"])),
        ("optimizer", f"Adam lr {train['lr']:g}, gradient accumulation {train['gradient_accumulation']}"),
        ("EMA", f"decay {train['ema_decay']}, every {train['ema_update_every']} steps from step "
                f"{train['ema_start_step']}"),
        ("dataset", f"{data['source']}: {manifest['counts']['train']} training cases, "
                    f"{manifest['counts']['heldout']} held-out"),
        ("timed steps (warm-up + measured)", f"{train['warmup_steps']} + {train['measured_steps']}"),
    ]


def recorded_flops(train: dict, path: Path) -> dict:
    """The FLOP counts a training job recorded with its step time (medddpm.flops.step_flops)."""
    if "flops" not in train:
        raise ExpectedError(f"{path}: no FLOP count (`flops`); a training job of an older version of the workflow "
                            "wrote it: run that job again (snakemake --forcerun train)")
    return train["flops"]


def counted(training: dict, path: Path) -> dict:
    """Parameters and FLOPs as the baseline's training job counted them (medddpm.flops.step_flops: PyTorch's FLOP
    counter on the configured U-Net at the prepared volume; the same on every hardware label)."""
    flops = recorded_flops(training, path)
    model, executed = flops["model"], flops["executed"]
    return {"parameters": training["parameters"], "forward": model["forward"]["total"],
            "train_model": model["train_micro_batch"]["total"],
            "train_executed": executed["train_micro_batch"]["total"], "checkpointing": executed["checkpointing"]}


def build(job) -> Table:
    manifest = json.loads((job.files["dataset"] / "manifest.json").read_text())
    training = json.loads(job.files["training"].read_text())
    frame = pd.DataFrame(workload_rows(job.settings, manifest, counted(training, job.files["training"])),
                         columns=["setting", "value"])
    return Table(frame, "Workload: Med-DDPM U-Net and diffusion as configured; FLOPs counted by PyTorch's counter on "
                        "the U-Net's shapes in the baseline's training job (model FLOPs without recomputation, and as "
                        "executed under the baseline's checkpointing: upstream's is the attention blocks')")
