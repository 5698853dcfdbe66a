"""A measured run of one (hardware label, variant): device check, backend switches, provenance."""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

import torch

from measurement.devices import resolve_device
from measurement.provenance import provenance

from .variants import Variant, apply_backend, backend_flags


@dataclass(frozen=True)
class Run:
    label: str
    variant: Variant
    device: torch.device
    provenance: dict


def start_run(config: dict, label: str, variant_name: str, repo: Path) -> Run:
    """Check the label against the device, set the variant's backend switches, record provenance."""
    device = resolve_device(label, config["hardware"], config["emulate_gpus_on_cpu"])
    variant = Variant.from_config(variant_name, config["variants"][variant_name])
    apply_backend(variant)
    emulated = config["hardware"][label]["device"] != device.type
    record = provenance(device, config, repo, label, emulated)
    record.update(
        variant=variant.name,
        switches=variant.switches(),
        switches_effective=variant.effective_on(device),
        backend_flags=backend_flags(),
    )
    return Run(label, variant, device, record)


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory(device: torch.device) -> dict:
    """Peak memory of the run: the CUDA caching allocator's peak on a GPU, the process's peak RSS on the CPU."""
    if device.type == "cuda":
        return {
            "peak_memory_bytes": int(torch.cuda.max_memory_allocated(device)),
            "peak_memory_reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
            "peak_memory_kind": "cuda_max_allocated",
        }
    # ru_maxrss is in KiB on Linux.
    return {
        "peak_memory_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
        "peak_memory_kind": "process_max_rss",
    }
