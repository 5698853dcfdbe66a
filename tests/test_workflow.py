"""The workflow end to end in a temporary copy: the DAG runs, outputs are listed with their hashes, reruns (the run:
conftest.finished_run)."""

import json
import re
import subprocess
import zipfile

import nibabel as nib
import numpy as np
import pandas as pd
import pytest

from conftest import TINY, copy_run, file_sha256, job_messages, job_stats, snakemake
from reporting.manifest import read_manifest, read_sections
from reporting.registry import ARTICLE, OUTPUTS, registered_files, timing_bearing_files

pytestmark = pytest.mark.workflow



def test_outputs_are_listed_with_their_hashes(finished_run):
    manifest = read_manifest(finished_run / "paper/figures/all")
    expected = set(registered_files()) | {ARTICLE}
    assert "paper/tables/tab03_kernels_by_class.csv" in expected and "paper/figures/fig08_end_to_end.png" in expected
    assert set(manifest) == expected
    for name, digest in manifest.items():
        path = finished_run / name
        assert path.stat().st_size > 0 and file_sha256(path) == digest
    marked = read_sections(finished_run / "paper/figures/all")["timing"]
    assert set(marked) == timing_bearing_files() and "paper/figures/fig08_end_to_end.png" in marked
    check = subprocess.run(["sha256sum", "--check", "--quiet", "paper/figures/all"], cwd=finished_run)
    assert check.returncode == 0  # the manifest is sha256sum's format; the section comments are skipped


def test_the_logs_of_a_run_that_went_well_hold_no_traceback(finished_run):
    """A job that succeeded leaves no traceback in its log (nor a process it started: the comparison's workers write
    to its log), where a reader of the log would take it for the failure."""
    logs = [*finished_run.glob("results/**/logs/*.log"), *finished_run.glob("paper/logs/*.log")]
    assert len(logs) >= 40, len(logs)
    assert [log.relative_to(finished_run) for log in logs if "Traceback" in log.read_text(errors="replace")] == []


