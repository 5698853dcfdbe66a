"""What a result file says about where it was measured (measurement.provenance), against sources other than the code
under test: a digest of a canonical JSON text written here by hand, commits of a git repository made here, the
package metadata of torch, the interpreter's own version and /proc/cpuinfo read by grep."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import shutil
import subprocess
import sys

import pytest
import torch

from measurement import provenance


def test_the_config_digest_is_the_sha256_of_the_canonical_json():
    text = '{"a": [1, 2], "b": {"c": "x", "d": 0.5}}'  # keys sorted, json.dumps's separators, written by hand
    expected = hashlib.sha256(text.encode()).hexdigest()
    assert provenance.config_digest({"b": {"d": 0.5, "c": "x"}, "a": [1, 2]}) == expected
    assert provenance.config_digest({"a": [1, 2], "b": {"c": "x", "d": 0.25}}) != expected


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
    assert record["hardware_label"] == "cpu" and record["emulated_on_cpu"] is False
    assert before <= dt.datetime.fromisoformat(record["measured_at"]) <= after
