"""The tiny configuration's measuring chain built twice: every output not declared timing-bearing is the same bytes.

The first run is the shared clean run (conftest.finished_run). The second is a copy of it whose measurements and
everything made from them are deleted and built again: training, sampling, quality, the fast samplers, the quality
study, collecting, and the deterministic figures and tables. What stays is what those outputs are not made from anew:
the datasets (their determinism is tested apart: test_data.py builds the synthetic and the prepared set twice), the
preflight, and the profiles, device rates and paired rounds, which feed only timing-bearing outputs. Half a clean
run's jobs, the same claim: the same inputs give the same bytes.
"""

import shutil

import pytest

from conftest import TINY, copy_run, file_sha256, job_stats, snakemake
from reporting.manifest import read_sections
from reporting.registry import deterministic_files, timing_bearing_files

pytestmark = pytest.mark.workflow

# What a run variant's folder keeps when its measurements are built again (the rest is deleted).
KEPT_IN_A_RUN = {"profile", "logs"}


def delete_the_measurements(run) -> None:
    """Every measurement of the run and what is made from it: each run variant's files but its profiles and logs, the
    quality study's runs, the collected tables and the rendered outputs."""
    label = run / "results/wholehead/cpu"
    for variant in (path for path in label.iterdir() if (path / "train.json").exists()):
        for item in variant.iterdir():
            if item.name not in KEPT_IN_A_RUN:
                shutil.rmtree(item) if item.is_dir() else item.unlink()
    shutil.rmtree(label / "study")
    shutil.rmtree(run / "results/wholehead/collected")
    for folder in ("paper/figures", "paper/tables"):
        for item in (run / folder).iterdir():
            if item.is_file() and item.name != ".gitkeep":
                item.unlink()


@pytest.fixture(scope="session")
def measured_again(finished_run, tmp_path_factory):
    workdir = copy_run(finished_run, tmp_path_factory.mktemp("again") / "wf")
    delete_the_measurements(workdir)
    done = snakemake(workdir, "--cores", "2", *TINY, *sorted(deterministic_files()))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir, job_stats(done)


def test_the_measuring_chain_built_again_differs_only_in_timing_bearing_files(measured_again, finished_run):
    """Every figure and table not declared timing-bearing is byte-identical between the two builds (the losses,
    samples, quality figures and the hardware and workload tables); the manifest marks the others."""
    again, jobs = measured_again
    assert {"train": 2, "sample": 2, "quality": 2, "study_run": 2, "collect_results": 1}.items() <= jobs.items(), jobs
    assert not {"synthetic_dataset", "prepare_dataset", "profile_torch", "compare_group"} & set(jobs), jobs
    first = read_sections(finished_run / "paper/figures/all")
    assert set(first["timing"]) == timing_bearing_files()
    assert set(first["deterministic"]) == deterministic_files()
    assert {name: file_sha256(again / name) for name in first["deterministic"]} == first["deterministic"]
    assert {"paper/figures/fig09_quality.png", "paper/tables/tab06_quality.csv"} <= set(first["deterministic"])
