"""A training job of the tiny U-Net on the CPU, run as train.py runs it (medddpm.jobs.run_training), and its outputs
read back: what the data-parallel and stacked-micro-batch tests compare with the one-process, one-by-one job."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from conftest import REPO
from medddpm.build import ModelSpec
from medddpm.checkpoints import load_checkpoint
from medddpm.jobs import run_training
from medddpm.runs import start_job
from medddpm.settings import TrainSettings, from_mapping

# tests/tiny.yaml's network: GroupNorm + SiLU ResBlocks, one down- and upsampling, attention (checkpointed, as
# upstream).
MODEL = {"in_channels": 3, "out_channels": 1, "base_width": 32, "channel_mult": [1, 2], "num_res_blocks": 1,
         "attention_downsample_rates": [2], "num_heads": 1, "dropout": 0.0}
DIFFUSION = {"timesteps": 4}
SHAPE = (8, 8, 8)
PAPER = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False}
JOB_TRAIN = {"lr": 1e-3, "gradient_accumulation": 2, "ema_decay": 0.995, "ema_update_every": 1, "ema_start_step": 1,
             "warmup_steps": 1, "measured_steps": 2, "seed": 0, "bare_loop_steps": 1}
CPU_LABEL = {"label": "cpu", "device": "cpu", "name_pattern": None, "emulate_gpus_on_cpu": False}


def training_job(switches: dict, name: str, dataset: Path, folder: Path) -> dict:
    """The training job of a variant on the CPU, as train.py runs it; its three outputs, read back."""
    folder.mkdir()
    params = {"device": CPU_LABEL, "variant": switches, "model": MODEL, "diffusion": DIFFUSION, "train": JOB_TRAIN}
    run = start_job(params, name, REPO)
    out = {"summary": folder / "train.json", "steps": folder / "train_steps.csv",
           "checkpoint": folder / "checkpoint.pt"}
    run_training(ModelSpec.from_params(MODEL, DIFFUSION), from_mapping(TrainSettings, JOB_TRAIN, "train"), run,
                 dataset, out["summary"], out["steps"], out["checkpoint"])
    return {"summary": json.loads(out["summary"].read_text()), "steps": pd.read_csv(out["steps"]),
            "checkpoint": load_checkpoint(out["checkpoint"]), "files": sorted(p.name for p in folder.iterdir())}
