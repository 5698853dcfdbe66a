"""The hardware-label check with a faked GPU: a label runs only on a device whose name matches the label's pattern in
config.yaml, and a mismatch ends the job with one line naming the label, the pattern and the device found."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from measurement import devices
from measurement.devices import DeviceMismatch, resolve_device
from jobio.job import run_job

HARDWARE = yaml.safe_load((Path(__file__).resolve().parents[1] / "config.yaml").read_text())["hardware"]


@pytest.fixture
def gpu(monkeypatch):
    """Fake one visible CUDA device whose name the test sets."""

    def install(name: str) -> None:
        monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: True)
        # The job runs on device 0 (torch.device("cuda", 0)): the name checked must be device 0's.
        monkeypatch.setattr(devices.torch.cuda, "get_device_name",
                            lambda index=None: name if index == 0 else f"device {index} is not the one used")

    return install


@pytest.mark.parametrize(("label", "name"), [
    ("h200", "NVIDIA H200"),
    ("h200", "NVIDIA H200 NVL"),
    ("h100", "NVIDIA H100 80GB HBM3"),
    ("a100", "NVIDIA A100-SXM4-80GB"),
    ("a100", "NVIDIA A100 80GB PCIe"),
    ("v100", "Tesla V100-SXM2-32GB"),
])
def test_a_gpu_label_runs_on_the_gpu_it_names(gpu, label, name):
    gpu(name)
    assert resolve_device(label, HARDWARE) == torch.device("cuda", 0)


@pytest.mark.parametrize(("label", "name"), [
    ("h200", "NVIDIA GH200 480GB"),  # Grace Hopper: another product, with H200 inside its name
    ("h200", "NVIDIA H100 80GB HBM3"),
    ("h100", "NVIDIA H200"),
    ("h100", "NVIDIA GH100"),
    ("a100", "NVIDIA A10"),
    ("a100", "NVIDIA A1000"),
    ("v100", "NVIDIA V100S"),
])
def test_a_gpu_that_does_not_match_its_label_is_refused_in_one_line(gpu, label, name):
    gpu(name)
    with pytest.raises(DeviceMismatch) as caught:
        resolve_device(label, HARDWARE)
    assert str(caught.value) == (
        f"label '{label}' expects a GPU matching '{HARDWARE[label]['name_pattern']}' but found '{name}'; fix: use the "
        "label of this GPU (gpus: [...]), or add one for it under 'hardware' in the config")


def test_the_name_pattern_ignores_case(gpu):
    gpu("nvidia h200")
    assert resolve_device("h200", HARDWARE) == torch.device("cuda", 0)


def test_labels_without_a_gpu_or_undefined_are_refused_and_cpu_needs_none(monkeypatch):
    monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices.torch.cuda, "get_device_name", lambda index=0: pytest.fail("no device to name"))
    with pytest.raises(DeviceMismatch) as caught:
        resolve_device("h200", HARDWARE)
    pattern = HARDWARE["h200"]["name_pattern"]
    assert str(caught.value) == (f"label 'h200' needs a CUDA GPU matching '{pattern}', but no CUDA device is "
                                 "visible; fix: run it on a machine with that GPU, or measure this machine under its "
                                 "own label (gpus: [cpu])")
    with pytest.raises(DeviceMismatch) as caught:
        resolve_device("mi300", HARDWARE)
    assert str(caught.value) == "hardware label 'mi300' is not defined under 'hardware' in the config; fix: add it there"
    assert resolve_device("cpu", HARDWARE) == torch.device("cpu")
    # The test mode runs GPU labels on the CPU; never silently, the results say so (emulated_on_cpu).
    assert resolve_device("h200", HARDWARE, emulate_gpus_on_cpu=True) == torch.device("cpu")


def test_a_cpu_label_never_asks_for_a_gpu(gpu):
    gpu("NVIDIA H200")
    assert resolve_device("cpu", HARDWARE) == torch.device("cpu")


@pytest.fixture
def host_cpu(monkeypatch):
    """Fake the host CPU's model name (what /proc/cpuinfo says)."""

    def install(name: str) -> None:
        monkeypatch.setattr(devices, "cpu_name", lambda: name)

    return install


def test_a_cpu_label_with_a_name_pattern_runs_only_on_that_cpu(host_cpu):
    """A CPU label may name its model as GPU labels do: a run of another CPU under it is refused, not recorded."""
    hardware = {**HARDWARE, "epyc7763": {"device": "cpu", "name_pattern": r"\bEPYC 7763\b", "profilers": ["torch"]}}
    host_cpu("AMD EPYC 7763 64-Core Processor")
    assert resolve_device("epyc7763", hardware) == torch.device("cpu")
    host_cpu("Intel(R) Xeon(R) Platinum 8480+")
    with pytest.raises(DeviceMismatch) as caught:
        resolve_device("epyc7763", hardware)
    assert str(caught.value) == (
        "label 'epyc7763' expects a CPU matching '\\bEPYC 7763\\b' but found 'Intel(R) Xeon(R) Platinum 8480+'; fix: "
        "use the label of this CPU (gpus: [...]), or add one for it under 'hardware' in the config")
    assert resolve_device("cpu", hardware) == torch.device("cpu")  # the embedded label names no model: any CPU


def test_a_job_on_the_wrong_gpu_ends_with_that_one_line_in_its_log(gpu, tmp_path, capsys):
    gpu("NVIDIA GH200 480GB")
    log = tmp_path / "job.log"
    with pytest.raises(SystemExit) as caught:
        run_job(log, lambda: resolve_device("h200", HARDWARE))
    pattern = HARDWARE["h200"]["name_pattern"]
    line = f"error: label 'h200' expects a GPU matching '{pattern}' but found 'NVIDIA GH200 480GB'"
    assert str(caught.value).startswith(line)
    assert log.read_text().startswith(line) and log.read_text().count("\n") == 1
    assert "Traceback" not in log.read_text()
    print("after the job")  # the job's streams are given back
    assert "after the job" in capsys.readouterr().out
