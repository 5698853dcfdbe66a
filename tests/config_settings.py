"""Typed settings for tests, built from the shipped configuration: config.yaml is the one layer of defaults (the
dataclasses repeat none), and a test changes only the values it is about."""

from pathlib import Path

import yaml

from medddpm.settings import from_mapping

REPO = Path(__file__).resolve().parents[1]


def config_section(name: str, *overlays: str) -> dict:
    """config.yaml's section `name`, with the keys the overlays (paths from the repository root) set over it."""
    section = dict(yaml.safe_load((REPO / "config.yaml").read_text())[name])
    for overlay in overlays:
        section |= yaml.safe_load((REPO / overlay).read_text()).get(name, {})
    return section


def output_settings(output) -> dict:
    """The config sections a registered output reads (its `config`), as its rule passes them, from config.yaml."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    return {section: config[section] for section in output.config}


def configured(cls, name: str, *overlays: str, **changes):
    """`cls` from config section `name` (after the overlays), with `changes` over it."""
    return from_mapping(cls, {**config_section(name, *overlays), **changes}, name)


def unet(*overlays: str, **changes):
    """The U-Net of config.yaml (after the overlays), with `changes`; unet("config/paper.yaml") is the whole-head
    network of the paper (40,226,433 parameters)."""
    from medddpm.unet import UNetConfig

    return configured(UNetConfig, "model", *overlays, **changes)


def paper_unet(**changes):
    return unet("config/paper.yaml", **changes)
