"""Shared fixtures: a temporary copy of the workflow to run Snakemake in, the tiny configuration's end-to-end run
(built once for all test workers), and a job script run without Snakemake."""

import hashlib
import os
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from reporting.registry import OUTPUTS
from shared_builds import built_once, pytest_runtest_makereport, pytest_terminal_summary  # noqa: F401 (hooks)
from watched import run_watched

# One OpenMP thread per test worker: the two workers (pyproject.toml) share two cores, and PyTorch's default of a thread
# per core in each of them oversubscribes the cores with threads that spin while they wait (the model, compile and
# variant tests took 85 s of CPU time with it, 49 s without). Snakemake runs each job with one thread the same way.
# Set before any test module imports torch; a value the caller set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402 (after the thread setting above)

# Triton kernels of the project (medddpm.ndhwc_norm) run in Triton's interpreter, on CPU tensors, where no CUDA GPU
# is: Triton reads the setting when the kernels are defined, so it is set before any test module imports them.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "workflow" / "scripts"
# What a clean checkout holds; results and caches of earlier runs stay behind.
IGNORED = shutil.ignore_patterns("results", ".snakemake", "__pycache__", ".pytest_cache", ".git", ".whl", "logs")


# The longest test files, in the order the test workers should start them. With `--dist loadfile` and
# `--no-loadscope-reorder` (pyproject.toml) a worker is handed the next file in this order whenever it has two tests
# or fewer left: the first worker builds the end-to-end run, the second runs the SLURM test meanwhile (half of it
# waiting for its cluster: the end-to-end run's parallel jobs take that time) and the error cases, about as long as
# that run takes; then the readers of the run (test_reproducibility.py builds its measuring chain again,
# test_reruns.py, test_sharing.py) and the other long files follow on whichever worker runs low, then the short ones,
# so that no worker is left with a long file at the end.
LONGEST_FIRST = ("test_workflow.py", "test_slurm.py", "test_errors.py", "test_reproducibility.py", "test_reruns.py",
                 "test_sharing.py", "test_reporting.py", "test_compile.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order
    if not torch.cuda.is_available():
        for item in items:
            if item.get_closest_marker("cuda"):
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


def copy_workflow(dest: Path) -> Path:
    shutil.copytree(REPO, dest, ignore=IGNORED)
    for folder in ("paper/figures", "paper/tables"):
        for item in (dest / folder).iterdir():
            if item.name != ".gitkeep":
                item.unlink() if item.is_file() else shutil.rmtree(item)
    return dest


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """`snakemake *args` in workdir, without a wall-clock limit: stopped only when stuck or runaway (watched.py)."""
    return run_watched([sys.executable, "-m", "snakemake", *args], workdir)


def copy_run(run: Path, dest: Path) -> Path:
    """A copy of a finished run for a test to change. Snakemake's locks stay behind: the run is shared by the test
    workers, and another one may be running Snakemake in it at that moment."""
    shutil.copytree(run, dest, symlinks=True, ignore=shutil.ignore_patterns("locks"))
    return dest


@pytest.fixture
def workflow_copy(tmp_path: Path) -> Path:
    return copy_workflow(tmp_path / "wf")


TINY = ("--configfile", "tests/tiny.yaml", "--")


def file_sha256(path) -> str:
    """Digest computed here with hashlib, not with the workflow's own manifest code."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


RENDERING = {output.id for output in OUTPUTS} | {"collect_results", "article", "manifest"}


def job_stats(done: subprocess.CompletedProcess) -> dict[str, int]:
    """Job counts per rule from the `Job stats` table that Snakemake prints before it runs (or plans) anything."""
    stats = re.search(r"Job stats:\n.*?\n-+\s+-+\n(.*?)\ntotal", done.stdout + done.stderr, re.S)
    if stats is None:
        return {}
    return {name: int(count) for name, count in re.findall(r"^(\S+)\s+(\d+)$", stats.group(1), re.M)}


def dry_run(workdir, *args) -> tuple[dict[str, int], str]:
    """Job counts per rule of a dry run, and what it printed (each job's reason names the files it would write)."""
    plan = snakemake(workdir, "-n", *args)
    assert plan.returncode == 0, plan.stderr[-2000:]
    return job_stats(plan), plan.stdout + plan.stderr


def planned_jobs(workdir, *args) -> dict[str, int]:
    """Job counts per rule of a dry run."""
    return dry_run(workdir, *args)[0]


def job_messages(workdir, *args) -> list[str]:
    """The `message:` lines of the jobs a dry run plans (measurement jobs name their variant and label)."""
    return re.findall(r"^Job \d+: (.*)$", dry_run(workdir, *args)[1], re.M)


def run_tiny_configuration(dest: Path) -> None:
    """tests/tiny.yaml through `paper/figures/all` in a fresh copy of the workflow at dest."""
    copy_workflow(dest)
    done = snakemake(dest, "--cores", "2", *TINY, "paper/figures/all")
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """The tiny configuration run once through `paper/figures/all`, shared by every test file that reads its outputs
    (on any worker: test_workflow.py's tests and the comparison with a second clean run run side by side)."""
    return built_once(tmp_path_factory, "finished_run", run_tiny_configuration)


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


def random_prepared_dataset(tmp_path_factory, shape=(8, 8, 8), cases: int = 3, heldout: int = 1, seed: int = 0,
                            tumour_start: int = 3) -> Path:
    """A prepared dataset of `cases` random cases of `shape` (`heldout` held out), written without nilearn: each mask
    a brain box with one tumour voxel (at z = tumour_start + its index), each image uniform noise."""
    import nibabel as nib
    import numpy as np

    from medddpm.prepare import prepare_dataset, read_wholehead_cases

    raw = tmp_path_factory.mktemp("raw")
    rng = np.random.default_rng(seed)
    for index in range(cases):
        mask = np.zeros(shape, np.uint8)
        mask[1:-1, 1:-1, 1:-1] = 1
        mask[3, 3, tumour_start + index] = 2
        for sub, volume in (("image", rng.uniform(0, 100, shape).astype(np.float32)), ("mask", mask)):
            (raw / sub).mkdir(exist_ok=True)
            nib.save(nib.Nifti1Image(volume, np.eye(4)), raw / sub / f"sample_{index}.nii.gz")
    out = tmp_path_factory.mktemp("prepared") / "prepared"
    prepare_dataset(read_wholehead_cases(raw), out, shape, heldout=heldout, seed=0)
    return out


def memory_layout(x) -> str:
    """How a tensor is laid out: contiguous, channels_last_3d, or its strides."""
    import torch

    if x.is_contiguous():
        return "contiguous"
    if x.ndim == 5 and x.is_contiguous(memory_format=torch.channels_last_3d):
        return "channels_last_3d"
    return f"strides {x.stride()}"
