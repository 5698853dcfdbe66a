"""The shipped H200 measurements, recorded by this workflow's own rules.

The derived tables (<tool>_kernels.parquet, <tool>_summary.csv) are checked against the raw exports read here with
plain pandas/json (same launches, same numbers, class shares that plain name matching gives) and against what is known
about the workload; and every shipped summary is derived again from its raw export with today's readers, kernel
classifier and summariser, so a change to any of them that would change a shipped number fails here.
"""

import gzip
import json
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from profiling import instructions, ncu, tables, torchprof
from profiling.errors import ProfilingError
from profiling.settings import ncu_settings

H200 = Path(__file__).resolve().parents[1] / "data" / "reference" / "wholehead" / "h200"
STEP = H200 / "tf32" / "profile" / "train"


@pytest.fixture(scope="module")
def trace_kernels(tmp_path_factory) -> pd.DataFrame:
    trace = tmp_path_factory.mktemp("trace") / "torch_trace.json"
    trace.write_bytes(gzip.decompress((STEP / "torch_trace.json.gz").read_bytes()))
    return tables.from_torch(torchprof.trace_rows(trace))


GROUPNORM = (
    "GroupNorm",
    "RowwiseMomentsCUDAKernel",
    "ComputeFusedParamsCUDAKernel",
    "ComputeBackwardFusedParamsCUDAKernel",
    "ComputeInternalGradientsCUDAKernel",
    "GammaBetaBackwardCUDAKernel",
)


def _groupnorm(names: pd.Series) -> pd.Series:
    return names.map(lambda name: any(token in name for token in GROUPNORM))


def _relayout(names: pd.Series) -> pd.Series:
    """cuDNN transposes, transforms and channel padding, and PyTorch's strided copies without cast."""
    cudnn = names.str.contains("nchwToNhwcKernel|nhwcToNchwKernel|tensorTransformGeneric|convertTensor_kernel|"
                               "nhwcAddPaddingKernel")
    strided = names.str.match(r"void at::(native::)?elementwise_kernel<")  # not the vectorised or unrolled kernels
    permute = strided & names.str.contains("gpu_kernel_impl_nocast<") & names.str.contains("direct_copy_kernel_cuda")
    return cudnn | permute


def _cast(names: pd.Series) -> pd.Series:
    return names.str.contains("LoadWithCast|bfloat16_copy_kernel_cuda")


def test_training_step_trace_holds_backward_and_the_shipped_tables_hold_its_launches(trace_kernels):
    assert (trace_kernels["device"] == "gpu").all()
    ncu.validate_kernels(trace_kernels)  # dgrad and wgrad kernels present: the whole step was captured
    events = json.loads(gzip.decompress((STEP / "torch_trace.json.gz").read_bytes()))["traceEvents"]
    launches = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"), key=lambda e: e["ts"])
    shipped = pd.read_parquet(STEP / "torch_kernels.parquet")
    assert len(launches) == len(shipped) == 4068
    assert list(shipped["name"]) == [e["name"] for e in launches]
    assert shipped["duration_ns"].to_numpy() == pytest.approx([e["dur"] * 1e3 for e in launches])
    summary = pd.read_csv(STEP / "torch_summary.csv").set_index("kernel_class")
    classes = summary.drop(index="all")
    assert classes["time_share"].sum() == pytest.approx(1.0)
    assert summary.loc["all", "time_ns"] == pytest.approx(shipped["duration_ns"].sum())
    # The TF32 step is dominated by implicit-GEMM convolutions with layout conversions around them, and GroupNorm
    # (forward and backward) takes a quarter of it.
    conv = summary.loc[["conv_fprop", "conv_dgrad", "conv_wgrad"], "time_share"].sum()
    assert 0.4 < conv < 0.7
    groupnorm = shipped.loc[_groupnorm(shipped["name"]), "duration_ns"].sum() / shipped["duration_ns"].sum()
    assert summary.loc["normalization", "time_share"] == pytest.approx(groupnorm) and 0.24 < groupnorm < 0.27
    relayout = shipped.loc[_relayout(shipped["name"]), "duration_ns"].sum()
    assert summary.loc["all", "layout_conversion_share"] == pytest.approx(relayout / shipped["duration_ns"].sum())
    assert summary.loc["all", "layout_conversion_share"] > 0.05
    assert summary.loc["all", "dtype_cast_share"] < 1e-4  # TF32 casts nothing but a timestep index
    assert summary.loc["other", "time_share"] < 0.03
    assert set(trace_kernels.loc[trace_kernels["kernel_class"] == "conv_fprop", "precision"]) >= {"tf32"}


