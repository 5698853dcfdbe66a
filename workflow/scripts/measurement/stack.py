"""The software stack a measurement rests on, read from a provenance record: the device and what runs its kernels.
No torch here (the preflight's plan reads it while the DAG is built)."""

from __future__ import annotations

from pathlib import Path


def stack_of(record: dict) -> dict:
    """The device and its software (driver, CUDA, cuDNN, torch on a GPU; torch on a CPU) of a provenance record."""
    keys = ("device_name", "driver", "cuda", "cudnn", "torch") if record.get("device_type") == "cuda" else (
        "device_name", "torch")
    return {key: record.get(key) for key in keys}


def describe(stack: dict) -> str:
    """'NVIDIA H200 (driver 580.1, cuda 13.0, cudnn 91900, torch 2.11.0)': the device, then its software."""
    return f"{stack.get('device_name')} ({', '.join(f'{k} {v}' for k, v in stack.items() if k != 'device_name')})"


def stack_problem(checked: dict, here: dict, path: str | Path) -> str | None:
    """Why a job on the stack of provenance record `here` may not rely on the check recorded in `path`, which held
    for the stack `checked` (another device or software); None when they agree."""
    differing = [f"{key} {checked.get(key)} there, {value} here" for key, value in stack_of(here).items()
                 if checked.get(key) != value]
    if not differing:
        return None
    return (f"{path} checked another software stack than this job's ({'; '.join(differing)}); fix: check this one: "
            f"your snakemake command with --forcerun {path} added before any --")

