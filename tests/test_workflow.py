"""The workflow end to end in a temporary copy: the DAG runs, outputs are listed with their hashes, reruns."""

import json
import os
import re
import shutil
import zipfile

import pytest

from conftest import copy_workflow, snakemake
from reporting.manifest import read_manifest, sha256
from reporting.registry import OUTPUTS

pytestmark = pytest.mark.workflow
TINY = ("--configfile", "tests/tiny.yaml", "--")
RENDERING = {output.id for output in OUTPUTS} | {"collect_results", "manifest"}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """The tiny configuration run once through `paper/figures/all`."""
    workdir = copy_workflow(tmp_path_factory.mktemp("run") / "wf")
    done = snakemake(workdir, "--cores", "2", *TINY, "paper/figures/all")
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def planned_jobs(workdir, *args) -> dict[str, int]:
    """Job counts per rule of a dry run."""
    plan = snakemake(workdir, "-n", *args)
    assert plan.returncode == 0, plan.stderr[-2000:]
    stats = re.search(r"Job stats:\n.*?\n-+\s+-+\n(.*?)\ntotal", plan.stdout + plan.stderr, re.S)
    if stats is None:
        return {}
    return {name: int(count) for name, count in re.findall(r"^(\S+)\s+(\d+)$", stats.group(1), re.M)}


def job_messages(workdir, *args) -> list[str]:
    """The `message:` lines of the jobs a dry run plans (measurement jobs name their variant and label)."""
    plan = snakemake(workdir, "-n", *args)
    assert plan.returncode == 0, plan.stderr[-2000:]
    return re.findall(r"^Job \d+: (.*)$", plan.stdout + plan.stderr, re.M)


def test_outputs_are_listed_with_their_hashes(finished_run):
    manifest = read_manifest(finished_run / "paper/figures/all")
    expected = {path for output in OUTPUTS for path in output.files_out().values()}
    assert "paper/tables/tab03_kernels_by_class.csv" in expected and "paper/figures/fig08_end_to_end.png" in expected
    assert set(manifest) == expected
    for name, digest in manifest.items():
        path = finished_run / name
        assert path.stat().st_size > 0 and sha256(path) == digest


def test_measurements_and_profiles_of_every_variant(finished_run):
    train = json.loads((finished_run / "results/cpu/channels_last/train.json").read_text())
    assert train["provenance"]["switches"]["channels_last"] is True
    assert train["step_time"]["n"] == 2 and train["step_time"]["median_ms"] > 0
    quality = json.loads((finished_run / "results/cpu/baseline/quality.json").read_text())
    assert quality["vs_baseline"]["identical"] is True
    assert quality["numeric"]["forward_relative_error"] < 1e-4
    kernels = (finished_run / "paper/tables/tab03_kernels.csv").read_text()
    for variant in ("baseline", "channels_last"):
        for phase in ("train", "sample"):
            assert f"cpu,{variant},{phase},torch,measured here," in kernels
    assert "h200,tf32,train,ncu,shipped reference,NVIDIA H200," in kernels  # the shipped set, side by side


def test_second_invocation_has_nothing_to_do(finished_run):
    again = snakemake(finished_run, "-n", *TINY, "paper/figures/all")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_rerun_one_training_job_alone(finished_run):
    assert planned_jobs(finished_run, "-R", "train", *TINY, "results/cpu/channels_last/train.json") == {"train": 1}


def test_rerun_one_training_job_with_everything_downstream(finished_run):
    args = ("--forcerun", "results/cpu/channels_last/train.json", *TINY, "paper/figures/all")
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


def test_gpu_label_on_a_machine_without_it_fails_in_one_line(finished_run, tmp_path):
    workdir = tmp_path / "wf"
    shutil.copytree(finished_run, workdir)
    run = snakemake(workdir, "--cores", "1", "--config", "gpus=[h200]", *TINY, "results/h200/baseline/train.json")
    assert run.returncode != 0
    assert re.search(r"error: label 'h200' needs a CUDA GPU matching '.*H200.*', but no CUDA device is visible",
                     run.stderr)
    assert not (workdir / "results/h200/baseline/train.json").exists()


@pytest.mark.parametrize(
    "overlay, message",
    [
        ("dataset: {shape: [30, 32, 32]}", "must be divisible by 16"),
        ("run_variants: [baseline, fp8]", "'fp8', which is not defined under 'variants'"),
        ("gpus: [mi300]", "'mi300', which is not defined under 'hardware'"),
        ("train: {warmup_steps: 0}", "0 is less than the minimum of 1"),
    ],
)
def test_wrong_config_is_named(workflow_copy, overlay, message):
    (workflow_copy / "bad.yaml").write_text(overlay + "\n")
    run = snakemake(workflow_copy, "-n", "--configfile", "bad.yaml")
    assert run.returncode != 0
    assert message in run.stderr + run.stdout


