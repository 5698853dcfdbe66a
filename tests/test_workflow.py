"""The workflow end to end in a temporary copy: the DAG runs, outputs are listed with their hashes, reruns (the run:
conftest.finished_run)."""

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import zipfile

import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from conftest import TINY, snakemake
from reporting import render
from reporting.manifest import read_manifest, read_sections
from reporting.registry import ARTICLE, BY_ID, OUTPUTS, timing_bearing_files
from reporting.results import SHIPPED_NAMES, collect, file_keys

pytestmark = pytest.mark.workflow


def file_sha256(path) -> str:
    """Digest computed here with hashlib, not with the workflow's own manifest code."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


RENDERING = {output.id for output in OUTPUTS} | {"collect_results", "article", "manifest"}


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
    expected = {path for output in OUTPUTS for path in output.files_out().values()} | {ARTICLE}
    assert "paper/tables/tab03_kernels_by_class.csv" in expected and "paper/figures/fig08_end_to_end.png" in expected
    assert set(manifest) == expected
    for name, digest in manifest.items():
        path = finished_run / name
        assert path.stat().st_size > 0 and file_sha256(path) == digest
    marked = read_sections(finished_run / "paper/figures/all")["timing"]
    assert set(marked) == timing_bearing_files() and "paper/figures/fig08_end_to_end.png" in marked
    check = subprocess.run(["sha256sum", "--check", "--quiet", "paper/figures/all"], cwd=finished_run)
    assert check.returncode == 0  # the manifest is sha256sum's format; the section comments are skipped


def test_measurements_and_profiles_of_every_variant(finished_run):
    train = json.loads((finished_run / "results/cpu/channels_last/train.json").read_text())
    assert train["provenance"]["switches"]["channels_last"] is True
    assert train["step_time"]["n"] == 2 and train["step_time"]["median_ms"] > 0
    quality = json.loads((finished_run / "results/cpu/baseline/quality.json").read_text())
    assert quality["numeric"]["forward_relative_error"] < 1e-4
    # channels_last's samples against baseline's, compared here voxel by voxel (PSNR over the data range 2).
    versus = json.loads((finished_run / "results/cpu/channels_last/quality.json").read_text())["vs_baseline"]
    samples = sorted((finished_run / "results/cpu/channels_last/samples").glob("*.nii.gz"))
    assert samples and len(versus["per_sample"]) == len(samples)
    for row, path in zip(versus["per_sample"], samples):
        ours = np.asarray(nib.load(path).get_fdata(), dtype=np.float32)
        theirs = np.asarray(nib.load(finished_run / "results/cpu/baseline/samples" / row["reference"]).get_fdata(),
                            dtype=np.float32)
        assert row["sample"] == path.name and row["identical"] == bool(np.array_equal(ours, theirs))
        if not row["identical"]:
            mse = float(np.mean((ours.astype(np.float64) - theirs) ** 2))
            assert row["psnr_db"] == pytest.approx(10 * np.log10(4 / mse), rel=1e-3)
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


def test_a_variant_added_to_the_quality_study_runs_alone_and_is_compared_alone(finished_run):
    """Each run is compared in a job of its own: a variant added to a finished study trains and is compared, the
    summary is written again, and no other run or comparison is repeated."""
    (finished_run / "more.yaml").write_text("quality_study:\n  variants: [baseline, channels_last, tf32]\n")
    messages = job_messages(finished_run, "--configfile", "tests/tiny.yaml", "more.yaml", "--", "quality_study")
    study = [m for m in messages if m.startswith("Quality study")]
    assert sorted(study) == ["Quality study on cpu: summary and verdict",
                             "Quality study on cpu: tf32 (seed 0) against the baseline's samples and loss curve",
                             "Quality study: training tf32 (seed 0) on cpu"]


def test_article_holds_every_registered_figure_and_table(finished_run):
    """paper/article.pdf from the tiny run: every output under its id with its caption, the abstract and the
    methods from what was measured, the claims' verdicts; no creation date."""
    import pypdfium2

    article = pypdfium2.PdfDocument(finished_run / "paper/article.pdf")

    def squeezed(text: str) -> str:  # line breaks fall anywhere; cells may break after an underscore; smart quotes
        return re.sub(r"[\s\u200b]+", "", text).translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\""))

    text = squeezed(" ".join(page.get_textpage().get_text_range() for page in article))
    for output in OUTPUTS:
        caption = (finished_run / output.caption).read_text().replace("``", "").replace("**", "")
        assert squeezed(f"{output.id}. " + " ".join(caption.split()[:6])) in text, output.id
    assert squeezed("Abstract. This article is rebuilt") in text
    workload = pd.read_csv(finished_run / "paper/tables/tab02_workload.csv").set_index("setting")["value"]
    assert squeezed(f"a U-Net with {workload['parameters']} parameters") in text
    assert squeezed("Against the 7 claims") in text and squeezed("not measurable here") in text
    assert squeezed("no shipped reference set of cpu is listed in reference_results") in text  # tab08's one row
    metadata = article.get_metadata_dict()
    assert not metadata.get("CreationDate") and not metadata.get("ModDate")


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


