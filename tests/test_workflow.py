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


def test_quality_study_miniature_measures_real_numbers_and_says_why_there_is_no_verdict(finished_run):
    """The tiny configuration's study: baseline at seeds 0 and 1 and channels_last, 2 optimizer steps at 16^3."""
    import nibabel as nib
    import numpy as np

    study = finished_run / "results/cpu/study"
    run = json.loads((study / "baseline/seed1/run.json").read_text())
    assert run["training"]["optimizer_steps"] == 2 and run["volume_shape"] == [16, 16, 16]
    assert run["numeric"]["forward_relative_error"] < 1e-4 and run["numeric"]["gradient_relative_error"] < 1e-4
    # The per-label distance of the first sample, recomputed from the files: W1 of equal-size samples is the mean
    # absolute difference of the sorted values.
    prepared = finished_run / "results/dataset/study/prepared"
    sample = nib.load(study / "baseline/seed1/samples/sample_000.nii.gz").get_fdata()
    real = nib.load(prepared / "heldout/image_000.nii.gz").get_fdata()
    one_hot = np.asarray(nib.load(prepared / "heldout/mask_000.nii.gz").dataobj)
    labels = np.where(one_hot.any(-1), one_hot.argmax(-1) + 1, 0)
    row = run["vs_real"]["per_sample"][0]
    for label, value in row["wasserstein_by_label"].items():
        inside = labels == int(label)
        assert value == pytest.approx(np.mean(np.abs(np.sort(sample[inside]) - np.sort(real[inside]))), rel=1e-5)
    assert run["vs_real"]["ssim_mean"] < 0.3  # two steps: noise
    assert np.load(study / "baseline/seed1/slice.npy").shape == (2, 16, 16)
    same = json.loads((study / "baseline/seed0/comparison.json").read_text())["vs_baseline"]
    other = json.loads((study / "baseline/seed1/comparison.json").read_text())["vs_baseline"]
    assert same["identical"] and not other["identical"] and other["max_abs_diff"] > 0
    # The verdict says why it cannot judge, with the numbers and the threshold.
    claims = (finished_run / "paper/tables/tab05_claims.csv").read_text()
    quality = next(line for line in claims.splitlines() if line.startswith("synthesis quality") and ",cpu," in line)
    assert "not measurable here" in quality and "not brain-like" in quality
    assert "< 0.3 after 2 optimizer steps at 16x16x16" in quality
    table = (finished_run / "paper/tables/tab06_quality.csv").read_text()
    assert "\ncpu,baseline,0," in table and "\ncpu,baseline,1," in table and "\ncpu,channels_last,0," in table
    # The study's own target prints the runs and the same verdict (and measures nothing again).
    printed = snakemake(finished_run, "--cores", "1", *TINY, "quality_study")
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert "# Quality study: cpu" in printed.stdout and "Quality claim: **not measurable here**" in printed.stdout


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
        ("dataset: {source: synthetic_brats}", "whose results live under hardware labels ending in _brats"),
        ("model: {in_channels: 8}", "model.in_channels must be 3 and model.out_channels 1 (got 8 and 1)"),
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
                 for kind in ("summary.csv", "kernels.parquet")] + ["results/h200/bench.csv"]
    done = snakemake(other, "--cores", "2", "--configfile", "tests/tiny.yaml", "other.yaml", "--", *measured)
    assert done.returncode == 0, done.stderr[-3000:]

    merged = tmp_path / "merged"
    shutil.copytree(finished_run, merged)
    shutil.copytree(other / "results" / "h200", merged / "results" / "h200")  # keeps times, like rsync -a
    for path in [merged / "results" / "dataset", *(merged / "results" / "dataset").rglob("*")]:
        os.utime(path, (946684800, 946684800), follow_symlinks=False)  # 2000-01-01, as the README says
    (merged / "merged.yaml").write_text("gpus: [cpu, h200]\nrun_variants: [baseline]\nquality_study: {gpus: [cpu]}\n")
    args = ("--configfile", "tests/tiny.yaml", "merged.yaml", "--rerun-triggers", "params", "input", "--")
    planned = planned_jobs(merged, *args, "paper/figures/all")
    # Rendering, and the bench tables re-aggregated over the merged variants: nothing measured again.
    assert planned and set(planned) <= RENDERING | {"bench_table"}, planned
    done = snakemake(merged, "--cores", "2", *args, "paper/tables/tab06_quality.csv", "paper/figures/fig08_end_to_end.png")
    assert done.returncode == 0, done.stderr[-3000:]
    quality = (merged / "paper/tables/tab06_quality_checks.csv").read_text()
    assert "\ncpu,baseline," in quality and "\nh200,baseline," in quality
    assert "\ncpu,baseline,1," in (merged / "paper/tables/tab06_quality.csv").read_text()  # the study, measured here


def test_paper_configuration_plans_the_full_matrix(workflow_copy):
    jobs = planned_jobs(workflow_copy, "paper/figures/all", "--configfile", "config/paper.yaml")
    assert jobs["train"] == jobs["sample"] == jobs["quality"] == 5  # five variants on the h200 label
    # The quality study: six variants and the baseline's second seed, one dataset, one comparison.
    assert jobs["study_run"] == 7 and jobs["study_dataset"] == jobs["study_compare"] == 1
    assert jobs["profile_torch"] == 10  # two phases each; ncu/nsys join where they are installed
    assert jobs["manifest"] == 1


