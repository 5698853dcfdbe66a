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

from measurement import gpus, provenance

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


def _repository(path, commit: bool = True):
    """A git repository at path holding a Snakefile, added and (commit=True) committed."""
    path.mkdir()
    _git(path, "init", "-q")
    (path / "Snakefile").write_text("rule all:\n")
    _git(path, "add", "Snakefile")
    if commit:
        _git(path, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "first")
    return path


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_workflow_commit_is_the_checked_out_one_and_says_dirty_for_changed_tracked_files(tmp_path):
    repo = _repository(tmp_path / "repo")
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
    shipped = json.loads((REPO / "data/reference/wholehead/h200/baseline/train.json").read_text())["provenance"]
    # The job's own GPU (the second here), not the current one; torch's CUDA and cuDNN as that run reported them.
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: props if device == torch.device("cuda", 1) else None)
    monkeypatch.setattr(torch.version, "cuda", shipped["cuda"])
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: shipped["cudnn"])
    record = provenance.device_record(torch.device("cuda", 1))
    assert record["device_type"] == "cuda" and record["device_name"] == "NVIDIA H200"
    assert record["compute_capability"] == "9.0" and record["multiprocessors"] == 132
    assert record["memory_bytes"] == 150109880320 and record["l2_cache_bytes"] == 62914560
    assert record["driver"] == "580.159.04"
    assert record["clocks"] == {"sm_max_mhz": 1980.0, "sm_application_mhz": 1980.0, "power_limit_w": 700.0}
    assert "-i 00000000:00:06.0" in asked.read_text()  # the clocks of this GPU, by its PCI address
    assert shipped["cuda"] is not None and shipped["cudnn"] is not None
    for key in ("device_name", "compute_capability", "multiprocessors", "memory_bytes", "l2_cache_bytes", "driver",
                "clocks", "cuda", "cudnn"):
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


def test_a_gpu_torch_gives_no_l2_size_for_is_recorded_without_one(monkeypatch):
    props = SimpleNamespace(name="a GPU", major=8, minor=0, multi_processor_count=108, total_memory=2**34)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    monkeypatch.setattr(provenance, "_nvidia_driver", lambda: None)
    monkeypatch.setattr(provenance, "_nvidia_clocks", lambda props: None)
    record = provenance.device_record(torch.device("cuda", 0))
    assert record["l2_cache_bytes"] is None and record["memory_bytes"] == 2**34


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_workflow_commit_is_unknown_where_git_cannot_say_what_is_checked_out_or_whether_it_changed(tmp_path):
    """A repository without a commit (git rev-parse fails there while git status answers) and one whose index
    cannot be read (git status fails while rev-parse answers): neither is a commit that results could name."""
    empty = _repository(tmp_path / "empty", commit=False)
    assert _git(empty, "status", "--porcelain", "--untracked-files=no") == "A  Snakefile"
    assert provenance.workflow_commit(empty) == "unknown"
    broken = _repository(tmp_path / "broken")
    (broken / ".git" / "index").write_bytes(b"not an index")
    assert subprocess.run(["git", "-C", str(broken), "status"], capture_output=True).returncode != 0
    assert len(_git(broken, "rev-parse", "HEAD")) == 40
    assert provenance.workflow_commit(broken) == "unknown"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_results_provenance_names_the_commit_of_the_repository_it_is_given_and_the_gpu_it_held(tmp_path,
                                                                                               monkeypatch):
    repo = _repository(tmp_path / "repo")
    lease = gpus.Lease(gpus.Gpu("1", "GPU-0f2b"), tmp_path / "locks" / "GPU-0f2b.lock", 2.5)
    monkeypatch.setattr(gpus, "_HELD", [lease])
    record = provenance.provenance(torch.device("cpu"), {}, repo, "cpu", True)
    assert record["workflow_commit"] == _git(repo, "log", "-1", "--format=%H")
    assert record["gpu_lease"] == {"gpu_index": "1", "gpu_uuid": "GPU-0f2b",
                                   "gpu_lock": f"{tmp_path}/locks/GPU-0f2b.lock", "gpu_wait_seconds": 2.5}
    assert record["emulated_on_cpu"] is True


class _CpuInfo:
    """Stands in for pathlib.Path in measurement.provenance: /proc/cpuinfo with the given text, or unreadable."""

    text: str | None = None

    def __init__(self, path):
        assert str(path) == "/proc/cpuinfo"

    def read_text(self):
        if self.text is None:
            raise FileNotFoundError("/proc/cpuinfo")
        return self.text


@pytest.mark.parametrize("cpuinfo, processor, expected", [
    # A model name with a colon of its own: everything after the field's first colon.
    ("processor\t: 0\nmodel name\t: Example CPU: rev 2 @ 3.0GHz\nflags\t\t: fpu\n", "x86_64",
     "Example CPU: rev 2 @ 3.0GHz"),
    # No model name (many ARM kernels): the platform's processor, else its machine.
    ("processor\t: 0\nBogoMIPS\t: 50.00\n", "", "aarch64"),
    ("processor\t: 0\nBogoMIPS\t: 50.00\n", "arm", "arm"),
    (None, "", "aarch64"),  # no /proc/cpuinfo (macOS)
])
def test_the_cpu_name_is_the_model_name_else_what_the_platform_says(monkeypatch, cpuinfo, processor, expected):
    monkeypatch.setattr(_CpuInfo, "text", cpuinfo)
    monkeypatch.setattr(provenance, "Path", _CpuInfo)
    monkeypatch.setattr(provenance.platform, "processor", lambda: processor)
    monkeypatch.setattr(provenance.platform, "machine", lambda: "aarch64")
    assert provenance.cpu_name() == expected