@pytest.fixture(scope="module")
def exported(finished_run):
    """The tiny run's results shared with the one export target: data/reference/cpu/."""
    done = snakemake(finished_run, "--cores", "1", *TINY, "export")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 of 2 steps" in done.stderr, done.stderr[-2000:]  # the export alone: nothing measured again
    return finished_run / "data/reference/cpu"


def test_export_writes_a_small_reference_set_that_exports_to_the_same_bytes(finished_run, exported):
    listed = read_manifest(exported / "manifest.sha256")
    files = {p.relative_to(exported).as_posix() for p in exported.rglob("*") if p.is_file()}
    assert set(listed) == files - {"manifest.sha256"}
    assert all(file_sha256(exported / name) == digest for name, digest in listed.items())
    assert {"baseline/profile/train/torch_trace.json.gz", "config.yaml", "bench.csv", "channels_last/sample_steps.csv",
            "study/baseline/seed1/run.json", "study/baseline/seed1/comparison.json",
            "study/channels_last/seed0/losses.csv", "study/channels_last/seed0/slice.npy"} <= files
    assert not any(name.endswith((".pt", ".nii.gz", "-rep", "trace.json", ".log")) for name in files)
    trace = (exported / "baseline/profile/train/torch_trace.json.gz").read_bytes()
    assert trace[3] == 0 and trace[4:8] == b"\0\0\0\0"  # gzip -n: no file name, no time
    readme = (exported / "README.md").read_text()
    assert "| torch | 2." in readme and "snakemake --cores 1 --configfile tests/tiny.yaml -- export" in readme
    assert "| baseline |" in readme and "measured | 20" in readme
    before = {name: file_sha256(exported / name) for name in files}
    (exported / "manifest.sha256").unlink()  # the same command again writes the same set
    again = snakemake(finished_run, "--cores", "1", *TINY, "export")
    assert again.returncode == 0, again.stderr[-2000:]
    assert {name: file_sha256(exported / name) for name in files} == before


def test_export_then_import_round_trips(finished_run, exported):
    """Read back as a shipped set, the export gives the tables of the original results (only the origin tag
    differs), hence the same figures and tables."""
    measured = [p for p in (finished_run / "results/cpu").rglob("*") if p.is_file() and file_keys(p)["kind"]]
    original = collect(measured, [], ["cpu"])
    imported = collect([], [p for p in exported.rglob("*") if p.name.endswith(SHIPPED_NAMES)], [])
    for name, frame in original.items():
        pd.testing.assert_frame_equal(frame.drop(columns="origin", errors="ignore"),
                                      imported[name].drop(columns="origin", errors="ignore"), obj=name)
    assert len(original["slices"]) == 2 * 3 and len(original["kernels"]) > 0 and len(original["bench"]) == 2
    assert len(original["study"]) == 3  # the quality study's runs: baseline at two seeds, channels_last
    # The same drawings from both: the runs, the quality study (slices, losses, verdict) and the kernel table.
    for output_id in ("fig08_end_to_end", "fig09_quality", "tab03_kernels"):
        files = {name: finished_run / path for name, path in BY_ID[output_id].files.items()}  # fig09: the claims
        made = [render.build(output_id, {**bundle(tables, finished_run / side), **files})
                for side, tables in (("original", original), ("imported", imported))]
        if BY_ID[output_id].kind == "figure":
            assert figure_bytes(made[0]) == figure_bytes(made[1]), output_id
        else:
            pd.testing.assert_frame_equal(made[0].frame, made[1].frame)