def test_two_tools_on_one_training_step_give_the_same_class_shares():
    """torch.profiler and Nsight Compute timed the same TF32 step in separate runs (ncu with clocks left alone)."""
    by_torch = pd.read_csv(STEP / "torch_summary.csv").set_index("kernel_class")
    by_ncu = pd.read_csv(STEP / "ncu_summary.csv").set_index("kernel_class")
    assert list(by_torch.index) == list(by_ncu.index)
    assert (by_torch["kernels"] == by_ncu["kernels"]).all()  # same launches in each class
    assert by_torch["time_share"].to_numpy() == pytest.approx(by_ncu["time_share"].to_numpy(), abs=0.01)


@pytest.mark.parametrize(
    "name, kernel_class",
    [
        ("sm90_xmma_dgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize256x64x32_warpgroupsize1x1x1_g1"
         "_execute_segment_k_off_kernel__5x_cudnn", "conv_dgrad"),
        ("sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32"
         "_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn", "conv_wgrad"),
        ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_warpsize2x2x1"
         "_g1_tensor16x8x8_execute_kernel__5x_cudnn", "conv_fprop"),
    ],
)
def test_recorded_names_are_in_the_trace_with_their_class(trace_kernels, name, kernel_class):
    rows = trace_kernels[trace_kernels["name"] == name]
    assert len(rows) and set(rows["kernel_class"]) == {kernel_class}


def test_truncated_ncu_calibration_run_is_refused_as_a_training_step():
    raw = ncu.parse_raw(gzip.decompress((STEP / "ncu_raw_first300.csv.gz").read_bytes()).decode())
    assert len(raw) == 300
    kernels = tables.from_ncu(raw)
    assert kernels["sm_cycles"].gt(0).all() and kernels["warp_instructions"].gt(0).all()
    assert "tensor_gmma_instructions" in kernels  # Hopper's wgmma count, from the sm90 override
    with pytest.raises(ProfilingError, match="backward pass missing"):
        ncu.validate_kernels(kernels)  # launch_count 300 stops inside the first forward pass
    details = ncu.parse_details(gzip.decompress((STEP / "ncu_details_first300.csv.gz").read_bytes()).decode())
    assert details.empty  # the training step was profiled without rule sections: no rules ran


def test_shipped_runs_carry_their_provenance():
    for train in H200.glob("*/train.json"):
        provenance = json.loads(train.read_text())["provenance"]
        assert provenance["device_name"] == "NVIDIA H200" and provenance["hardware_label"] == "h200"
        assert provenance["variant"] == train.parent.name and not provenance["emulated_on_cpu"]


def test_the_bench_rows_come_from_one_gpu_in_one_sitting():
    """The ladder's ratios are read across its rows, so every row's train.json and sample.json and the device's
    rates are of one GPU (its UUID), one commit, within one hour (the bench of 2026-12-02). Another run of one rung
    on another host would change a ratio by the spread between hosts (1-2 %; the bare loops of the host-bound
    eager steps more), which this keeps out of the shipped bench."""
    from datetime import datetime, timedelta

    bench = pd.read_csv(H200 / "bench.csv")
    records = [json.loads((H200 / "device_rates.json").read_text())]
    records += [json.loads((H200 / variant / f"{phase}.json").read_text())
                for variant in bench["variant"] for phase in ("train", "sample")]
    assert len(records) == 1 + 2 * 13
    provenance = [record["provenance"] for record in records]
    assert {p["gpu_lease"]["gpu_uuid"] for p in provenance} == {"GPU-7c8ef24c-075b-5c2e-364e-1812928f28f3"}
    assert len({p["workflow_commit"] for p in provenance}) == 1
    when = sorted(datetime.fromisoformat(p["measured_at"]) for p in provenance)
    assert when[-1] - when[0] < timedelta(hours=1)


