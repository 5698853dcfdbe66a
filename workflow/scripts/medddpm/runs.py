"""A measured run of one (hardware label, variant): device check, backend switches, provenance."""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

import torch

from measurement.devices import resolve_device
from measurement.provenance import provenance
from measurement.conv_checks import check_preflight

from .settings import DeviceSpec, from_mapping
from .variants import Variant, apply_backend, backend_flags


@dataclass(frozen=True)
class Run:
    label: str
    variant: Variant
    device: torch.device
    provenance: dict


def start_run(spec: DeviceSpec, variant: Variant, repo: Path, params: dict, preflight: str | Path | None = None) -> Run:
    """Check the label against the device, set the variant's backend switches, record provenance.

    `params` is everything the job was given (its rule's params); provenance carries its digest. `preflight`: the
    label's preflight record (profiling.preflight), which must hold for this job's stack and the variant's
    convolutions (measurement.conv_checks).
    """
    device = resolve_device(spec.label, spec.hardware(), spec.emulate_gpus_on_cpu)
    apply_backend(variant)
    emulated = spec.device != device.type
    record = provenance(device, params, repo, spec.label, emulated)
    if preflight is not None:
        check_preflight(preflight, record, variant.name, variant.switches())
    record.update(
        variant=variant.name,
        switches=variant.switches(),
        switches_effective=variant.effective_on(device),
        backend_flags=backend_flags(),
    )
    return Run(spec.label, variant, device, record)


def start_job(params: dict, variant_name: str, repo: Path, preflight: str | Path | None = None) -> Run:
    """`start_run` from a job's params: `device` (DeviceSpec fields) and `variant` (its switches)."""
    return start_run(from_mapping(DeviceSpec, params["device"], "device"),
                     Variant.from_config(variant_name, params["variant"]), repo, params, preflight)


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
