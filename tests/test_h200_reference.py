"""The shipped H200 measurements, recorded by this workflow's own rules, read back through the extractors."""

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from profiling import ncu, tables, torchprof
from profiling.errors import ProfilingError

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