def test_measurements_and_profiles_of_every_variant(finished_run):
    train = json.loads((finished_run / "results/wholehead/cpu/channels_last/train.json").read_text())
    assert train["provenance"]["switches"]["channels_last"] is True
    assert train["step_time"]["n"] == 2 and train["step_time"]["median_ms"] > 0
    quality = json.loads((finished_run / "results/wholehead/cpu/baseline/quality.json").read_text())
    assert quality["numeric"]["forward_relative_error"] < 1e-4
    # channels_last's samples against baseline's, compared here voxel by voxel (PSNR over the data range 2).
    versus = json.loads((finished_run / "results/wholehead/cpu/channels_last/quality.json").read_text())["vs_baseline"]
    samples = sorted((finished_run / "results/wholehead/cpu/channels_last/samples").glob("*.nii.gz"))
    assert samples and len(versus["per_sample"]) == len(samples)
    for row, path in zip(versus["per_sample"], samples):
        ours = np.asarray(nib.load(path).get_fdata(), dtype=np.float32)
        theirs = np.asarray(nib.load(finished_run / "results/wholehead/cpu/baseline/samples" / row["reference"]).get_fdata(),
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
    """The tiny configuration's study: baseline and channels_last at seeds 0 and 1, 2 optimizer steps at 8^3."""
    import nibabel as nib
    import numpy as np

    study = finished_run / "results/wholehead/cpu/study"
    run = json.loads((study / "baseline/seed1/run.json").read_text())
    assert run["training"]["optimizer_steps"] == 2 and run["volume_shape"] == [8, 8, 8]
    assert run["numeric"]["forward_relative_error"] < 1e-4 and run["numeric"]["gradient_relative_error"] < 1e-4
    # The per-label distance of the first sample, recomputed from the files: W1 of equal-size samples is the mean
    # absolute difference of the sorted values.
    prepared = finished_run / "results/wholehead/dataset/study"
    sample = nib.load(study / "baseline/seed1/samples/sample_000.nii.gz").get_fdata()
    real = nib.load(prepared / "heldout/image_000.nii.gz").get_fdata()
    one_hot = np.asarray(nib.load(prepared / "heldout/mask_000.nii.gz").dataobj)
    labels = np.where(one_hot.any(-1), one_hot.argmax(-1) + 1, 0)
    row = run["vs_real"]["per_sample"][0]
    for label, value in row["wasserstein_by_label"].items():
        inside = labels == int(label)
        assert value == pytest.approx(np.mean(np.abs(np.sort(sample[inside]) - np.sort(real[inside]))), rel=1e-5)
    assert run["vs_real"]["ssim_mean"] < 0.3  # two steps: noise
    assert np.load(study / "baseline/seed1/slice.npy").shape == (2, 8, 8)
    same = json.loads((study / "baseline/seed0/comparison.json").read_text())["vs_baseline"]
    other = json.loads((study / "baseline/seed1/comparison.json").read_text())["vs_baseline"]
    assert same["identical"] and not other["identical"] and other["max_abs_diff"] > 0
    # The verdict says why it cannot judge, with the numbers and the threshold.
    claims = (finished_run / "paper/tables/tab05_claims.csv").read_text()
    quality = next(line for line in claims.splitlines() if line.startswith("synthesis quality") and ",cpu," in line)
    assert "not measurable here" in quality and "not brain-like" in quality
    assert "< 0.3 after 2 optimizer steps at 8x8x8" in quality
    runs = (finished_run / "paper/tables/tab06_quality_runs.csv").read_text()
    for variant in ("baseline", "channels_last"):  # every variant at every seed
        assert f"\ncpu,{variant},0," in runs and f"\ncpu,{variant},1," in runs
    table = pd.read_csv(finished_run / "paper/tables/tab06_quality.csv")
    assert {"baseline", "channels_last"} <= set(table[table["gpu"] == "cpu"]["variant"])
    # The study's own target prints the runs and the same verdict (and measures nothing again).
    printed = snakemake(finished_run, "--cores", "1", *TINY, "quality_study")
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert "# Quality study: cpu" in printed.stdout and "Quality claim: **not measurable here**" in printed.stdout


def test_a_variant_added_to_the_quality_study_trains_alone(finished_run):
    """A variant added to a finished study trains alone; no other run trains again, and the comparisons (one job for
    all runs, no training) and the summary are written again."""
    (finished_run / "more.yaml").write_text("quality_study:\n  variants: [baseline, channels_last, tf32]\n")
    messages = job_messages(finished_run, "--configfile", "tests/tiny.yaml", "more.yaml", "--", "quality_study")
    study = [m for m in messages if m.startswith("Quality study")]
    assert sorted(study) == ["Quality study on cpu: every run against the baseline's run of its seed",
                             "Quality study on cpu: summary and verdict",
                             "Quality study: training tf32 from seeds 0, 1 on cpu"]


def test_article_holds_every_registered_figure_and_table(finished_run):
    """paper/article.pdf from the tiny run: every output under its id with its caption, the abstract and the
    methods from what was measured, the claims' verdicts; no creation date."""
    import pypdfium2

    from reporting.article.compose import shows_table
    from reporting.prose import Inputs

    article = pypdfium2.PdfDocument(finished_run / "paper/article.pdf")

    def squeezed(text: str) -> str:  # line breaks fall anywhere; cells may break after an underscore; smart quotes
        return re.sub(r"[\s\u200b]+", "", text).translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\""))

    text = squeezed(" ".join(page.get_textpage().get_text_range() for page in article))
    for output in OUTPUTS:
        if not shows_table(output, Inputs(finished_run)):  # said in one sentence instead (tab08 without a reference)
            continue
        caption = (finished_run / output.caption).read_text().replace("``", "").replace("**", "")
        assert squeezed(f"{output.id}. " + " ".join(caption.split()[:6])) in text, output.id
    assert squeezed("Abstract. We rebuild the performance study") in text
    workload = pd.read_csv(finished_run / "paper/tables/tab02_workload.csv").set_index("setting")["value"]
    assert squeezed(f"{workload['parameters']} parameters") in text
    assert squeezed("Of the 7 claims of the paper's abstract") in text and squeezed("not measurable here") in text
    assert squeezed("reference_results (h200) does not list cpu, so no reference set of cpu is read") in text  # tab08
    metadata = article.get_metadata_dict()
    assert not metadata.get("CreationDate") and not metadata.get("ModDate")


