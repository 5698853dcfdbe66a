"""Shared fixtures: a temporary copy of the workflow to run Snakemake in."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# What a clean checkout holds; results and caches of earlier runs stay behind.
IGNORED = shutil.ignore_patterns("results", ".snakemake", "__pycache__", ".pytest_cache", ".git", ".whl", "logs")


def copy_workflow(dest: Path) -> Path:
    shutil.copytree(REPO, dest, ignore=IGNORED)
    for folder in ("paper/figures", "paper/tables"):
        for item in (dest / folder).iterdir():
            if item.name != ".gitkeep":
                item.unlink() if item.is_file() else shutil.rmtree(item)
    return dest


def snakemake(workdir: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture
def workflow_copy(tmp_path: Path) -> Path:
    return copy_workflow(tmp_path / "wf")