def test_the_shipped_bench_is_what_the_bench_job_makes_of_the_shipped_runs(tmp_path):
    """bench.csv and bench.md, byte for byte, from the rungs' train.json and sample.json, the device's rates and the
    paired comparison by the bench job's own code (the runs through reporting.results, reporting.bench): the shipped
    bench is its runs."""
    from reporting.bench_files import write_bench

    variants = list(pd.read_csv(H200 / "bench.csv")["variant"])
    write_bench("h200", [H200 / v / "train.json" for v in variants], [H200 / v / "sample.json" for v in variants],
                H200 / "device_rates.json", tmp_path / "bench.csv", tmp_path / "bench.md", [H200 / "comparison.json"])
    assert (tmp_path / "bench.csv").read_bytes() == (H200 / "bench.csv").read_bytes()
    assert (tmp_path / "bench.md").read_text() == (H200 / "bench.md").read_text()


# --- Nsight Compute over whole steps: four variants' training steps, three variants' sampling steps -------------

VARIANTS = ["baseline", "tf32", "channels_last", "tf32_channels_last"]
SAMPLED = ["baseline", "tf32", "channels_last", "tf32_channels_last"]
# The sampling steps recorded (again) with the instruction-mix set (tensor-op counters, every SASS family), which holds
# every metric of config.yaml's sampling set (paper_figures); channels_last's sampling step has the older, smaller set.
MIX_SET = ["baseline", "tf32", "tf32_channels_last"]


@cache
def _raw(variant: str, phase: str) -> pd.DataFrame:
    path = H200 / variant / "profile" / phase / "ncu_raw.csv.gz"
    return ncu.parse_raw(gzip.decompress(path.read_bytes()).decode())


@cache
def _plain(variant: str, phase: str) -> pd.DataFrame:
    """The raw page as plain pandas reads it (units row skipped, thousands separators removed), in ID order."""
    path = H200 / variant / "profile" / phase / "ncu_raw.csv.gz"
    units = pd.read_csv(path, nrows=1).iloc[0]
    assert units["gpu__time_duration.sum"] == "ns" and units["sm__cycles_elapsed.max"] == "cycle"
    raw = pd.read_csv(path, skiprows=[1], thousands=",", low_memory=False)
    return raw.sort_values("ID").reset_index(drop=True)


REPO = Path(__file__).resolve().parents[1]
NCU_CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())["profiling"]["ncu"]
METRIC_SETS = yaml.safe_load((REPO / NCU_CONFIG["metric_sets"]).read_text())


def _config_metrics(phase: str) -> list[str]:
    return ncu_settings(NCU_CONFIG, "sm90", phase, METRIC_SETS)["metrics"]


@pytest.fixture(scope="module", params=VARIANTS)
def train_step(request) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    raw = _raw(request.param, "train")
    return request.param, raw, tables.from_ncu(raw)


def test_whole_training_step_in_one_replay_pass_with_the_configured_metrics(train_step):
    variant, raw, kernels = train_step
    ncu.validate_kernels(kernels)  # forward, dgrad and wgrad of both micro-batches
    assert (raw["profiler__replayer_passes"] == 1).all()
    assert set(_config_metrics("train")) <= set(raw.columns)  # config.yaml reproduces what was measured
    gmma_stall = "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio"  # the sample phase's only
    assert gmma_stall not in raw.columns and gmma_stall not in _config_metrics("train")
    assert gmma_stall in _config_metrics("sample")
    assert kernels["sm_cycles"].gt(0).all() and kernels["warp_instructions"].gt(0).all()
    assert (kernels["kernel_class"] == "optimizer").sum() > 0  # Adam and the EMA update are inside the step