def test_gpu_label_on_a_machine_without_it_fails_in_one_line(finished_run, tmp_path):
    workdir = tmp_path / "wf"
    copy_run(finished_run, workdir)
    run = snakemake(workdir, "--cores", "1", "--config", "gpus=[h200]", *TINY, "results/wholehead/h200/baseline/train.json")
    assert run.returncode != 0
    assert re.search(r"error: label 'h200' needs a CUDA GPU matching '.*H200.*', but no CUDA device is visible",
                     run.stderr)
    assert not (workdir / "results/wholehead/h200/baseline/train.json").exists()




def test_training_jobs_count_the_flops_that_the_bench_and_the_workload_table_show(finished_run):
    """Each training job records PyTorch's count at the volume it trained on, as executed under its variant's
    checkpointing; the bench divides by the step time and the workload table shows the baseline's (the counter
    itself is checked against the count from layer shapes in tests/test_flops.py)."""
    from medddpm.flops import unet_flops
    from config_settings import unet as configured_unet

    unet = configured_unet("tests/tiny.yaml")
    model = unet_flops(unet, (8, 8, 8), "none")
    bench = pd.read_parquet(finished_run / "results/wholehead/collected/bench.parquet")
    bench = bench[bench["gpu"] == "cpu"].set_index("variant")
    for variant in ("baseline", "channels_last"):
        train = json.loads((finished_run / f"results/wholehead/cpu/{variant}/train.json").read_text())
        assert train["flops"] == {"model": model, "executed": unet_flops(unet, (8, 8, 8), "attention")}
        assert bench.loc[variant, "train_model_tflops"] == pytest.approx(
            model["train_micro_batch"]["total"] / train["train_ms_per_sample"] / 1e9)
    executed = train["flops"]["executed"]["train_micro_batch"]["total"]
    assert executed > model["train_micro_batch"]["total"]  # the attention block's forward, recomputed
    workload = pd.read_csv(finished_run / "paper/tables/tab02_workload.csv").set_index("setting")["value"]
    assert workload["parameters"] == f"{train['parameters']:,}" == "1,773,281"
    assert workload["FLOPs per U-Net forward (sampling step)"] == f"{model['forward']['total'] / 1e12:.4g} TFLOP"
    assert workload["FLOPs per training micro-batch executed (attention recomputed in backward)"] == (
        f"{executed / 1e12:.4g} TFLOP")


def test_html_report_carries_every_output_with_its_caption(finished_run, tmp_path):
    report = tmp_path / "report.zip"
    done = snakemake(finished_run, "--report", str(report), *TINY, "paper/figures/all")
    assert done.returncode == 0, done.stderr[-2000:]
    names = "\n".join(zipfile.ZipFile(report).namelist())
    for output in OUTPUTS:
        assert f"{output.id}.png" in names if output.kind == "figure" else f"{output.id}.csv" in names


def test_bench_target_prints_the_table_of_every_variant(finished_run, tmp_path):
    workdir = tmp_path / "wf"
    copy_run(finished_run, workdir)
    done = snakemake(workdir, "--cores", "2", *TINY, "bench")
    assert done.returncode == 0, done.stderr[-3000:]
    # Nothing measured again: paper/figures/all measured the device's rates; the label's bench table from its runs.
    assert job_stats(done) == {"bench_table": 1, "bench": 1}
    assert "# Bench: cpu" in done.stdout and "| channels_last | fp32, channels-last |" in done.stdout
    rates = json.loads((workdir / "results/wholehead/cpu/device_rates.json").read_text())
    assert rates["device_kind"] == "cpu" and rates["bf16_matmul_tflops"] > 0
    assert rates["provenance"]["hardware_label"] == "cpu"
    table = (workdir / "results/wholehead/cpu/bench.csv").read_text().splitlines()
    assert len(table) == 3 and table[0].startswith("variant,switches,train_ms_per_sample,")


