"""Provenance carried by every result file: device, driver, CUDA, cuDNN, torch, config digest, workflow commit."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
import subprocess
from pathlib import Path

import torch

from . import gpus


def config_digest(config: dict) -> str:
    """sha256 of a configuration as canonical JSON: equal configurations give equal digests. Jobs pass what they
    used (their rule's params), not the whole workflow config, so the digest changes exactly when their inputs do."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def workflow_commit(repo: Path) -> str:
    """The checked-out commit, with '-dirty' when tracked files differ from it; 'unknown' outside git."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


# nvidia-smi fields of the clocks a result depends on, by provenance key: the highest SM clock the board allows, the
# application clock it runs kernels at by default, and the power limit in force (a lowered one throttles the clocks).
CLOCK_FIELDS = {"sm_max_mhz": "clocks.max.sm", "sm_application_mhz": "clocks.applications.graphics",
                "power_limit_w": "enforced.power.limit"}


def _pci_address(props) -> str | None:
    """The device's PCI address as nvidia-smi names it (00000000:1B:00.0), where torch reports it."""
    try:
        return f"{int(props.pci_domain_id):08X}:{int(props.pci_bus_id):02X}:{int(props.pci_device_id):02X}.0"
    except (AttributeError, TypeError, ValueError):
        return None


def pci_address(device: torch.device) -> str | None:
    """The PCI address of a CUDA device as nvidia-smi names it, where torch reports it."""
    return _pci_address(torch.cuda.get_device_properties(device))


def parse_clocks(line: str) -> dict:
    """CLOCK_FIELDS from one line of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`; a field the
    board does not report ([N/A], [Not Supported]) is left out."""
    clocks = {}
    for key, value in zip(CLOCK_FIELDS, line.split(",")):
        try:
            clocks[key] = float(value.strip())
        except ValueError:
            continue
    return clocks


def _nvidia_clocks(props) -> dict | None:
    """The clocks of the device the job ran on (by PCI address; the only GPU when torch gives none), or None."""
    address = _pci_address(props)
    query = ["nvidia-smi", f"--query-gpu={','.join(CLOCK_FIELDS.values())}", "--format=csv,noheader,nounits"]
    try:
        lines = subprocess.run(query + (["-i", address] if address else []), capture_output=True, text=True,
                               check=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    if len(lines) != 1:
        return None
    return parse_clocks(lines[0]) or None


def cpu_name() -> str:
    """The host CPU's model name (/proc/cpuinfo), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_record(device: torch.device) -> dict:
    """What the job ran on, read from the device itself."""
    record = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host_cpu": cpu_name(),
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        record.update(
            device_type="cuda",
            device_name=props.name,
            compute_capability=f"{props.major}.{props.minor}",
            multiprocessors=props.multi_processor_count,
            memory_bytes=props.total_memory,
            l2_cache_bytes=getattr(props, "L2_cache_size", None),
            driver=_nvidia_driver(),
            clocks=_nvidia_clocks(props),
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
        )
    else:
        record.update(
            device_type="cpu", device_name=record["host_cpu"], driver=None, cuda=None, cudnn=None,
            mkldnn=torch.backends.mkldnn.is_available(),
        )
    return record


def provenance(device: torch.device, used: dict, repo: Path, label: str, emulated: bool) -> dict:
    """Where and how a result was measured; `used` is the configuration the job used (digested)."""
    return {
        "hardware_label": label,
        "emulated_on_cpu": emulated,
        **device_record(device),
        # The GPU this job held alone (measurement.gpus), where it ran on one.
        "gpu_lease": lease.provenance() if (lease := gpus.held()) is not None else None,
        "config_digest": config_digest(used),
        "workflow_commit": workflow_commit(repo),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
