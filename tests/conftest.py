"""Shared fixtures: a temporary copy of the workflow to run Snakemake in, and a job script run without Snakemake."""

import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "workflow" / "scripts"
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


class Files(list):
    """Stand-in for Snakemake's input/output/log lists: positional, with optional names (a name may hold a list)."""

    def __init__(self, *paths: Path, **named) -> None:
        super().__init__(map(str, paths))
        for key, value in named.items():
            value = [str(v) for v in value] if isinstance(value, list) else str(value)
            setattr(self, key, value)
            self.extend(value if isinstance(value, list) else [value])


class Params(dict):
    """Stand-in for Snakemake's params: by name as attributes, and as a mapping."""

    __getattr__ = dict.__getitem__


def run_script(name: str, **fields) -> None:
    """Run workflow/scripts/<name> as Snakemake's `script:` would, with `fields` as its `snakemake` object."""
    fields.setdefault("scriptdir", str(SCRIPTS))
    runpy.run_path(str(SCRIPTS / name), init_globals={"snakemake": SimpleNamespace(**fields)}, run_name="__main__")