def test_results_of_two_machines_merge_into_one_comparison(finished_run, tmp_path):
    """The README's merge recipe: another machine's results/<gpu>/ tree plus ours, tables and figures over both
    labels without re-measuring. The other machine measures baseline only (what the comparison below needs)."""
    other = copy_workflow(tmp_path / "other")
    (other / "other.yaml").write_text("gpus: [h200]\nemulate_gpus_on_cpu: true\nrun_variants: [baseline]\n")
    measured = [f"results/h200/baseline/{name}" for name in ("quality.json", "train_steps.csv")]
    measured += [f"results/h200/baseline/profile/{phase}/torch_{kind}" for phase in ("train", "sample")
                 for kind in ("summary.csv", "kernels.parquet")]
    done = snakemake(other, "--cores", "2", "--configfile", "tests/tiny.yaml", "other.yaml", "--", *measured)
    assert done.returncode == 0, done.stderr[-3000:]

    merged = tmp_path / "merged"
    shutil.copytree(finished_run, merged)
    shutil.copytree(other / "results" / "h200", merged / "results" / "h200")  # keeps times, like rsync -a
    for path in [merged / "results" / "dataset", *(merged / "results" / "dataset").rglob("*")]:
        os.utime(path, (946684800, 946684800), follow_symlinks=False)  # 2000-01-01, as the README says
    (merged / "merged.yaml").write_text("gpus: [cpu, h200]\nrun_variants: [baseline]\n")
    args = ("--configfile", "tests/tiny.yaml", "merged.yaml", "--rerun-triggers", "params", "input", "--")
    planned = planned_jobs(merged, *args, "paper/figures/all")
    assert planned and set(planned) <= RENDERING, planned
    done = snakemake(merged, "--cores", "2", *args, "paper/tables/tab06_quality.csv", "paper/figures/fig08_end_to_end.png")
    assert done.returncode == 0, done.stderr[-3000:]
    quality = (merged / "paper/tables/tab06_quality.csv").read_text()
    assert "\ncpu,baseline," in quality and "\nh200,baseline," in quality


def test_paper_configuration_plans_the_full_matrix(workflow_copy):
    jobs = planned_jobs(workflow_copy, "paper/figures/all", "--configfile", "config/paper.yaml")
    assert jobs["train"] == jobs["sample"] == jobs["quality"] == 5  # five variants on the h200 label
    assert jobs["profile_torch"] == 10  # two phases each; ncu/nsys join where they are installed
    assert jobs["manifest"] == 1


def test_profiles_target_profiles_every_variant_and_phase_without_training(workflow_copy):
    jobs = planned_jobs(workflow_copy, "profiles", "--configfile", "config/paper.yaml")
    assert jobs["profile_torch"] == jobs["extract_profile"] == 10  # five variants, two phases
    assert "train" not in jobs and "manifest" not in jobs


def test_html_report_carries_every_output_with_its_caption(finished_run, tmp_path):
    report = tmp_path / "report.zip"
    done = snakemake(finished_run, "--report", str(report), *TINY, "paper/figures/all")
    assert done.returncode == 0, done.stderr[-2000:]
    names = "\n".join(zipfile.ZipFile(report).namelist())
    for output in OUTPUTS:
        assert f"{output.id}.png" in names if output.kind == "figure" else f"{output.id}.csv" in names


def test_editing_a_figure_module_rerenders_only_that_figure_byte_identically(finished_run, tmp_path):
    workdir = tmp_path / "wf"
    shutil.copytree(finished_run, workdir, symlinks=True)
    before = read_manifest(workdir / "paper/figures/all")
    module = workdir / "workflow/scripts/reporting/outputs/fig01_runtime_breakdown.py"
    module.write_text(module.read_text() + "\n# a comment: the code changed, the figure must not\n")
    assert planned_jobs(workdir, *TINY, "paper/figures/all") == {"fig01_runtime_breakdown": 1, "manifest": 1}
    done = snakemake(workdir, "--cores", "1", *TINY, "paper/figures/all")
    assert done.returncode == 0, done.stderr[-2000:]
    assert read_manifest(workdir / "paper/figures/all") == before  # no timestamps or random ids in PDF/PNG
    # The shared reporting code re-renders every output, and re-measures nothing.
    shared = workdir / "workflow/scripts/reporting/derived.py"
    shared.write_text(shared.read_text() + "\n")
    planned = planned_jobs(workdir, *TINY, "paper/figures/all")
    assert set(planned) == RENDERING, planned
