"""Builds the U-Net and the diffusion from the config's `model` and `diffusion` sections."""

from __future__ import annotations

import torch

from .diffusion import GaussianDiffusion
from .unet import UNet3D, UNetConfig


def unet_config(model: dict) -> UNetConfig:
    return UNetConfig(
        in_channels=model["in_channels"],
        out_channels=model["out_channels"],
        base_width=model["base_width"],
        channel_mult=tuple(model["channel_mult"]),
        num_res_blocks=model["num_res_blocks"],
        attention_downsample_rates=tuple(model["attention_downsample_rates"]),
        num_heads=model["num_heads"],
        dropout=model["dropout"],
        checkpoint_attention=model["checkpoint_attention"],
    )


def build_diffusion(model: dict, diffusion: dict, seed: int) -> GaussianDiffusion:
    """The same seed gives the same initial weights, so every variant starts from one network."""
    torch.manual_seed(seed)
    return GaussianDiffusion(UNet3D(unet_config(model)), timesteps=diffusion["timesteps"])
