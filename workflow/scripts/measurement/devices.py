"""Hardware labels: the `gpu` wildcard names the device a job must run on, and is checked against what is found."""

from __future__ import annotations

import re

import torch

from jobio.errors import ExpectedError

from . import gpus
from .provenance import cpu_name


class DeviceMismatch(ExpectedError, RuntimeError):
    """The device found does not match the hardware label of the job."""


def resolve_device(label: str, hardware: dict, emulate_gpus_on_cpu: bool = False) -> torch.device:
    """Return the torch device for `label`, or raise DeviceMismatch with one line naming the problem.

    `hardware[label]` holds `device` (cpu | cuda) and `name_pattern`, a regex that the device's name must match: the
    CUDA device name (required for GPUs), or the host CPU's model name (optional for CPUs: a label without one runs
    on any CPU). `emulate_gpus_on_cpu` is the test mode in which GPU-labelled jobs run on the CPU (results are marked
    as emulated); it is never a silent fallback.
    """
    if label not in hardware:
        raise DeviceMismatch(
            f"hardware label {label!r} is not defined under 'hardware' in the config; fix: add it there"
        )
    spec = hardware[label]
    if spec["device"] == "cpu":
        pattern, name = spec.get("name_pattern"), cpu_name()
        if pattern and not re.search(pattern, name, flags=re.IGNORECASE):
            raise DeviceMismatch(
                f"label {label!r} expects a CPU matching '{pattern}' but found {name!r}; fix: use the label of this "
                "CPU (gpus: [...]), or add one for it under 'hardware' in the config"
            )
        return torch.device("cpu")
    if emulate_gpus_on_cpu:
        return torch.device("cpu")
    # Before anything asks CUDA: the job takes a free GPU of its own and is bound to it (measurement.gpus).
    gpus.hold(f"label {label}")
    if not torch.cuda.is_available():
        raise DeviceMismatch(
            f"label {label!r} needs a CUDA GPU matching '{spec['name_pattern']}', but no CUDA device is visible"
            "; fix: run it on a machine with that GPU, or measure this machine under its own label (gpus: [cpu])"
        )
    name = torch.cuda.get_device_name(0)
    if not re.search(spec["name_pattern"], name, flags=re.IGNORECASE):
        raise DeviceMismatch(
            f"label {label!r} expects a GPU matching '{spec['name_pattern']}' but found {name!r}"
            "; fix: use the label of this GPU (gpus: [...]), or add one for it under 'hardware' in the config"
        )
    return torch.device("cuda", 0)