STEPS = [(variant, "train") for variant in VARIANTS] + [(variant, "sample") for variant in SAMPLED]
HMMA_PCT = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"


@pytest.mark.parametrize(("variant", "phase"), STEPS, ids=[f"{v}-{p}" for v, p in STEPS])
def test_shipped_ncu_tables_hold_the_raw_numbers_and_the_plain_name_shares(variant, phase):
    raw = _plain(variant, phase)
    step = H200 / variant / "profile" / phase
    shipped = pd.read_parquet(step / "ncu_kernels.parquet")
    summary = pd.read_csv(step / "ncu_summary.csv", keep_default_na=False, na_values=[""]).set_index("kernel_class")
    # Launch for launch: names in profiling order, durations in ns, cycles and instructions unchanged.
    assert list(shipped["name"]) == list(raw["Kernel Name"])
    for column, metric in [("duration_ns", "gpu__time_duration.sum"), ("sm_cycles", "sm__cycles_elapsed.max"),
                           ("warp_instructions", "smsp__inst_executed.sum"), ("tensor_pipe_pct", HMMA_PCT)]:
        assert shipped[column].to_numpy() == pytest.approx(raw[metric].to_numpy()), column
    # ncu's other roll-ups of requested counters are not in the table.
    assert not {"gpu_time_duration_avg", "sm_cycles_elapsed_sum", "smsp_inst_executed_max"} & set(shipped.columns)
    # The summary adds up to the step.
    total = raw["gpu__time_duration.sum"].sum()
    assert summary.loc["all", "time_ns"] == total and summary.loc["all", "kernels"] == len(raw)
    assert summary.drop(index="all")["time_share"].sum() == pytest.approx(1.0)
    # Class shares that plain name matching gives.
    names, duration = raw["Kernel Name"], raw["gpu__time_duration.sum"]
    assert summary.loc["normalization", "time_share"] == pytest.approx(duration[_groupnorm(names)].sum() / total)
    assert summary.loc["all", "layout_conversion_share"] == pytest.approx(duration[_relayout(names)].sum() / total)
    assert summary.loc["all", "dtype_cast_share"] == pytest.approx(duration[_cast(names)].sum() / total)
    assert summary.loc["other", "time_share"] < 0.04  # what no class claims is small after GroupNorm's backward
    assert summary.loc["all", "tensor_pipe_pct"] == pytest.approx(np.average(raw[HMMA_PCT], weights=duration))
    assert set(summary["tensor_pipe_metric"]) == {HMMA_PCT}
    # FP32 instruction counters only in the sampling steps, tensor-op counters only in those recorded with the
    # instruction-mix set.
    assert summary["tensor_flop"].notna().all() == (phase == "sample" and variant in MIX_SET)
    assert summary["tensor_flop"].isna().all() == (phase == "train" or variant not in MIX_SET)
    assert summary["fp32_flop"].notna().all() == (phase == "sample")


def test_fp32_flop_of_the_sampling_steps():
    summaries = {v: pd.read_csv(H200 / v / "profile" / "sample" / "ncu_summary.csv").set_index("kernel_class")
                 for v in SAMPLED}
    baseline = summaries["baseline"]
    flop, seconds = baseline.loc["all", "fp32_flop"], baseline.loc["all", "time_ns"] * 1e-9
    raw = _plain("baseline", "sample")
    expected = (2 * raw["smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"]
                + raw["smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"]
                + raw["smsp__sass_thread_inst_executed_op_fmul_pred_on.sum"]).sum()
    assert flop == pytest.approx(expected)
    # The fp32 U-Net evaluation is FFMA convolutions, below the H200's FP32 peak (67 TFLOP/s) but not far from it.
    assert baseline.loc["conv_fprop", "fp32_flop"] > 0.95 * flop
    assert 20e12 < flop / seconds < 67e12
    # TF32 moves the convolution arithmetic onto the tensor cores: FFMA work almost disappears.
    for variant in ("tf32", "tf32_channels_last"):
        assert summaries[variant].loc["all", "fp32_flop"] < flop / 50