def test_a_variant_with_every_switch_runs_through_its_jobs(finished_run, tmp_path):
    """Every switch at once through training, sampling and the quality check (torch.compile left out: inductor's
    code generation takes minutes on a CPU; tests/test_compile.py traces it), each one marked effective or not."""
    workdir = tmp_path / "wf"
    copy_run(finished_run, workdir)
    (workdir / "every.yaml").write_text(
        "variants:\n  every: {cudnn_tf32: true, matmul_tf32: true, channels_last: true, cudnn_benchmark: true,"
        " autocast: bfloat16, fused_norm_act: true, checkpointing: all, fused_adam: true, foreach_ema: true,"
        " cuda_graphs: true}\nrun_variants: [baseline, channels_last, every]\n")
    args = ("--configfile", "tests/tiny.yaml", "every.yaml", "--")
    done = snakemake(workdir, "--cores", "2", *args, "results/wholehead/cpu/every/quality.json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert job_stats(done) == {"train": 1, "sample": 1, "quality": 1}  # the baseline is not measured again
    train = json.loads((workdir / "results/wholehead/cpu/every/train.json").read_text())
    effective = train["provenance"]["switches_effective"]
    assert not any(effective[s] for s in ("cudnn_tf32", "matmul_tf32", "cudnn_benchmark", "cuda_graphs",
                                          "fused_norm_act"))
    assert all(effective[s] for s in ("autocast", "channels_last", "checkpointing", "fused_adam", "foreach_ema"))
    assert train["compile_seconds"] is None and train["bare_loop"]["step_time"]["n"] == 1
    assert train["parameters"] == json.loads((workdir / "results/wholehead/cpu/baseline/train.json").read_text())["parameters"]
    sample = json.loads((workdir / "results/wholehead/cpu/every/sample.json").read_text())
    assert sample["cuda_graph_captures"] == 0 and sample["compile_seconds"] is None
    numeric = json.loads((workdir / "results/wholehead/cpu/every/quality.json").read_text())["numeric"]
    assert numeric["execution"]["fused_norm_act"] and numeric["execution"]["checkpointing"] == "all"
    for key in ("forward_relative_error", "gradient_relative_error", "sampling_forward_relative_error"):
        assert 1e-5 < numeric[key] < 5e-2, key  # bfloat16: about 1e-2 at most, never float32-exact


def test_the_sampler_axis_runs_through_the_timing_job_the_study_and_tab09(finished_run):
    """fast_sampling of tests/tiny.yaml: the baseline's sample_fast job times every sampler, every study run samples
    with every sampler from the same noise as its chain, and tab09 holds one row per sampler, step count and study
    variant, beside the chain's row."""
    timed = json.loads((finished_run / "results/wholehead/cpu/baseline/samplers.json").read_text())
    assert [(r["sampler"], r["steps"]) for r in timed["samplers"]] == [("ddpm", 4), ("deis_ipndm", 2), ("ddim", 2),
                                                                       ("dpm_solver_pp_2m", 3)]
    # Every fast sampler paired with the 4-step chain over tiny.yaml's rounds (config.yaml's chains: 6).
    assert all(r["vs_chain"]["rounds"] == 6 for r in timed["samplers"][1:])
    assert not (finished_run / "results/wholehead/cpu/channels_last/samplers.json").exists()  # variants: [baseline]
    for variant in ("baseline", "channels_last"):
        run = json.loads((finished_run / f"results/wholehead/cpu/study/{variant}/seed0/run.json").read_text())
        assert [(r["sampler"], r["steps"]) for r in run["samplers"]] == [("deis_ipndm", 2), ("ddim", 2),
                                                                         ("dpm_solver_pp_2m", 3)]
        for record in run["samplers"]:
            assert record["vs_real"]["wasserstein_mean"] >= 0 and record["seconds_per_volume"] > 0
    table = pd.read_csv(finished_run / "paper/tables/tab09_samplers.csv")
    table = table[table["gpu"] == "cpu"]  # the shipped H200 set's rows follow
    assert list(table["sampler"].unique()) == ["ddpm", "deis_ipndm", "ddim", "dpm_solver_pp_2m"]
    fast = table[table["sampler"] != "ddpm"]
    assert sorted(fast["study_variant"].unique()) == ["baseline", "channels_last"] and len(fast) == 6
    assert (fast["timed_variant"] == "baseline").all() and fast["seconds_per_volume"].gt(0).all()
    assert table.loc[table["sampler"] == "ddpm", "steps"].tolist() == [4]
    assert fast["chain_speedup"].gt(0).all() and fast["chain_speedup_rounds"].eq(6).all()
    assert set(fast["chain_speedup_verdict"]) <= {"faster", "slower", "within noise", "at the band's edge",
                                                  "not measurable under this load"}
