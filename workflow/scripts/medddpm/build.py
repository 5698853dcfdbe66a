"""Builds the U-Net and the diffusion from the `model` and `diffusion` settings."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .diffusion import GaussianDiffusion
from .settings import DiffusionSettings, from_mapping
from .unet import UNet3D, UNetConfig


def unet_config(model: dict | UNetConfig) -> UNetConfig:
    """The network's shape from the config's `model` section (or a UNetConfig, returned as it is)."""
    if isinstance(model, UNetConfig):
        return model
    return from_mapping(UNetConfig, model, "model")


def diffusion_settings(diffusion: dict | DiffusionSettings) -> DiffusionSettings:
    if isinstance(diffusion, DiffusionSettings):
        return diffusion
    return from_mapping(DiffusionSettings, diffusion, "diffusion")


def build_diffusion(model: dict | UNetConfig, diffusion: dict | DiffusionSettings, seed: int) -> GaussianDiffusion:
    """The same seed gives the same initial weights, so every variant starts from one network."""
    torch.manual_seed(seed)
    return GaussianDiffusion(UNet3D(unet_config(model)), timesteps=diffusion_settings(diffusion).timesteps)


@dataclass(frozen=True)
class ModelSpec:
    """What a job's model is made of: the network's shape and the diffusion's settings, as its rule's `model` and
    `diffusion` params describe them; `build` makes the model from them."""

    unet: UNetConfig
    diffusion: DiffusionSettings

    @classmethod
    def from_params(cls, model: dict, diffusion: dict) -> ModelSpec:
        return cls(unet_config(model), diffusion_settings(diffusion))

    def build(self, seed: int) -> GaussianDiffusion:
        return build_diffusion(self.unet, self.diffusion, seed)