def test_a_shared_reference_set_joins_the_comparison_by_listing_it(finished_run, exported, tmp_path):
    """Import: a set in data/reference/<label>/ and `reference_results` naming it; nothing is measured. Here the
    tiny run's own export stands for another machine's twice: as the a100 set, drawn beside the cpu runs, and as
    the cpu set, the reference that the cpu runs measured here are checked against (tab08: all within)."""
    merged = tmp_path / "merged"
    shutil.copytree(finished_run, merged, symlinks=True)
    shutil.copytree(exported, merged / "data/reference/a100")
    (merged / "imported.yaml").write_text("reference_results: [h200, a100, cpu]\n")
    args = ("--configfile", "tests/tiny.yaml", "imported.yaml", "--")
    planned = planned_jobs(merged, *args, "paper/figures/all")
    assert planned.get("collect_results") == 1 and set(planned) <= RENDERING, planned
    done = snakemake(merged, "--cores", "2", *args, "paper/tables/tab04_optimization.csv",
                     "paper/tables/tab08_conformance.csv")
    assert done.returncode == 0, done.stderr[-3000:]
    optimization = pd.read_csv(merged / "paper/tables/tab04_optimization.csv").set_index(["gpu", "variant"])
    assert list(optimization.loc["a100", "origin"]) == ["shipped reference"] * 2
    assert optimization.loc[("a100", "baseline"), "train_ms_per_sample"] == \
        optimization.loc[("cpu", "baseline"), "train_ms_per_sample"]
    conformance = pd.read_csv(merged / "paper/tables/tab08_conformance.csv")
    assert set(conformance["gpu"]) == {"cpu"} and set(conformance["verdict"]) == {"within"}, conformance
    assert len(conformance) == 2 * 5  # three end-to-end metrics and two profiled steps' shares per variant


def test_result_trees_of_two_machines_merge_by_copying(finished_run, tmp_path):
    """The README's path for whole trees (checkpoints, volumes, raw reports): another machine's results/<gpu>/ tree
    (the tiny run's own, under the a100 label) next to ours, the dataset dated back: a dry run plans only tables,
    figures and the bench table, nothing measured again."""
    merged = tmp_path / "merged"
    shutil.copytree(finished_run, merged, symlinks=True)
    shutil.copytree(merged / "results" / "cpu", merged / "results" / "a100")  # keeps times, like rsync -a
    for path in [merged / "results" / "dataset", *(merged / "results" / "dataset").rglob("*")]:
        os.utime(path, (946684800, 946684800), follow_symlinks=False)  # 2000-01-01, as the README says
    (merged / "merged.yaml").write_text("gpus: [cpu, a100]\n")
    args = ("--configfile", "tests/tiny.yaml", "merged.yaml", "--rerun-triggers", "params", "input", "--")
    planned = planned_jobs(merged, *args, "paper/figures/all")
    assert planned.get("collect_results") == 1 and set(planned) <= RENDERING | {"bench_table"}, planned


def bundle(tables: dict, folder) -> dict:
    """The collected tables as the rules write them, with one origin (the only tag that differs)."""
    folder.mkdir(exist_ok=True)
    paths = {}
    for name, frame in tables.items():
        paths[name] = folder / f"{name}.parquet"
        (frame.assign(origin="either") if "origin" in frame else frame).to_parquet(paths[name], index=False)
    return paths


def figure_bytes(fig) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", metadata={"Software": None})
    return out.getvalue()


def test_paper_configuration_plans_the_full_matrix(workflow_copy):
    jobs = planned_jobs(workflow_copy, "paper/figures/all", "--configfile", "config/paper.yaml")
    assert jobs["train"] == jobs["sample"] == jobs["quality"] == 5  # five variants on the h200 label
    # The quality study: six variants and the baseline's second seed, one dataset, one comparison per run.
    assert jobs["study_run"] == jobs["study_compare"] == 7 and jobs["study_dataset"] == 1
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
    assert planned_jobs(workdir, *TINY, "paper/figures/all") == {"fig01_runtime_breakdown": 1, "article": 1,
                                                                  "manifest": 1}
    done = snakemake(workdir, "--cores", "1", *TINY, "paper/figures/all")
    assert done.returncode == 0, done.stderr[-2000:]
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
