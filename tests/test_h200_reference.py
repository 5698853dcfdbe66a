"""The shipped H200 measurements, recorded by this workflow's own rules, read back through the extractors."""

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from profiling import ncu, tables, torchprof
from profiling.errors import ProfilingError
from profiling.settings import ncu_settings

H200 = Path(__file__).resolve().parents[1] / "data" / "reference" / "h200"
STEP = H200 / "tf32" / "profile" / "train"


@pytest.fixture(scope="module")
def trace_kernels(tmp_path_factory) -> pd.DataFrame:
    trace = tmp_path_factory.mktemp("trace") / "torch_trace.json"
    trace.write_bytes(gzip.decompress((STEP / "torch_trace.json.gz").read_bytes()))
    return tables.from_torch(torchprof.trace_rows(trace))


def test_training_step_trace_holds_backward_and_matches_the_shipped_tables(trace_kernels):
    assert (trace_kernels["device"] == "gpu").all()
    ncu.validate_kernels(trace_kernels)  # dgrad and wgrad kernels present: the whole step was captured
    shipped = pd.read_parquet(STEP / "torch_kernels.parquet")
    assert len(trace_kernels) == len(shipped) == 4068
    assert list(trace_kernels["kernel_class"]) == list(shipped["kernel_class"])
    summary = tables.summarise(trace_kernels).set_index("kernel_class")
    shipped_summary = pd.read_csv(STEP / "torch_summary.csv").set_index("kernel_class")
    pd.testing.assert_series_equal(summary["time_share"], shipped_summary["time_share"], check_exact=False)
    # The TF32 step is dominated by implicit-GEMM convolutions with layout conversions around them.
    conv = summary.loc[["conv_fprop", "conv_dgrad", "conv_wgrad"], "time_share"].sum()
    assert 0.4 < conv < 0.7
    assert summary.loc["all", "layout_conversion_share"] > 0.05
    assert set(trace_kernels.loc[trace_kernels["kernel_class"] == "conv_fprop", "precision"]) >= {"tf32"}


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


# --- Nsight Compute over whole steps: four variants' training steps, three variants' sampling steps -------------

VARIANTS = ["baseline", "tf32", "channels_last", "tf32_channels_last"]
SAMPLED = ["baseline", "tf32", "tf32_channels_last"]


def _raw(variant: str, phase: str) -> pd.DataFrame:
    path = H200 / variant / "profile" / phase / "ncu_raw.csv.gz"
    return ncu.parse_raw(gzip.decompress(path.read_bytes()).decode())


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


def test_shipped_tables_are_what_the_extractor_makes_of_the_raw_export(train_step):
    variant, raw, kernels = train_step
    step = H200 / variant / "profile" / "train"
    shipped = pd.read_parquet(step / "ncu_kernels.parquet")
    assert list(shipped["name"]) == list(kernels["name"])
    assert list(shipped["kernel_class"]) == list(kernels["kernel_class"])
    summary = tables.summarise(kernels).set_index("kernel_class")
    shipped_summary = pd.read_csv(step / "ncu_summary.csv").set_index("kernel_class")
    for column in ("time_share", "sm_cycles", "warp_instructions", "ipc", "tensor_pipe_pct"):
        pd.testing.assert_series_equal(summary[column], shipped_summary[column], check_exact=False)


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
    assert set(_config_metrics("sample")) <= set(raw.columns)
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
