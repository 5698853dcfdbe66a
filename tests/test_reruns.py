"""What Snakemake reruns in the tiny run (conftest.finished_run) when something changes: nothing for a second
invocation, one job and what depends on it on request, one variant's jobs for its changed definition, the profiles
for a changed warm-up, one figure for an edited figure module (to the same bytes), every output for shared reporting
code."""

import re

import pytest

from conftest import RENDERING, TINY, copy_run, job_messages, job_stats, planned_jobs, snakemake
from reporting.manifest import read_manifest

pytestmark = pytest.mark.workflow


def test_second_invocation_has_nothing_to_do(finished_run):
    again = snakemake(finished_run, "-n", *TINY, "paper/figures/all")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_rerun_one_training_job_alone(finished_run):
    assert planned_jobs(finished_run, "-R", "train", *TINY, "results/wholehead/cpu/channels_last/train.json") == {"train": 1}


def test_rerun_one_training_job_with_everything_downstream(finished_run):
    args = ("--forcerun", "results/wholehead/cpu/channels_last/train.json", *TINY, "paper/figures/all")
    messages = job_messages(finished_run, *args)
    assert "Training channels_last on cpu" in messages
    assert "Sampling held-out masks with channels_last on cpu" in messages
    assert "Numeric fidelity and image quality of channels_last on cpu" in messages
    assert not any(re.search(r"\bbaseline\b.* on cpu$", m) for m in messages)  # no baseline measurement reruns
    assert {"manifest", "fig08_end_to_end", "fig09_quality"} <= set(planned_jobs(finished_run, *args))


def test_changed_variant_definition_reruns_only_that_variant(finished_run):
    overlay = finished_run / "changed.yaml"
    overlay.write_text("variants:\n  channels_last: {cudnn_tf32: false, matmul_tf32: false, channels_last: true,"
                       " cudnn_benchmark: true}\n")
    messages = job_messages(finished_run, "--configfile", "tests/tiny.yaml", "changed.yaml", "--", "paper/figures/all")
    assert "Training channels_last on cpu" in messages
    assert not any(re.search(r"\bbaseline\b.* on cpu$", m) for m in messages)  # no baseline measurement reruns


def test_editing_a_figure_module_rerenders_only_that_figure_byte_identically(finished_run, tmp_path):
    workdir = tmp_path / "wf"
    copy_run(finished_run, workdir)
    before = read_manifest(workdir / "paper/figures/all")
    module = workdir / "workflow/scripts/reporting/outputs/fig01_runtime_breakdown.py"
    module.write_text(module.read_text() + "\n# a comment: the code changed, the figure must not\n")
    done = snakemake(workdir, "--cores", "1", *TINY, "paper/figures/all")
    assert done.returncode == 0, done.stderr[-2000:]
    assert job_stats(done) == {"fig01_runtime_breakdown": 1, "article": 1, "manifest": 1}
    # No timestamps or random ids in PDF/PNG: the figure and the article typeset again are the same bytes.
    assert read_manifest(workdir / "paper/figures/all") == before
    # The shared reporting code re-renders every output, and re-measures nothing.
    shared = workdir / "workflow/scripts/reporting/derived.py"
    shared.write_text(shared.read_text() + "\n")
    planned = planned_jobs(workdir, *TINY, "paper/figures/all")
    assert set(planned) == RENDERING, planned


def test_profile_jobs_rerun_when_their_warm_up_changes_and_not_for_the_timed_steps(finished_run):
    """Each job's params are what it depends on: the profiler's warm-up reprofiles, the training job's step counts
    do not (and retrain only)."""
    (finished_run / "warm.yaml").write_text("profiling: {warmup_steps: 2}\n")
    planned = planned_jobs(finished_run, "--configfile", "tests/tiny.yaml", "warm.yaml", "--", "paper/figures/all")
    assert planned.get("profile_torch") == 4 and "train" not in planned and "sample" not in planned
    (finished_run / "steps.yaml").write_text("train: {measured_steps: 3}\n")
    planned = planned_jobs(finished_run, "--configfile", "tests/tiny.yaml", "steps.yaml", "--", "paper/figures/all")
    assert planned.get("train") == 2 and "profile_torch" not in planned