@pytest.mark.parametrize("variant", MIX_SET)
def test_instruction_mix_of_the_sampling_steps_with_the_mix_set(variant):
    """With every family and the tensor-op counters collected, the whole step is split and tensor math is told apart:
    only the TF32 variants have any."""
    shipped = pd.read_parquet(H200 / variant / "profile" / "sample" / "ncu_kernels.parquet")
    raw = _plain(variant, "sample")
    mix = instructions.mix_by_class(shipped).set_index("kernel_class").loc["all"]
    thread = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
    assert mix["mix_fp32_arith"] == sum(raw[thread.format(op)].sum() for op in ("ffma", "fadd", "fmul"))
    assert mix["mix_not_split"] == 0
    assert (mix["mix_tensor"] > 0) == variant.startswith("tf32")


@pytest.mark.parametrize("variant", [v for v in SAMPLED if v not in MIX_SET])
def test_instruction_mix_of_the_sampling_steps_with_the_older_counters(variant):
    """At 128^3 only FP32/FP16 thread counters and HMMA/GMMA counts were collected: the rest is not split."""
    shipped = pd.read_parquet(H200 / variant / "profile" / "sample" / "ncu_kernels.parquet")
    raw = _plain(variant, "sample")
    mix = instructions.mix_by_class(shipped).set_index("kernel_class").loc["all"]
    thread = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
    assert mix["mix_total"] == raw["smsp__thread_inst_executed.sum"].sum()
    assert mix["mix_fp32_arith"] == sum(raw[thread.format(op)].sum() for op in ("ffma", "fadd", "fmul"))
    assert mix["mix_fp16_bf16"] == raw[thread.format("hfma")].sum()
    assert mix["mix_tensor"] == 0  # tensor math is not told from HFMA2.MMA moves without the tensor-op counters
    assert mix["mix_not_split"] == mix["mix_total"] - mix["mix_fp32_arith"] - mix["mix_fp16_bf16"]
    assert mix["mix_not_split"] > 0


def test_tf32_moves_convolutions_onto_tensor_cores():
    summaries = {v: pd.read_csv(H200 / v / "profile" / "train" / "ncu_summary.csv").set_index("kernel_class")
                 for v in VARIANTS}
    for fp32, tf32 in (("baseline", "tf32"), ("channels_last", "tf32_channels_last")):
        a, b = summaries[fp32].loc["all"], summaries[tf32].loc["all"]
        assert b["sm_cycles"] < a["sm_cycles"] / 3 and b["warp_instructions"] < a["warp_instructions"] / 5
        assert b["tensor_pipe_pct"] > 10 * a["tensor_pipe_pct"]
    for variant in VARIANTS:
        convs = pd.read_parquet(H200 / variant / "profile" / "train" / "ncu_kernels.parquet")
        convs = convs[convs["kernel_class"].str.startswith("conv_")]
        wgmma = convs["tensor_gmma_instructions"].sum()  # Hopper's warpgroup MMA: TF32 convolutions only
        assert (wgmma > 0) == variant.startswith("tf32"), variant


@pytest.mark.parametrize("variant", SAMPLED)
def test_sampling_step_with_the_full_set_and_rule_results(variant):
    raw = _raw(variant, "sample")
    assert (set(_config_metrics("sample")) <= set(raw.columns)) == (variant in MIX_SET)
    assert raw["profiler__replayer_passes"].nunique() == 1 and raw["profiler__replayer_passes"].iloc[0] > 1
    step = H200 / variant / "profile" / "sample"
    details = ncu.parse_details(gzip.decompress((step / "ncu_details.csv.gz").read_bytes()).decode())
    assert {"SpeedOfLight", "Occupancy", "WarpStateStats"} <= set(details["section"])
    assert details["estimated_speedup_pct"].dropna().ge(0).all()  # local (per-kernel) estimates exceed 100 %
    assert details["estimated_speedup_pct"].notna().sum() > 100
    shipped = pd.read_csv(step / "ncu_rules.csv.gz")
    assert len(shipped) == len(details)
    assert list(shipped["rule"]) == list(details["rule"])
    kernels = tables.from_ncu(raw)
    stalls = [c for c in kernels if c.startswith("stall_")]
    assert "stall_gmma" in stalls and len(stalls) == 19