def test_brats_configuration_plans_the_same_study_apart_from_the_whole_head_one(workflow_copy):
    args = ("paper/figures/all", "--configfile", "config/paper.yaml", "config/brats.yaml")
    jobs = planned_jobs(workflow_copy, *args)
    assert jobs["train"] == jobs["sample"] == jobs["quality"] == 5 and jobs["profile_torch"] == 10
    assert jobs["synthetic_brats_dataset"] == jobs["prepare_dataset"] == 1 and "synthetic_dataset" not in jobs
    plan = snakemake(workflow_copy, "-n", "-p", *args)
    text = plan.stdout + plan.stderr
    assert "results/h200_brats/tf32_channels_last/train.json" in text and "results/h200/" not in text
    assert "results/dataset/prepared_brats" in text and "results/dataset/prepared " not in text
    # config/brats.yaml sets every key config/paper.yaml sets: with or without it, the same study.
    assert planned_jobs(workflow_copy, "paper/figures/all", "--configfile", "config/brats.yaml") == jobs


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


def test_profile_jobs_rerun_when_their_warm_up_changes_and_not_for_the_timed_steps(finished_run):
    """Each job's params are what it depends on: the profiler's warm-up reprofiles, the training job's step counts
    do not (and retrain only)."""
    (finished_run / "warm.yaml").write_text("profiling: {warmup_steps: 2}\n")
    planned = planned_jobs(finished_run, "--configfile", "tests/tiny.yaml", "warm.yaml", "--", "paper/figures/all")
    assert planned.get("profile_torch") == 4 and "train" not in planned and "sample" not in planned
    (finished_run / "steps.yaml").write_text("train: {measured_steps: 3}\n")
    planned = planned_jobs(finished_run, "--configfile", "tests/tiny.yaml", "steps.yaml", "--", "paper/figures/all")
    assert planned.get("train") == 2 and "profile_torch" not in planned


def test_bench_target_prints_the_table_of_every_variant(finished_run, tmp_path):
    workdir = tmp_path / "wf"
    shutil.copytree(finished_run, workdir, symlinks=True)
    assert planned_jobs(workdir, *TINY, "bench") == {"bench": 1}  # paper/figures/all made the bench table
    done = snakemake(workdir, "--cores", "2", *TINY, "bench")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "# Bench: cpu" in done.stdout and "| channels_last | fp32, channels-last |" in done.stdout
    rates = json.loads((workdir / "results/cpu/device_rates.json").read_text())
    assert rates["device_kind"] == "cpu" and rates["bf16_matmul_tflops"] > 0
    assert rates["provenance"]["hardware_label"] == "cpu"
    table = (workdir / "results/cpu/bench.csv").read_text().splitlines()
    assert len(table) == 3 and table[0].startswith("variant,switches,train_ms_per_sample,")


def test_a_variant_with_every_switch_runs_through_its_jobs(finished_run, tmp_path):
    """Every switch at once through training, sampling and the quality check (torch.compile left out: inductor's
    code generation takes minutes on a CPU; tests/test_compile.py traces it), each one marked effective or not."""
    workdir = tmp_path / "wf"
    shutil.copytree(finished_run, workdir, symlinks=True)
    (workdir / "every.yaml").write_text(
        "variants:\n  every: {cudnn_tf32: true, matmul_tf32: true, channels_last: true, cudnn_benchmark: true,"
        " autocast: bfloat16, fused_norm_act: true, checkpointing: all, fused_adam: true, foreach_ema: true,"
        " cuda_graphs: true}\nrun_variants: [baseline, channels_last, every]\n")
    args = ("--configfile", "tests/tiny.yaml", "every.yaml", "--")
    assert planned_jobs(workdir, *args, "results/cpu/every/quality.json") == {"train": 1, "sample": 1, "quality": 1}
    done = snakemake(workdir, "--cores", "2", *args, "results/cpu/every/quality.json")
    assert done.returncode == 0, done.stderr[-3000:]
    train = json.loads((workdir / "results/cpu/every/train.json").read_text())
    effective = train["provenance"]["switches_effective"]
    assert not any(effective[s] for s in ("cudnn_tf32", "matmul_tf32", "cudnn_benchmark", "cuda_graphs",
                                          "fused_norm_act"))
    assert all(effective[s] for s in ("autocast", "channels_last", "checkpointing", "fused_adam", "foreach_ema"))
    assert train["compile_seconds"] is None and train["bare_loop"]["step_time"]["n"] == 1
    assert train["parameters"] == json.loads((workdir / "results/cpu/baseline/train.json").read_text())["parameters"]
    sample = json.loads((workdir / "results/cpu/every/sample.json").read_text())
    assert sample["cuda_graph_captures"] == 0 and sample["compile_seconds"] is None
    numeric = json.loads((workdir / "results/cpu/every/quality.json").read_text())["numeric"]
    assert numeric["execution"]["fused_norm_act"] and numeric["execution"]["checkpointing"] == "all"
    for key in ("forward_relative_error", "gradient_relative_error", "sampling_forward_relative_error"):
        assert 1e-5 < numeric[key] < 5e-2, key  # bfloat16: about 1e-2 at most, never float32-exact
