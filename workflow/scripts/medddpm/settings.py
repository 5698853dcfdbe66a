"""Typed settings of the workflow's jobs, built from the parameters a rule declares (never from the whole config).

A rule passes exactly what its job depends on as `params:` (so Snakemake reruns the job when, and only when, one of
them changes); the job script turns each into one of these dataclasses, and the library takes nothing else.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, fields
from typing import Any, TypeVar

T = TypeVar("T")


def from_mapping(cls: type[T], mapping: dict, what: str) -> T:
    """`cls` from a dict of its fields; unknown keys are an error naming them, lists become tuples where the
    field's default is a tuple (frozen dataclasses stay hashable)."""
    known = {f.name: f for f in fields(cls)}
    unknown = set(mapping) - set(known)
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    values = {}
    for key, value in mapping.items():
        default = known[key].default
        values[key] = tuple(value) if isinstance(value, list) and isinstance(default, tuple) else value
    return cls(**values)


@dataclass(frozen=True)
class DeviceSpec:
    """The hardware label a job runs under and how to recognise its device."""

    label: str
    device: str  # cpu | cuda
    name_pattern: str | None = None
    emulate_gpus_on_cpu: bool = False

    def hardware(self) -> dict:
        """The `hardware` mapping of this one label, as measurement.devices.resolve_device reads it."""
        spec = {"device": self.device}
        if self.name_pattern is not None:
            spec["name_pattern"] = self.name_pattern
        return {self.label: spec}


@dataclass(frozen=True)
class DiffusionSettings:
    timesteps: int = 250


@dataclass(frozen=True)
class TrainSettings:
    """Upstream's training loop (Adam, accumulation, EMA) and how much of it is timed."""

    lr: float = 1e-5
    gradient_accumulation: int = 2
    ema_decay: float = 0.995
    ema_update_every: int = 10
    ema_start_step: int = 2000
    warmup_steps: int = 2
    measured_steps: int = 10
    seed: int = 0
    # Optimizer steps of the bare loop (forward, backward, Adam on resident tensors), after one untimed step.
    bare_loop_steps: int = 3


@dataclass(frozen=True)
class SampleSettings:
    masks: int = 1
    max_steps: int | None = None
    warmup_steps: int = 1
    seed: int = 0


@dataclass(frozen=True)
class QualitySettings:
    ssim_kernel: int = 11
    reference_shape: tuple[int, ...] | None = None
    seed: int = 0

    @classmethod
    def from_params(cls, mapping: dict) -> QualitySettings:
        values = dict(mapping)
        if values.get("reference_shape") is not None:
            values["reference_shape"] = tuple(values["reference_shape"])
        return from_mapping(cls, values, "quality")


@dataclass(frozen=True)
class StudySettings:
    """One run of the quality study beyond the training loop's own settings (TrainSettings): its budget in
    optimizer steps, the held-out masks it samples and the fixed noise it samples them from, and how it is measured."""

    steps: int = 2000
    masks: int = 4
    noise_seed: int = 0
    ssim_kernel: int = 11

    @classmethod
    def from_params(cls, mapping: dict) -> StudySettings:
        return from_mapping(cls, dict(mapping), "quality_study")


def params_dict(params: Any) -> dict:
    """A Snakemake job's `params` (a named list) as a plain dict of its named entries."""
    if isinstance(params, dict):
        return dict(params)
    return {name: params[name] for name in params.keys()}


def as_dict(settings: Any) -> dict:
    """A settings dataclass as a JSON-ready dict (tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(settings)))
