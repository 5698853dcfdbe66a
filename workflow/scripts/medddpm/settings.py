"""Typed settings of the workflow's jobs, built from the parameters a rule declares (never from the whole config).

A rule passes exactly what its job depends on as `params:` (so Snakemake reruns the job when, and only when, one of
them changes); the job script turns each into one of these dataclasses, and the library takes nothing else.
The values come from the validated config only: config.yaml is the one layer of defaults, so no field here repeats
one. A field that some rule leaves out because its job does not depend on it defaults to None (never to a value).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import MISSING, dataclass, fields
from typing import Any, TypeVar

T = TypeVar("T")


def from_mapping(cls: type[T], mapping: dict, what: str) -> T:
    """`cls` from a dict of its fields; unknown and missing keys are an error naming them, lists become tuples where
    the field is a tuple (frozen dataclasses stay hashable)."""
    known = {f.name: f for f in fields(cls)}
    unknown = set(mapping) - set(known)
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    missing = [name for name, f in known.items()
               if name not in mapping and f.default is MISSING and f.default_factory is MISSING and f.init]
    if missing:
        raise ValueError(f"{what}: missing key(s) {missing}")
    values = {}
    for key, value in mapping.items():
        is_tuple = str(known[key].type).startswith("tuple")
        values[key] = tuple(value) if isinstance(value, list) and is_tuple else value
    return cls(**values)


@dataclass(frozen=True)
class DeviceSpec:
    """The hardware label a job runs under and how to recognise its device."""

    label: str
    device: str  # cpu | cuda
    name_pattern: str | None  # None for the CPU
    emulate_gpus_on_cpu: bool

    def hardware(self) -> dict:
        """The `hardware` mapping of this one label, as measurement.devices.resolve_device reads it."""
        spec = {"device": self.device}
        if self.name_pattern is not None:
            spec["name_pattern"] = self.name_pattern
        return {self.label: spec}


@dataclass(frozen=True)
class DiffusionSettings:
    timesteps: int


@dataclass(frozen=True, kw_only=True)
class TrainSettings:
    """Upstream's training loop (Adam, accumulation, EMA) and how much of it is timed (the config's `train`).

    The training job takes every key. The profiled training step and the quality study take the loop and the seed,
    not the timing counts (warmup_steps, measured_steps, bare_loop_steps: None there); the profiled sampling step
    takes the seed of the initial weights alone (the loop's keys None)."""

    seed: int
    lr: float | None = None
    gradient_accumulation: int | None = None
    ema_decay: float | None = None
    ema_update_every: int | None = None
    ema_start_step: int | None = None
    warmup_steps: int | None = None
    measured_steps: int | None = None
    # Optimizer steps of the bare loop (forward, backward, Adam on resident tensors), after one untimed step.
    bare_loop_steps: int | None = None


@dataclass(frozen=True)
class SampleSettings:
    masks: int
    max_steps: int | None  # None: every one of the T steps
    warmup_steps: int
    seed: int
    # The throughput sweep after the chains (volumes per hour): the batch sizes it times the sampling step at (1
    # among them), and per batch size its untimed and its timed steps.
    batch_sizes: tuple[int, ...]
    throughput_warmup_steps: int
    throughput_steps: int


@dataclass(frozen=True, kw_only=True)
class QualitySettings:
    reference_shape: tuple[int, ...] | None  # None: the whole volume
    seed: int
    ssim_kernel: int | None = None  # None where the job computes no SSIM (the quality study's float64 check)

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

    steps: int
    masks: int
    noise_seed: int
    ssim_kernel: int
    sample_batch: int
    deterministic: bool
    graphs: bool

    @classmethod
    def from_params(cls, mapping: dict) -> StudySettings:
        return from_mapping(cls, dict(mapping), "quality_study")


@dataclass(frozen=True)
class ComparisonSettings:
    """The paired comparisons of a hardware label's variants (the config's `comparison`, measurement.pairing): each
    reference against every other variant, per phase, in rounds that time every variant once, until every interval
    is narrow enough to decide, or the round or time limits end it."""

    references: tuple[str, ...]
    phases: tuple[str, ...]
    confidence: float
    precision: float
    band: float
    min_rounds: int
    max_rounds: int
    budget_seconds: float
    warmup_steps: int
    # Largest difference, in cores, between the load other processes put on the CPUs during the reference's steps
    # and during the variant's (median over the rounds) for the two sides to count as timed under the same conditions.
    load_difference_cores: float
    # Variant processes alive at one time, the references counted (None: all): each keeps its allocator's GPU memory
    # through the rounds, and a whole ladder's processes do not fit on one GPU together (measurement.comparison_groups).
    processes_at_once: int | None = None
    # Compile a group's compiled variants in parallel processes before their timed builds, for the on-disk caches
    # (medddpm.comparison_workers.compile_ahead): those builds then take seconds instead of minutes each.
    compile_ahead: bool = True

    @classmethod
    def from_params(cls, mapping: dict) -> ComparisonSettings:
        return from_mapping(cls, dict(mapping), "comparison")


def params_dict(params: Any) -> dict:
    """A Snakemake job's `params` (a named list) as a plain dict of its named entries."""
    if isinstance(params, dict):
        return dict(params)
    return {name: params[name] for name in params.keys()}


def as_dict(settings: Any) -> dict:
    """A settings dataclass as a JSON-ready dict (tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(settings)))
