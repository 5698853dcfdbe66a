"""What a result file says about where it was measured (measurement.provenance), against sources other than the code
under test: a digest of a canonical JSON text written here by hand, commits of a git repository made here, the
package metadata of torch, the interpreter's own version and /proc/cpuinfo read by grep."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest
import torch

from measurement import provenance

REPO = Path(__file__).resolve().parents[1]


def test_the_config_digest_is_the_sha256_of_the_canonical_json():
    text = '{"a": [1, 2], "b": {"c": "x", "d": 0.5}}'  # keys sorted, json.dumps's separators, written by hand
    expected = hashlib.sha256(text.encode()).hexdigest()
    assert provenance.config_digest({"b": {"d": 0.5, "c": "x"}, "a": [1, 2]}) == expected
    assert provenance.config_digest({"a": [1, 2], "b": {"c": "x", "d": 0.25}}) != expected
    # A value JSON has no type for (a path in a rule's params) is digested as its text.
    assert provenance.config_digest({"p": PurePosixPath("data/x")}) == hashlib.sha256(b'{"p": "data/x"}').hexdigest()


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_workflow_commit_is_the_checked_out_one_and_says_dirty_for_changed_tracked_files(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "Snakefile").write_text("rule all:\n")
    _git(repo, "add", "Snakefile")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "first")
    first = _git(repo, "log", "-1", "--format=%H")
    assert len(first) == 40 and provenance.workflow_commit(repo) == first
    (repo / "notes.txt").write_text("an untracked file changes nothing measured")
    assert provenance.workflow_commit(repo) == first
    (repo / "Snakefile").write_text("rule all:\n    input: []\n")
    assert provenance.workflow_commit(repo) == first + "-dirty"
    outside = tmp_path / "not-a-repository"
    outside.mkdir()
    assert provenance.workflow_commit(outside) == "unknown"


def test_a_cpu_runs_record_names_the_versions_and_the_processor_as_the_system_does(tmp_path):
    before = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    record = provenance.provenance(torch.device("cpu"), {"x": 1}, tmp_path, "cpu", False)
    after = dt.datetime.now(dt.timezone.utc)
    assert record["torch"].split("+")[0] == importlib.metadata.version("torch").split("+")[0]
    assert record["python"] == "{}.{}.{}".format(*sys.version_info[:3])
    grep = subprocess.run(["grep", "-m1", "^model name", "/proc/cpuinfo"], capture_output=True, text=True)
    if grep.returncode == 0:  # x86 Linux names its model there
        assert record["host_cpu"] == grep.stdout.split(":", 1)[1].strip()
    assert record["device_type"] == "cpu" and record["device_name"] == record["host_cpu"]
    assert record["cuda"] is None and record["cudnn"] is None and record["driver"] is None
    assert record["cpu_threads"] == torch.get_num_threads() >= 1
    assert record["mkldnn"] is torch.backends.mkldnn.is_available()
    assert record["hardware_label"] == "cpu" and record["emulated_on_cpu"] is False
    assert before <= dt.datetime.fromisoformat(record["measured_at"]) <= after
    assert record["config_digest"] == hashlib.sha256(b'{"x": 1}').hexdigest()
    assert record["workflow_commit"] == "unknown" and record["gpu_lease"] is None  # no repository, no GPU held


def test_a_gpus_record_reads_torchs_properties_and_nvidia_smis_answers(tmp_path, monkeypatch):
    """The H200's record as the shipped set holds it (data/reference/wholehead/h200/baseline/train.json), made here
    from the properties torch gave there and the answers nvidia-smi gave (a stand-in on PATH that prints them)."""
    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
                            total_memory=150109880320, L2_cache_size=62914560, pci_domain_id=0, pci_bus_id=0,
                            pci_device_id=6)
    asked = tmp_path / "asked"
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"""#!/bin/sh
echo "$@" >> {asked}
case "$*" in
  *driver_version*) echo "580.159.04" ;;
  *clocks.max.sm*) echo "1980, 1980, 700.00" ;;
esac
""")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    record = provenance.device_record(torch.device("cuda", 0))
    assert record["device_type"] == "cuda" and record["device_name"] == "NVIDIA H200"
    assert record["compute_capability"] == "9.0" and record["multiprocessors"] == 132
    assert record["memory_bytes"] == 150109880320 and record["l2_cache_bytes"] == 62914560
    assert record["driver"] == "580.159.04"
    assert record["clocks"] == {"sm_max_mhz": 1980.0, "sm_application_mhz": 1980.0, "power_limit_w": 700.0}
    assert record["cuda"] == torch.version.cuda and record["cudnn"] == torch.backends.cudnn.version()
    assert "-i 00000000:00:06.0" in asked.read_text()  # the clocks of this GPU, by its PCI address
    shipped = json.loads((REPO / "data/reference/wholehead/h200/baseline/train.json").read_text())["provenance"]
    for key in ("device_name", "compute_capability", "multiprocessors", "memory_bytes", "l2_cache_bytes", "driver",
                "clocks"):
        assert record[key] == shipped[key], key


@pytest.mark.parametrize("domain, bus, device, expected", [
    (0, 0x00, 0x06, None),  # the H200 the shipped sets were measured on: nvidia-smi's own line, read below
    (0, 0x1B, 0x00, "00000000:1B:00.0"),  # a second board of a multi-GPU host: bus and device told apart
    (1, 0xC1, 0x1F, "00000001:C1:1F.0"),
])
def test_the_pci_address_is_written_as_nvidia_smi_writes_it(domain, bus, device, expected):
    """torch's PCI domain, bus and device of a GPU become nvidia-smi's `pci.bus_id` (domain:bus:device.function, in
    hexadecimal): the key by which a job asks nvidia-smi for its own GPU's clocks."""
    if expected is None:  # nvidia-smi's line recorded beside the H200 measurements
        recorded = (REPO / "data/measurements/h200-2026-12-03-paired/gpu_state.csv").read_text().splitlines()
        expected = recorded[1].split(", ")[recorded[0].split(", ").index("pci.bus_id")]
        assert expected == "00000000:00:06.0"
    props = SimpleNamespace(pci_domain_id=domain, pci_bus_id=bus, pci_device_id=device)
    assert provenance._pci_address(props) == expected
    assert provenance._pci_address(SimpleNamespace(name="a GPU torch gives no PCI ids for")) is None