# --- every shipped summary derived again from its raw export with today's code ------------------------------------

SUMMARIES = sorted(H200.glob("*/profile/*/*_summary.csv"))


def _kernels_today(step: Path, tool: str) -> pd.DataFrame:
    """The raw export of a profiled step through today's reader and classifier (as extract_profile.py runs them)."""
    if tool == "ncu":
        variant, phase = step.parts[-3], step.parts[-1]
        return tables.from_ncu(_raw(variant, phase))
    return _torch_kernels(step)


@cache
def _torch_kernels(step: Path) -> pd.DataFrame:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "torch_trace.json"
        trace.write_bytes(gzip.decompress((step / "torch_trace.json.gz").read_bytes()))
        return tables.from_torch(torchprof.trace_rows(trace))


def _same_columns(shipped: pd.DataFrame, today: pd.DataFrame, where: str) -> None:
    assert list(today.columns) == list(shipped.columns), where
    for column in shipped.columns:
        old, new = shipped[column], today[column]
        if old.dtype.kind in "fiub" and new.dtype.kind in "fiub":
            assert new.to_numpy(float) == pytest.approx(old.to_numpy(float), rel=1e-9, abs=1e-12, nan_ok=True), \
                (where, column)
        else:
            assert list(new.fillna("").astype(str)) == list(old.astype(object).fillna("").astype(str)), (where, column)


def test_there_is_a_raw_export_behind_every_shipped_summary():
    assert len(SUMMARIES) == 23
    for summary in SUMMARIES:
        raw = "ncu_raw.csv.gz" if summary.name.startswith("ncu") else "torch_trace.json.gz"
        assert (summary.parent / raw).is_file(), summary


@pytest.mark.parametrize("summary", SUMMARIES, ids=[str(p.relative_to(H200).parent) + "-" + p.name.split("_")[0]
                                                    for p in SUMMARIES])
def test_shipped_summaries_are_what_todays_code_derives_from_the_raw_exports(summary):
    """Readers (ncu.parse_raw, torchprof.trace_rows), the kernel classifier (tables.from_*) and the summariser
    (tables.summarise) of today, on the shipped raw export: the shipped summary, column for column, and the shipped
    kernel table's classes and precisions launch for launch."""
    tool, step = summary.name.split("_")[0], summary.parent
    kernels = _kernels_today(step, tool)
    # A summary shipped before profiles recorded their step's conditions has none of those columns (NaN: unrecorded).
    shipped_summary = tables.load_frame(summary).reindex(columns=tables.SUMMARY_COLUMNS)
    _same_columns(shipped_summary, tables.summarise(kernels), str(summary.relative_to(H200)))
    shipped = pd.read_parquet(step / f"{tool}_kernels.parquet")
    for column in ("name", "kernel_class", "precision", "duration_ns"):
        _same_columns(shipped[[column]].reset_index(drop=True), kernels[[column]].reset_index(drop=True),
                      f"{step.relative_to(H200)} {tool}_kernels.parquet")


@pytest.mark.parametrize("folder", sorted(H200.parents[1].glob("*/*")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_set_carries_a_manifest_that_sha256sum_accepts(folder):
    """Every file of a shipped set is listed with its sha256 (checked by sha256sum itself, not by the workflow's
    reader), so a file cut at a row boundary or a value edited by hand is refused when the set is read."""
    import subprocess

    listed = {line.split("  ", 1)[1] for line in (folder / "manifest.sha256").read_text().splitlines()}
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert listed == files - {"manifest.sha256"}
    check = subprocess.run(["sha256sum", "--check", "--strict", "--quiet", "manifest.sha256"], cwd=folder,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
