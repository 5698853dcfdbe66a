"""Tests of workflow/scripts/profiling: kernel classes, ncu/nsys/torch.profiler readers, the tidy table, diagnoses.

Parser tests run over every sample in tests/fixtures/profiling (see its README), so real exports dropped there are
tested too; value checks pin the hand-made samples and the H200 recordings by name.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from torch.autograd import DeviceType

from profiling import instructions, kernels, ncu, nsys, tables, torchprof
from profiling.errors import ProfilingError

FIXTURES = Path(__file__).parent / "fixtures" / "profiling"
# The real exports kept gzipped in subfolders (h200_small/<variant>/<phase>/, h200_set_full/) are tested alike.
NCU_RAW = sorted(FIXTURES.glob("ncu_raw*.csv")) + sorted(FIXTURES.glob("**/ncu_raw*.csv.gz"))
NCU_DETAILS = sorted(FIXTURES.glob("ncu_details*.csv")) + sorted(FIXTURES.glob("**/ncu_details*.csv.gz"))
NSYS_KERN_SUM = sorted(FIXTURES.glob("nsys_*kern*sum*.csv"))
TORCH_TRACES = sorted(FIXTURES.glob("torch_trace*.json"))
HANDMADE_RAW = FIXTURES / "ncu_raw_handmade_scaled_units.csv"
H200_RAW = FIXTURES / "ncu_raw_h200_tiny_train_step.csv"
H200_PUSHPOP = FIXTURES / "ncu_raw_h200_tiny_train_step_pushpop.csv"
H200_TRACE = FIXTURES / "torch_trace_h200_tiny_train_step.json"


def plain_id(text: str) -> str:
    """A test id without "::", brackets or spaces, so that the test can be addressed by its node id."""
    return re.sub(r"\W+", "_", text).strip("_")[:48]


def by_name(paths: list[Path]) -> dict:
    """parametrize arguments over fixture files, each test named after its file (its path in the fixture folder)."""
    return {"argvalues": paths, "ids": [p.relative_to(FIXTURES).as_posix() for p in paths]}


def page_text(path: Path) -> str:
    """The text of an export, gzipped (.gz) or not."""
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode()


@cache
def plain_page(path: Path) -> pd.DataFrame:
    """An ncu raw page as plain pandas reads it: header row, units row skipped, thousands separators removed."""
    return pd.read_csv(path, skiprows=[1], thousands=",", low_memory=False).sort_values("ID").reset_index(drop=True)


@cache
def parsed_page(path: Path) -> pd.DataFrame:
    """ncu.parse_raw of a raw page, once per test run (a test that changes it changes a copy)."""
    return ncu.parse_raw(page_text(path))


@cache
def tidy_page(path: Path) -> pd.DataFrame:
    return tables.from_ncu(parsed_page(path))


# --- kernel classes ---------------------------------------------------------------------------------------------

H200_NAMES = {
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
    "tensor16x8x8_alignc4_execute_kernel__5x_cudnn": ("conv_fprop", "tf32"),
    "sm90_xmma_dgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x32_warpgroupsize1x1x1_"
    "execute_segment_k_off_kernel__5x_cudnn": ("conv_dgrad", "tf32"),
    "sm80_xmma_wgrad_implicit_gemm_indexed_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3_warpsize1x2x1_g1_"
    "ffma_aligna4_alignc4_execute_kernel__5x_cudnn": ("conv_wgrad", "fp32"),
    "void cudnn::ops::nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>"
    "(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)": ("layout_conversion", "unknown"),
    "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>(long, float, float const*, float*, "
    "float*)": ("normalization", "unknown"),
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<2>, at::native::LerpFunctor<float>, float>(at::native::(anonymous namespace)::"
    "TensorListMetadata<2>, at::native::LerpFunctor<float>, float)": ("optimizer", "unknown"),
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
    "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)": ("elementwise", "unknown"),
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
    "float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
    "float>, unsigned int, float, 4, 4>)": ("reduction", "unknown"),
    "nvjet_tst_128x64_64x8_2x1_v_bz_coopB_TNT": ("gemm", "unknown"),
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}>(at::TensorIteratorBase&)::{lambda(int)#1}>"
    "(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(int)#1})": (
        "layout_conversion",
        "unknown",
    ),
    "void at::native::(anonymous namespace)::upsample_trilinear3d_out_frame<float, float>(int, float, float, "
    "float, bool)": ("other", "unknown"),
    "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8": ("gemm", "bf16"),
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn": ("gemm", "unknown"),
    "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32": ("conv_fprop", "f16"),
    # cuDNN's transpose that also casts (bf16 in, float out) is a transpose; CUDA's lower-case type name is bf16.
    "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, float, float, false, true, "
    "(cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, float*)": (
        "layout_conversion",
        "bf16",
    ),
    "void at::vectorized_elementwise_kernel<8, at::bfloat16_copy_kernel_cuda(at::TensorIteratorBase &)::"
    "[lambda(float) (instance 1)], std::array<char *, 2>>(int, T2, T3)": ("dtype_cast", "bf16"),
    "void at::<unnamed>::ComputeInternalGradientsCUDAKernel<float>(long, const T1 *, const T1 *, "
    "at::AccumulateType<T1, 1>::type *, at::AccumulateType<T1, 1>::type *)": ("normalization", "unknown"),
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, 0, float, float, float, 1, 0, 0, 0>"
    "(cublasLt::cublasSplitKParams<T6>, const T4 *, const T10 *, T9 *, T5 *)": ("gemm", "unknown"),
}


@pytest.mark.parametrize(("name", "expected"), H200_NAMES.items(), ids=[plain_id(n) for n in H200_NAMES])
def test_classify_and_precision(name: str, expected: tuple[str, str]) -> None:
    assert (kernels.classify(name), kernels.precision_tag(name)) == expected


def test_class_table_is_the_reference_order() -> None:
    assert kernels.CLASS_NAMES == [
        "conv_fprop",
        "conv_dgrad",
        "conv_wgrad",
        "gemm",
        "layout_conversion",
        "dtype_cast",
        "normalization",
        "optimizer",
        "reduction",
        "elementwise",
        "other",
    ]
    # Every CPU class is one of the GPU classes: one vocabulary for both tables.
    assert {name for name, _ in kernels.CPU_OPERATOR_CLASSES} <= set(kernels.CLASS_NAMES)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (
            "void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<float>(long, float, float const*, "
            "float*, float*)",
            "RowwiseMomentsCUDAKernel",
        ),
        (
            "void at::<unnamed>::RowwiseMomentsCUDAKernel<float>(long, T1, const T1 *, T1 *, T1 *)",
            "RowwiseMomentsCUDAKernel",
        ),
        ("cudnn::nchwToNhwcKernel", "nchwToNhwcKernel"),
        (
            "void cudnn::ops::nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>"
            "(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)",
            "nchwToNhwcKernel",
        ),
        (
            "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4",
            "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4",
        ),
        (
            "void at::vectorized_elementwise_kernel<4, at::<unnamed>::silu_kernel(at::TensorIteratorBase &)::"
            "[lambda() (instance 1)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, 2>>"
            "(int, T2, T3)",
            "vectorized_elementwise_kernel",
        ),
        ("aten::convolution_backward", "convolution_backward"),
        ("Optimizer.step#Adam.step", "Optimizer.step#Adam.step"),
        ("nvjet_tst_128x64_64x8_2x1_v_bz_coopB_TNT", "nvjet_tst_128x64_64x8_2x1_v_bz_coopB_TNT"),
    ],
    ids=plain_id,
)
def test_short_name(name: str, short: str) -> None:
    assert kernels.short_name(name) == short


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("aten::slow_conv3d_forward", "conv_fprop"),
        ("aten::mkldnn_convolution", "conv_fprop"),
        ("aten::convolution_backward", "conv_dgrad"),
        ("autograd::engine::evaluate_function: ConvolutionBackward0", "conv_dgrad"),
        ("aten::native_group_norm", "normalization"),
        ("aten::native_group_norm_backward", "normalization"),
        ("aten::copy_", "layout_conversion"),
        ("aten::add_", "elementwise"),
        ("aten::silu_backward", "elementwise"),
        ("Optimizer.step#Adam.step", "optimizer"),
        ("aten::_foreach_add_", "optimizer"),
        ("aten::mean", "reduction"),
        ("aten::addmm", "gemm"),
        ("aten::empty", "other"),
    ],
    ids=plain_id,
)
def test_classify_cpu_op(op: str, expected: str) -> None:
    assert kernels.classify_cpu_op(op) == expected


# --- ncu: command lines -----------------------------------------------------------------------------------------


def test_ncu_build_command() -> None:
    argv = ncu.build_command(
        ["python", "train.py", "--steps", "1"],
        ["gpu__time_duration.sum", "sm__cycles_elapsed.max"],
        "step",
        "out/prof.ncu-rep",
        ["--launch-count", "500"],
        sections=["SpeedOfLight"],
    )
    assert argv == [
        "ncu",
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--nvtx",
        "--nvtx-include",
        "step",
        "--metrics",
        "gpu__time_duration.sum,sm__cycles_elapsed.max",
        "--section",
        "SpeedOfLight",
        "-o",
        "out/prof",
        "-f",
        "--launch-count",
        "500",
        "python",
        "train.py",
        "--steps",
        "1",
    ]


def test_ncu_build_command_refuses_push_pop_range() -> None:
    with pytest.raises(ValueError, match="range_start/range_end"):
        ncu.build_command(["python", "x.py"], [], "step/", "r.ncu-rep")


def test_ncu_export_command() -> None:
    assert ncu.export_command("r.ncu-rep", "raw")[:6] == ["ncu", "-i", "r.ncu-rep", "--csv", "--page", "raw"]
    assert "--print-units" in ncu.export_command("r.ncu-rep", "details")
    with pytest.raises(ValueError):
        ncu.export_command("r.ncu-rep", "source")


# --- ncu: raw page ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", **by_name(NCU_RAW))
def test_ncu_raw_parses_one_row_per_kernel(path: Path) -> None:
    text = page_text(path)
    raw = parsed_page(path)
    # One row per line that starts with a quoted kernel ID (the header starts with "ID", the units row with "").
    data_rows = sum(1 for line in text.splitlines() if re.match(r'^"\d+",', line))
    assert len(raw) == data_rows > 0
    assert raw["id"].is_monotonic_increasing and raw["id"].is_unique
    assert raw["kernel_name"].str.len().gt(0).all()
    duration = raw["gpu__time_duration.sum"]
    assert duration.dtype == float and duration.gt(0).all()
    assert raw.attrs["units"]["gpu__time_duration.sum"] == "nsecond"
    tidy = tidy_page(path)
    assert list(tidy.columns[: len(tables.TIDY_COLUMNS)]) == tables.TIDY_COLUMNS
    assert tidy["kernel_class"].isin(kernels.CLASS_NAMES).all()
    assert (tidy["duration_ns"] == duration).all()
    summary = tables.summarise(tidy)
    everything = summary.set_index("kernel_class").loc["all"]
    assert everything["kernels"] == len(raw)
    assert everything["time_share"] == pytest.approx(1.0)
    assert summary.loc[summary["kernel_class"] != "all", "time_ns"].sum() == pytest.approx(everything["time_ns"])


def test_ncu_raw_units_and_separators() -> None:
    raw = ncu.parse_raw(HANDMADE_RAW.read_text())
    wgrad = raw.loc[raw["kernel_name"].str.contains("wgrad")].iloc[0]
    assert wgrad["gpu__time_duration.sum"] == pytest.approx(1_370_560.0)  # "1,370.560" us
    assert wgrad["dram__bytes_read.sum"] == pytest.approx(3_556.769e6)  # Mbyte
    assert wgrad["dram__bytes_write.sum"] == pytest.approx(221.0)  # "0.221" Kbyte
    assert wgrad["smsp__inst_executed.sum"] == 1_245_312_000
    assert math.isnan(raw.loc[4, "sm__inst_executed_pipe_tensor_op_gmma.sum"])  # "n/a"
    assert raw["device__attribute_display_name"].eq("NVIDIA H200").all()  # text metrics stay text
    assert raw.attrs["units"]["dram__bytes_read.sum"] == "byte"
    assert raw.loc[0, "nvtx_start_end_ranges"].strip().startswith('"0:<default domain>:step')
    tidy = tables.from_ncu(raw)
    assert list(tidy["kernel_class"]) == [
        "layout_conversion",
        "conv_fprop",
        "normalization",
        "elementwise",
        "conv_dgrad",
        "conv_wgrad",
        "reduction",
        "optimizer",
        "gemm",
        "other",
    ]
    assert {"sm_cycles", "ipc", "tensor_pipe_pct", "stall_long_scoreboard", "thread_inst_ffma", "l2_hit_pct"} <= set(
        tidy.columns
    )
    assert "device__attribute_display_name" not in tidy.columns  # the tidy table holds numbers only


def test_binary_prefixed_units_are_powers_of_1024() -> None:
    """ncu prints some sizes with binary prefixes; "Kibyte" was read as 1000 of a unit "ibyte"."""
    from profiling.units import scale_to_base

    assert scale_to_base("Kibyte") == (1024.0, "byte")
    assert scale_to_base("Mibyte/second") == (pytest.approx(1024.0**2 / 1e9), "byte/nsecond")
    assert scale_to_base("Kbyte") == (1000.0, "byte") and scale_to_base("Kinst") == (1000.0, "inst")
    rows = HANDMADE_RAW.read_text().splitlines(keepends=True)
    rows[1] = rows[1].replace('"Kbyte"', '"Kibyte"', 1)
    raw = ncu.parse_raw("".join(rows))
    wgrad = raw.loc[raw["kernel_name"].str.contains("wgrad")].iloc[0]
    assert wgrad["dram__bytes_write.sum"] == pytest.approx(0.221 * 1024)  # "0.221" Kibyte
    assert raw.attrs["units"]["dram__bytes_write.sum"] == "byte"


# The sampling step of the shipped H200 baseline (ncu 2025.3.1, the instruction-mix set), 412 kernels.
H200_SAMPLE_RAW = Path(__file__).parents[1] / "data/reference/wholehead/h200/baseline/profile/sample/ncu_raw.csv.gz"
SPILLING = ["sass__inst_executed_register_spilling_mem_local", "sass__inst_executed_register_spilling_mem_shared"]


def with_no_data_columns(text: str, columns: list[str], unit: str = "inst") -> str:
    """A raw page with `columns` added where ncu sorts them (by name, after the launch columns), `unit` in the units
    row and "no data" for every kernel, as ncu writes the register-spilling counters of a --set full export."""
    rows = list(csv.reader(io.StringIO(text)))
    for column in columns:
        launch = rows[0].index("CC") + 1
        at = launch + sum(1 for name in rows[0][launch:] if name < column)
        for number, row in enumerate(rows):
            row.insert(at, column if number == 0 else unit if number == 1 else "no data")
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return out.getvalue()


def test_ncu_raw_reads_ncus_no_data_cells_as_missing() -> None:
    """ncu writes "no data" for every kernel in sass__inst_executed_register_spilling_mem_local and ..._shared of a
    --set full export (columns with a unit, inst); such a page is read, those values missing, the rest as without
    them. The edges, on a real H200 export with those two columns written in as ncu writes them: the page reads as
    without them, "no data" in the duration is refused, and in a column without a unit it stays text. A real --set
    full export read as it is: test_ncu_set_full_export_of_the_h200_reads_no_data_as_missing."""
    text = gzip.decompress(H200_SAMPLE_RAW.read_bytes()).decode()
    plain = ncu.parse_raw(text)
    raw = ncu.parse_raw(with_no_data_columns(text, SPILLING))
    assert len(raw) == len(plain) == 412
    for column in SPILLING:
        assert raw[column].isna().all() and raw.attrs["units"][column] == "inst"
    pd.testing.assert_frame_equal(raw.drop(columns=SPILLING), plain)
    pd.testing.assert_frame_equal(tables.summarise(tables.from_ncu(raw)), tables.summarise(tables.from_ncu(plain)))
    # Only where ncu writes it: in the duration (which every share needs) it is a missing value, refused ...
    rows = text.splitlines(keepends=True)
    header = next(csv.reader([rows[0]]))
    cells = next(csv.reader([rows[5]]))
    cells[header.index(ncu.DURATION)] = "no data"
    line = io.StringIO()
    csv.writer(line, quoting=csv.QUOTE_ALL, lineterminator="\n").writerow(cells)
    with pytest.raises(ProfilingError, match=r"kernel 3 \(.*\) has no value \('no data'\) in column "
                                             r"gpu__time_duration\.sum"):
        ncu.parse_raw("".join(rows[:5] + [line.getvalue()] + rows[6:]))
    # ... and in a column without a unit (not a metric) it is text, as any other word there.
    text_column = ncu.parse_raw(with_no_data_columns(text, ["launch__comment"], unit=""))
    assert text_column["launch__comment"].eq("no data").all()


# A real --set full export (tests/fixtures/profiling/h200_set_full, recorded with h200_set_full.yaml): kernels 421 to
# 460 of the bf16 training step of h200_small_steps.yaml's network, the end of the forward pass and the start of the
# backward; the raw and details pages of one report and ncu's log. Expected values come from the files as plain pandas
# and the csv module read them.
SET_FULL = FIXTURES / "h200_set_full"
SET_FULL_RAW = SET_FULL / "ncu_raw.csv.gz"
SET_FULL_DETAILS = SET_FULL / "ncu_details.csv.gz"


def test_ncu_set_full_export_of_the_h200_reads_no_data_as_missing() -> None:
    raw, plain = parsed_page(SET_FULL_RAW), plain_page(SET_FULL_RAW)
    header, units_row = list(csv.reader(io.StringIO(page_text(SET_FULL_RAW))))[:2]
    assert len(raw) == len(plain) == 40 and list(raw["id"]) == list(range(40)) and len(header) == 2248
    # ncu's "no data" for every kernel in the two register-spilling columns: missing values, their unit kept.
    for column in SPILLING:
        assert plain[column].eq("no data").all() and units_row[header.index(column)] == "inst"
        assert raw[column].isna().all() and raw.attrs["units"][column] == "inst"
    # Every column with a unit is numbers, missing exactly where ncu wrote no number ("no data", "nan", empty).
    metrics = [c for c, unit in zip(header, units_row) if unit.strip()]
    dtypes = raw.dtypes  # column by column, raw[c] would copy the units of all 2,230 metrics each time
    assert len(metrics) == 1360 and (dtypes[metrics] == float).all()
    gaps = plain[metrics].isna() | plain[metrics].eq("no data")
    assert (raw[metrics].isna() == gaps).all().all()
    assert sorted(c for c in metrics if gaps[c].all()) == sorted(
        SPILLING + [c for c in metrics if ".TriageCompute." in c and plain[c].isna().all()]
    )
    # Of the columns without a unit, only the device's and launch's words stay text.
    identity = header[: header.index("CC") + 1]
    text = [c for c, unit in zip(header, units_row) if not unit.strip() and c not in identity and dtypes[c] != float]
    assert text == ["device__attribute_confidential_computing_mode", "device__attribute_display_name",
                    "launch__cluster_scheduling_policy", "launch__func_cache_config", "launch__tpc_enabled"]
    # The metrics the profile job asked for (its --metrics, in the command line of ncu's log) and every metric the
    # tidy table maps (the tensor-op counts have no unit): a value for every kernel, the one plain pandas reads (the
    # page is in base units).
    requested = re.search(r" --metrics (\S+) ", (SET_FULL / "ncu.log").read_text()).group(1).split(",")
    mapped = [c for c in header if tables.maps_metric(c)]
    assert set(requested) <= set(mapped) and len(mapped) == 56
    assert raw[mapped].notna().all().all()
    assert raw[mapped].to_numpy() == pytest.approx(plain[mapped].astype(float).to_numpy())
    # The backward pass has begun: one dgrad and two wgrad convolutions; the dgrad takes 13,312 ns.
    names = plain["Kernel Name"]
    assert names.str.contains("_dgrad_").sum() == 1 and names.str.contains("_wgrad_").sum() == 2
    ncu.validate_kernels(raw)
    dgrad = raw["kernel_name"].str.startswith("sm80_xmma_dgrad_implicit_gemm_indexed_bf16bf16")
    assert raw.loc[dgrad, ncu.DURATION].tolist() == plain.loc[dgrad, ncu.DURATION].tolist() == [13_312.0]
    assert raw.attrs["units"][ncu.DURATION] == "nsecond"


def test_ncu_set_full_export_of_the_h200_summarised() -> None:
    plain, tidy = plain_page(SET_FULL_RAW), tidy_page(SET_FULL_RAW)
    spilling = ["sass_inst_executed_register_spilling_mem_local", "sass_inst_executed_register_spilling_mem_shared"]
    assert tidy[spilling].isna().all().all()  # kept, all missing: not an input of the summary
    summary = tables.summarise(tidy).set_index("kernel_class")
    everything = summary.loc["all"]
    classes = summary.drop(index="all")
    assert everything["kernels"] == classes["kernels"].sum() == 40
    assert everything["time_ns"] == plain[ncu.DURATION].sum() == 164_704
    assert classes["time_ns"].sum() == pytest.approx(everything["time_ns"])
    assert classes["time_share"].sum() == pytest.approx(1.0) and everything["time_share"] == pytest.approx(1.0)
    assert classes.loc["conv_dgrad", "time_ns"] == 13_312 and classes.loc["conv_wgrad", "kernels"] == 2
    # cuDNN's transposes (nine of the 40) by name, without the classifier.
    transposes = plain["Kernel Name"].str.contains("nchwToNhwcKernel|nhwcToNchwKernel|tensorTransformGeneric")
    assert classes.loc["layout_conversion", "kernels"] == transposes.sum() == 9
    assert classes.loc["layout_conversion", "time_ns"] == plain.loc[transposes, ncu.DURATION].sum()
    assert everything["layout_conversion_share"] == pytest.approx(classes.loc["layout_conversion", "time_share"])
    assert everything["dtype_cast_share"] == pytest.approx(classes.loc["dtype_cast", "time_share"])
    assert everything["sm_cycles"] == plain["sm__cycles_elapsed.max"].sum()
    assert everything["tensor_pipe_metric"] == "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"


def test_ncu_set_full_export_of_the_h200_pages_and_log_agree() -> None:
    raw_text, details_text = page_text(SET_FULL_RAW), page_text(SET_FULL_DETAILS)
    rules = ncu.parse_details(details_text)
    assert list(rules.columns) == ncu.RULE_COLUMNS
    assert sorted(set(rules["kernel_id"])) == list(range(40))
    assert (rules["rule"] == "SOLBottleneck").sum() == 40  # --set full runs the speed-of-light rule on every kernel
    assert rules["estimated_speedup_pct"].dropna().between(0, 100).all()
    ncu.check_pages_agree(raw_text, SET_FULL_RAW, details_text, SET_FULL_DETAILS)
    # The raw page cut at a row boundary still parses; against the whole details page it is refused, named.
    lines = raw_text.splitlines(keepends=True)
    cut = "".join(lines[: 2 + 20])
    assert ncu.check_raw_csv(cut) is None and ncu.exported_kernels(cut) == 20
    with pytest.raises(ProfilingError, match=rf"^ncu raw CSV {re.escape(str(SET_FULL_RAW))} holds 20 kernels but the "
                                             rf"other page of the same report, {re.escape(str(SET_FULL_DETAILS))}, "
                                             r"holds 40: ncu_raw\.csv\.gz is cut short; fix:"):
        ncu.check_pages_agree(cut, SET_FULL_RAW, details_text, SET_FULL_DETAILS)
    # The details page cut inside its last kernel (its first 50 rows: 44 metric rows, 6 rules).
    details = details_text.splitlines(keepends=True)
    last = next(n for n, line in enumerate(details) if line.startswith('"39",'))
    with pytest.raises(ProfilingError, match=rf"^ncu details CSV {re.escape(str(SET_FULL_DETAILS))} is cut short: its "
                                             r"last kernel \(39\) has 44 metric rows, where kernels like it have 94;"):
        ncu.check_pages_agree(raw_text, SET_FULL_RAW, "".join(details[: last + 50]), SET_FULL_DETAILS)
    # ncu's log: one line per kernel, numbered "- ID (K/40)", a long name cut after 29 characters and "...".
    log = (SET_FULL / "ncu.log").read_text()
    profiled = re.findall(r'^==PROF== Profiling "(.*)" - (\d+) \((\d+)/40\):', log, re.M)
    assert [(int(i), int(k)) for _, i, k in profiled] == [(i, i + 1) for i in range(40)]
    short = parsed_page(SET_FULL_RAW)["kernel_name"].map(kernels.short_name)
    assert all(full.startswith(name.removesuffix("...")) for (name, _, _), full in zip(profiled, short))
    assert ncu.profiled_kernels(log) == 40
    ncu.check_kernel_count(ncu.exported_kernels(raw_text), ncu.profiled_kernels(log), str(SET_FULL_RAW))
    with pytest.raises(ProfilingError, match=r"holds 20 kernels but ncu profiled 40 .*cut short"):
        ncu.check_kernel_count(ncu.exported_kernels(cut), ncu.profiled_kernels(log), str(SET_FULL_RAW))


def test_ncu_h200_recording_has_backward_and_joins_torch_trace() -> None:
    raw = ncu.parse_raw(H200_RAW.read_text())
    assert len(raw) == 41
    ncu.validate_kernels(raw)  # range_start/range_end kept the backward pass
    trace = torchprof.trace_rows(H200_TRACE)
    # ncu simplifies names (at::native:: dropped, "<unnamed>"); short name plus order joins the two tools.
    assert list(raw["kernel_name"].map(kernels.short_name)) == list(trace["name"].map(kernels.short_name))
    assert list(raw["kernel_name"].map(kernels.classify)) == list(trace["name"].map(kernels.classify))
    tidy = tables.from_ncu(raw)
    assert tidy["sm_cycles"].gt(0).all() and tidy["warp_instructions"].gt(0).all()


def test_validate_kernels_catches_the_push_pop_trap() -> None:
    raw = ncu.parse_raw(H200_PUSHPOP.read_text())
    with pytest.raises(ProfilingError, match="backward pass missing: no dgrad or wgrad") as caught:
        ncu.validate_kernels(raw)
    assert "range_start/range_end" in str(caught.value) and "\n" not in str(caught.value)


def test_validate_kernels_names_the_missing_kind() -> None:
    frame = pd.DataFrame({"name": ["sm80_xmma_fprop_x", "sm80_xmma_dgrad_x"]})
    with pytest.raises(ProfilingError, match="no wgrad kernel"):
        ncu.validate_kernels(frame)
    ncu.validate_kernels(pd.DataFrame({"kernel_name": ["a_dgrad_b", "a_wgrad_b"]}))


def _cut(text: str, how: str) -> str:
    lines = text.splitlines(keepends=True)
    if how == "no units row":
        return lines[0] + "".join(lines[2:])
    if how == "short last row":
        return "".join(lines[:-1]) + '","'.join(lines[-1].split('","')[:-3]) + '"\n'
    if how == "cut inside a quoted field":
        return "".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2]
    if how == "header only":
        return lines[0]
    return ""  # "empty"


@pytest.mark.parametrize("how", ["no units row", "short last row", "cut inside a quoted field", "header only", "empty"])
def test_ncu_truncated_csv_is_named(how: str) -> None:
    text = _cut(HANDMADE_RAW.read_text(), how)
    message = ncu.diagnose("", 0, csv_text=text)
    assert message is not None and "\n" not in message and "fix:" in message
    with pytest.raises(ProfilingError):
        ncu.parse_raw(text)


# --- ncu: details page (rules) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", **by_name(NCU_DETAILS))
def test_ncu_details_rules(path: Path) -> None:
    rules = ncu.parse_details(page_text(path))
    assert list(rules.columns) == ncu.RULE_COLUMNS
    assert len(rules) > 0 and rules["rule"].str.len().gt(0).all()
    assert rules["estimated_speedup_pct"].dtype == float
    assert rules["estimated_speedup_pct"].dropna().between(0, 100).all()


def test_ncu_details_values() -> None:
    rules = ncu.parse_details((FIXTURES / "ncu_details_handmade.csv").read_text())
    assert len(rules) == 7  # 9 metric rows are not rules
    assert list(rules["kernel_id"]) == [0, 0, 1, 1, 2, 2, 1]
    occupancy = rules[rules["rule"] == "AchievedOccupancy"]
    assert list(occupancy["estimated_speedup_pct"]) == [40.38, 12.5, 8.75]
    assert rules.loc[rules["rule"] == "SOLBottleneck", "estimated_speedup_pct"].isna().all()
    assert set(rules["speedup_type"]) == {"", "local", "global"}


def test_ncu_details_truncated() -> None:
    text = (FIXTURES / "ncu_details_handmade.csv").read_text()
    with pytest.raises(ProfilingError, match="truncated"):
        ncu.parse_details(text[: text.rindex("This kernel launch")])


def test_ncu_details_without_rule_columns_is_empty() -> None:
    text = '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"\n"0","k","S","m","ns","1"\n'
    assert ncu.parse_details(text).empty


# --- ncu: diagnoses ---------------------------------------------------------------------------------------------

NCU_FAILURES = {
    "not found (shell)": ("bash: ncu: command not found", 127, "ncu not found"),
    "not found (subprocess)": ("[Errno 2] No such file or directory: 'ncu'", 1, "ncu not found"),
    "counters restricted": (
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
        "on the target device 0.",
        1,
        "NVreg_RestrictProfilingToAdminUsers=0",
    ),
    "volta": ("==ERROR== Invalid chip gv100", 1, "2024 or older"),
    "unknown metric": ("==ERROR== Failed to find metric sm__bogus.sum", 1, "sm__bogus.sum"),
    "unknown metric (query)": (
        "Chip gh100\n==WARNING== The below metrics are either invalid or don't have suffixes.\nsm__no_such_metric.sum",
        0,
        "sm__no_such_metric.sum",
    ),
    "no kernels": (
        "==PROF== Disconnected from process 1329\n==WARNING== No kernels were profiled.\n"
        "==WARNING== Note that specified NVTX include expressions match only start/end ranges.",
        0,
        "without a trailing slash",
    ),
    "gvisor": ("==ERROR== Failed to initialize the profiler: LibraryNotLoaded", 1, "LibraryNotLoaded"),
}


@pytest.mark.parametrize(("stderr", "code", "named"), NCU_FAILURES.values(), ids=list(NCU_FAILURES))
def test_ncu_diagnose(stderr: str, code: int, named: str) -> None:
    message = ncu.diagnose(stderr, code)
    assert message is not None and named in message
    assert "\n" not in message and "fix:" in message


def test_ncu_diagnose_silently_dropped_metric() -> None:
    # ncu 2025.3.1 leaves an unknown --metrics name out of the report without an error.
    text = H200_RAW.read_text()
    assert ncu.diagnose("", 0, text, ["gpu__time_duration.sum"]) is None
    message = ncu.diagnose("", 0, text, ["gpu__time_duration.sum", "sm__no_such_metric.sum"])
    assert message is not None and "sm__no_such_metric.sum" in message


def test_ncu_diagnose_clean_run() -> None:
    assert ncu.diagnose("==PROF== Disconnected from process 1", 0, HANDMADE_RAW.read_text()) is None
    # A missing report file is not a missing ncu.
    assert ncu.diagnose("No such file or directory: 'out/missing.ncu-rep'", 1) is None


def test_read_report_needs_ncu_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ncu, "import_ncu_report", lambda: None)
    with pytest.raises(ProfilingError, match="ncu_report Python module not found"):
        ncu.read_report("missing.ncu-rep")


# --- nsys -------------------------------------------------------------------------------------------------------


def test_nsys_commands() -> None:
    assert nsys.build_command(["python", "t.py"], "out/run.nsys-rep") == [
        "nsys",
        "profile",
        "-t",
        "cuda,nvtx,cudnn,cublas",
        "--capture-range=cudaProfilerApi",
        "-o",
        "out/run",
        "-f",
        "true",
        "python",
        "t.py",
    ]
    assert nsys.stats_command("run.nsys-rep", "out/run", "cuda_gpu_kern_sum") == [
        "nsys",
        "stats",
        "--report",
        "cuda_gpu_kern_sum",
        "--format",
        "csv",
        "--output",
        "out/run",
        "run.nsys-rep",
    ]
    assert nsys.stats_csv_path("out/run", "gpukernsum") == Path("out/run_gpukernsum.csv")
    assert nsys.KERN_SUM_REPORTS == ("cuda_gpu_kern_sum", "gpukernsum")


@pytest.mark.parametrize("path", **by_name(NSYS_KERN_SUM))
def test_nsys_kern_sum_parses(path: Path) -> None:
    table = nsys.parse_kern_sum(path)
    assert list(table.columns) == nsys.KERN_SUM_COLUMNS
    assert len(table) > 0 and table["total_ns"].gt(0).all() and table["instances"].gt(0).all()
    # nsys rounds the average; the product only agrees to that rounding.
    assert (table["avg_ns"] * table["instances"]).to_numpy() == pytest.approx(table["total_ns"].to_numpy(), rel=1e-4)
    tidy = tables.from_nsys(table)
    summary = tables.summarise(tidy).set_index("kernel_class")
    assert summary.loc["all", "kernels"] == table["instances"].sum()
    assert summary.loc["all", "time_ns"] == pytest.approx(table["total_ns"].sum())
    assert summary[["sm_cycles", "ipc", "dram_bytes"]].isna().all().all()  # nsys measures time only


def test_nsys_both_column_styles_agree() -> None:
    new = nsys.parse_kern_sum(FIXTURES / "nsys_cuda_gpu_kern_sum_handmade.csv")
    old = nsys.parse_kern_sum(FIXTURES / "nsys_gpukernsum_handmade.csv")
    same = ["name", "time_pct", "total_ns", "instances", "avg_ns", "min_ns", "max_ns"]
    pd.testing.assert_frame_equal(new[same], old[same])
    assert old["med_ns"].isna().all() and new["med_ns"].notna().all()
    assert new.loc[0, "total_ns"] == 1_427_230_720 and new.loc[0, "instances"] == 91
    shares = tables.summarise(tables.from_nsys(new)).set_index("kernel_class")["time_share"]
    assert shares["conv_wgrad"] == pytest.approx(new.loc[0, "time_pct"] / 100, abs=5e-4)


def test_nsys_units_in_headers(tmp_path: Path) -> None:
    path = tmp_path / "k.csv"
    path.write_text("Time (%),Total Time (us),Instances,Avg (us),Name\n100.0,\"1,500\",3,500,kern\n")
    table = nsys.parse_kern_sum(path)
    assert table.loc[0, "total_ns"] == 1_500_000 and table.loc[0, "avg_ns"] == 500_000


def test_nsys_diagnose(tmp_path: Path) -> None:
    missing = nsys.diagnose("bash: nsys: command not found", 127)
    assert missing is not None and "nsys not found" in missing
    (tmp_path / "run.qdstrm").write_bytes(b"\0")
    stranded = nsys.diagnose("", 0, report_path=tmp_path / "run.nsys-rep")
    assert stranded is not None and "QdstrmImporter" in stranded
    (tmp_path / "run.nsys-rep").write_bytes(b"\0")
    assert nsys.diagnose("", 0, report_path=tmp_path / "run.nsys-rep") is None
    said = nsys.diagnose("Importer error: cannot find QdstrmImporter", 1)
    assert said is not None and ".qdstrm" in said
    unknown = nsys.diagnose("ERROR: Report 'cuda_gpu_kern_sum' could not be found.", 1)
    assert unknown is not None and "gpukernsum" in unknown
    full = (FIXTURES / "nsys_cuda_gpu_kern_sum_handmade.csv").read_text()
    short_row = full.splitlines()[0] + "\n58.2,1427230720,91\n"
    for text in ["", "Processing [run.sqlite] with [cuda_gpu_kern_sum.py]...\n", full[: len(full) // 2], short_row]:
        message = nsys.diagnose("", 0, csv_text=text)
        assert message is not None and "\n" not in message and "fix:" in message
    assert nsys.diagnose("", 0, csv_text=full) is None


def test_nsys_truncated_csv_raises(tmp_path: Path) -> None:
    path = tmp_path / "k.csv"
    full = (FIXTURES / "nsys_gpukernsum_handmade.csv").read_text()
    path.write_text(full[: len(full) - 60])
    with pytest.raises(ProfilingError, match="truncated"):
        nsys.parse_kern_sum(path)


# --- torch.profiler ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    """A real torch.profiler run on CPU: forward, backward and Adam step of Conv3d + GroupNorm + SiLU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv3d(2, 8, 3, padding=1),
        torch.nn.GroupNorm(4, 8),
        torch.nn.SiLU(),
        torch.nn.Conv3d(8, 2, 3, padding=1),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(1, 2, 8, 8, 8)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()

    step()  # warm-up outside the profile, as in the GPU runs
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    trace = tmp_path_factory.mktemp("trace") / "cpu_trace.json"
    prof.export_chrome_trace(str(trace))
    return prof, trace


def test_kernel_rows_on_cpu(cpu_profile: tuple[object, Path]) -> None:
    prof, _ = cpu_profile
    rows = torchprof.kernel_rows(prof)
    assert list(rows.columns) == torchprof.ROW_COLUMNS
    assert rows["device"].eq("cpu").all() and rows["duration_us"].ge(0).all()
    assert rows["start_us"].is_monotonic_increasing
    # Self times: their sum cannot exceed the time spanned by the profiled operators.
    events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    span = max(e.time_range.end for e in events) - min(e.time_range.start for e in events)
    assert rows["duration_us"].sum() <= span * 1.001
    tidy = tables.from_torch(rows)
    classes = tidy.groupby("kernel_class")["duration_ns"].sum()
    for expected in ["conv_fprop", "conv_dgrad", "normalization", "optimizer", "elementwise"]:
        assert classes.get(expected, 0) > 0, expected
    assert "conv_wgrad" not in classes  # one CPU operator computes both gradients: counted as conv_dgrad
    assert (tidy.loc[tidy["name"] == "aten::convolution_backward", "kernel_class"] == "conv_dgrad").all()
    summary = tables.summarise(tidy).set_index("kernel_class")
    assert summary[["sm_cycles", "warp_instructions", "ipc", "tensor_pipe_pct", "dram_bytes"]].isna().all().all()


def test_trace_rows_rebuild_the_cpu_rows(cpu_profile: tuple[object, Path]) -> None:
    prof, trace = cpu_profile
    live = torchprof.kernel_rows(prof)
    saved = torchprof.trace_rows(trace)
    # Row for row: same operators in the same order with the same self times (redispatches folded alike).
    assert list(saved["name"]) == list(live["name"])
    assert saved["duration_us"].to_numpy() == pytest.approx(live["duration_us"].to_numpy(), abs=1e-3)
    assert saved["start_us"].to_numpy() == pytest.approx(live["start_us"].to_numpy(), abs=1e-2)


def _fake_kernel(name: str, start: float, duration: float, field: str) -> SimpleNamespace:
    return SimpleNamespace(
        name=name, device_type=DeviceType.CUDA, time_range=SimpleNamespace(start=start), **{field: duration}
    )


@pytest.mark.parametrize("field", ["device_time_total", "cuda_time_total"])
def test_kernel_rows_on_cuda_events(field: str) -> None:
    events = [
        SimpleNamespace(name="aten::conv3d", device_type=DeviceType.CPU, time_range=SimpleNamespace(start=0.0)),
        _fake_kernel("sm80_xmma_wgrad_k", 30.0, 12.5, field),
        _fake_kernel("sm80_xmma_fprop_k", 10.0, 4.0, field),
        _fake_kernel("Memcpy HtoD (Pageable -> Device)", 5.0, 1.0, field),
    ]
    rows = torchprof.kernel_rows(SimpleNamespace(events=lambda: events))
    assert list(rows["name"]) == ["sm80_xmma_fprop_k", "sm80_xmma_wgrad_k"]
    assert list(rows["duration_us"]) == [4.0, 12.5] and list(rows["start_us"]) == [0.0, 20.0]
    assert rows["device"].eq("gpu").all()


def test_trace_rows_self_time_and_folding(tmp_path: Path) -> None:
    def op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}

    events = [
        op("ProfilerStep#1", 0, 100, cat="user_annotation"),
        op("aten::add_", 10, 30),
        op("aten::add_", 12, 26),  # only child of the same name: folded into its parent, as events() does
        op("aten::empty", 50, 5),
        op("aten::mm", 20, 70, tid=2),
        {"ph": "i", "cat": "cpu_instant_event", "name": "marker", "pid": 7, "tid": 1, "ts": 60},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    rows = torchprof.trace_rows(path)
    assert list(zip(rows["name"], rows["duration_us"], rows["start_us"])) == [
        ("aten::add_", 30.0, 0.0),
        ("aten::mm", 70.0, 10.0),
        ("aten::empty", 5.0, 40.0),
    ]
    kernels_only = events + [
        op("sm80_xmma_wgrad_k", 300, 12, tid=9, cat="kernel"),
        op("Memcpy HtoD (Pageable -> Device)", 200, 3, tid=9, cat="gpu_memcpy"),
    ]
    path.write_text(json.dumps({"traceEvents": kernels_only}))
    rows = torchprof.trace_rows(path)
    assert list(rows["name"]) == ["sm80_xmma_wgrad_k"] and list(rows["device"]) == ["gpu"]


@pytest.mark.parametrize("path", **by_name(TORCH_TRACES))
def test_trace_rows_from_saved_traces(path: Path) -> None:
    rows = torchprof.trace_rows(path)
    assert len(rows) > 0 and rows["duration_us"].ge(0).all()
    tidy = tables.from_torch(rows)
    assert tidy["kernel_class"].isin(kernels.CLASS_NAMES).all()


def test_trace_rows_h200_kernels() -> None:
    rows = torchprof.trace_rows(H200_TRACE)
    assert len(rows) == 41 and rows["device"].eq("gpu").all()
    classes = set(tables.from_torch(rows)["kernel_class"])
    assert {"conv_fprop", "conv_dgrad", "conv_wgrad", "layout_conversion", "optimizer"} <= classes


# --- tidy table and summary -------------------------------------------------------------------------------------


def test_metric_column_names() -> None:
    assert tables.metric_column("sm__cycles_elapsed.max") == "sm_cycles"
    assert tables.metric_column("gpu__time_duration.sum") == "duration_ns"
    assert (
        tables.metric_column("smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio")
        == "stall_math_pipe_throttle"
    )
    assert tables.metric_column("smsp__sass_inst_executed_op_global_ld.sum") == "inst_global_ld"
    assert tables.metric_column("smsp__sass_thread_inst_executed_op_hfma_pred_on.sum") == "thread_inst_hfma"
    assert tables.metric_column("sm__throughput.avg.pct_of_peak_sustained_elapsed") == (
        "sm_throughput_avg_pct_of_peak_sustained_elapsed"
    )
    new_metrics = {
        "sm__inst_executed_pipe_tensor.sum": "tensor_instructions",
        "sm__ops_path_tensor_src_tf32_dst_fp32.sum": "tensor_ops_tf32",
        "sm__ops_path_tensor_src_bf16_dst_fp32.sum": "tensor_ops_bf16",
        "sm__ops_path_tensor_src_fp16.sum": "tensor_ops_fp16",
        "smsp__thread_inst_executed_pred_on.sum": "thread_instructions_pred_on",
        "smsp__sass_inst_executed_op_global.sum": "inst_global",
        "smsp__sass_inst_executed_op_shared.sum": "inst_shared",
        "smsp__sass_inst_executed_op_ldgsts.sum": "inst_ldgsts",
        "smsp__sass_inst_executed_op_tma.sum": "inst_tma",
        "smsp__sass_inst_executed_op_branch.sum": "inst_branch",
        "smsp__sass_thread_inst_executed_op_inter_thread_communication_pred_on.sum": (
            "thread_inst_inter_thread_communication"
        ),
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor_hmma_pct",
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor_all_pct",
    }
    assert {metric: tables.metric_column(metric) for metric in new_metrics} == new_metrics


def small_run() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "source": "ncu",
            "kernel_class": ["conv_fprop", "conv_fprop", "layout_conversion", "elementwise", "dtype_cast"],
            "instances": 1,
            "duration_ns": [100.0, 300.0, 50.0, 50.0, 25.0],
            "sm_cycles": [10.0, 20.0, 5.0, 5.0, 1.0],
            "warp_instructions": [1.0, 2.0, 3.0, 4.0, 0.5],
            "thread_instructions": [32.0, 64.0, 96.0, 128.0, 16.0],
            "ipc": [1.0, 2.0, 0.5, 0.75, 0.25],
            "tensor_pipe_pct": [10.0, 50.0, 0.0, 0.0, 0.0],
            "tensor_pipe_metric": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
            "dram_read_bytes": [1e3, 2e3, 4e3, 8e3, 16e3],
            "dram_write_bytes": [1.0, 2.0, 3.0, 4.0, 5.0],
            "tensor_flop": [1e9, 3e9, 0.0, 0.0, 0.0],
            "fp32_flop": [1e6, 2e6, 0.0, 3e6, 0.0],
        }
    )


CONDITIONS = ["profiled_wall_ms", "other_load_cores", "speed_probe_ms", "condition_changes"]


def test_summarise_math() -> None:
    summary = tables.summarise(small_run())
    assert list(summary.columns) == tables.SUMMARY_COLUMNS
    assert list(summary["kernel_class"]) == ["conv_fprop", "layout_conversion", "dtype_cast", "elementwise", "all"]
    conv = summary.set_index("kernel_class").loc["conv_fprop"]
    assert conv["kernels"] == 2 and conv["time_ns"] == 400.0 and conv["time_share"] == 400 / 525
    assert conv["ipc"] == pytest.approx((1.0 * 100 + 2.0 * 300) / 400)  # weighted by duration
    assert conv["tensor_pipe_pct"] == pytest.approx((10 * 100 + 50 * 300) / 400)
    assert conv["sm_cycles"] == 30.0 and conv["dram_bytes"] == 3003.0
    assert conv["tensor_flop"] == 4e9 and conv["fp32_flop"] == 3e6
    assert math.isnan(conv["layout_conversion_share"]) and math.isnan(conv["dtype_cast_share"])
    everything = summary.set_index("kernel_class").loc["all"]
    assert everything["time_ns"] == 525.0 and everything["kernels"] == 5
    assert everything["layout_conversion_share"] == pytest.approx(50 / 525)
    assert everything["dtype_cast_share"] == pytest.approx(25 / 525)
    assert everything["tensor_pipe_pct"] == pytest.approx((1000 + 15000) / 525)
    assert everything["warp_instructions"] == 10.5 and everything["thread_instructions"] == 336.0
    assert everything["tensor_flop"] == 4e9
    assert set(summary["tensor_pipe_metric"]) == {small_run()["tensor_pipe_metric"][0]}
    assert everything["ipc"] == pytest.approx((100 + 600 + 25 + 37.5 + 6.25) / 525)
    assert everything["fp32_flop"] == 6e6
    assert not summary.drop(columns=["layout_conversion_share", "dtype_cast_share", *CONDITIONS]).isna().any().any()
    assert summary[CONDITIONS].isna().all().all()  # tables.with_conditions fills them from the profiled step's file


@pytest.mark.parametrize(("column", "row"), [("ipc", 3), ("duration_ns", 0), ("fp32_flop", 4), ("sm_cycles", 1)])
def test_summarise_refuses_a_column_with_gaps(column: str, row: int) -> None:
    """One kernel without a value would make its class's and the run's figure NaN without a word: refused."""
    run = small_run()
    run.loc[row, column] = math.nan
    with pytest.raises(ProfilingError, match=rf"launch {row} \(.*\) has no {column} \(1 of 5 rows lack it\)"):
        tables.summarise(run)


def test_summarise_keeps_nan_for_what_the_source_does_not_measure() -> None:
    run = small_run().assign(fp32_flop=math.nan)  # the FP32 counters were not collected for any kernel
    assert math.isnan(tables.summarise(run).set_index("kernel_class").loc["all", "fp32_flop"])


def test_summarise_durations_only() -> None:
    rows = pd.DataFrame(
        {"name": ["aten::add_", "aten::mean"], "device": "cpu", "start_us": [0.0, 1.0], "duration_us": [3.0, 1.0]}
    )
    summary = tables.summarise(tables.from_torch(rows)).set_index("kernel_class")
    assert summary.loc["all", "time_ns"] == 4000.0 and summary.loc["elementwise", "time_share"] == 0.75
    assert summary.loc["all", "layout_conversion_share"] == 0.0 and summary.loc["all", "dtype_cast_share"] == 0.0
    assert summary[["sm_cycles", "ipc", "tensor_pipe_pct", "dram_bytes", "tensor_flop", "fp32_flop"]].isna().all().all()
    assert set(summary["tensor_pipe_metric"]) == {""}


def test_summarise_one_source_only() -> None:
    run = small_run()
    run.loc[0, "source"] = "torch"
    with pytest.raises(ValueError, match="one source"):
        tables.summarise(run)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_write_and_read_table(tmp_path: Path, suffix: str) -> None:
    tidy = tables.from_ncu(ncu.parse_raw(HANDMADE_RAW.read_text()))
    path = tmp_path / f"kernels{suffix}"
    tables.save_frame(tidy, path)
    back = tables.load_frame(path)
    assert list(back.columns) == list(tidy.columns)
    assert back["duration_ns"].to_numpy() == pytest.approx(tidy["duration_ns"].to_numpy())
    assert list(back["name"]) == list(tidy["name"])


def test_write_table_refuses_other_suffixes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=".parquet or .csv"):
        tables.save_frame(small_run(), tmp_path / "x.json")


# --- real H200 profiles with the instruction-mix, tensor-op and memory-op counters ------------------------------
# tests/fixtures/profiling/h200_small (recorded with tests/fixtures/profiling/h200_small_steps.yaml): sampling steps of
# the fp32 baseline, TF32 and bf16 with the full counter set, training steps with the one-pass set. Expected values
# are computed here from the raw CSV with plain pandas and ncu's own metric names, never with profiling.instructions.

SMALL = FIXTURES / "h200_small"
SAMPLED = ["baseline", "tf32", "bf16"]
FAMILIES = [
    "fp32",
    "fp16",
    "integer",
    "bit",
    "control",
    "conversion",
    "memory",
    "uniform",
    "misc",
    "inter_thread_communication",
]
HMMA_PCT = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
ALL_PCT = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
HMMA = "sm__inst_executed_pipe_tensor_op_hmma.sum"
GMMA = "sm__inst_executed_pipe_tensor_op_gmma.sum"
OPS = [f"sm__ops_path_tensor_src_{path}.sum" for path in ("tf32_dst_fp32", "bf16_dst_fp32", "fp16")]


def family(raw: pd.DataFrame, name: str) -> pd.Series:
    return raw[f"smsp__sass_thread_inst_executed_op_{name}_pred_on.sum"]


def raw_csv(variant: str, phase: str) -> pd.DataFrame:
    """The raw page as plain pandas reads it: header row, units row skipped, thousands separators removed."""
    return plain_page(SMALL / variant / phase / "ncu_raw.csv.gz")


def parsed(variant: str, phase: str) -> pd.DataFrame:
    return parsed_page(SMALL / variant / phase / "ncu_raw.csv.gz")


def tidy_small(variant: str, phase: str) -> pd.DataFrame:
    return tidy_page(SMALL / variant / phase / "ncu_raw.csv.gz")


def test_ncu_counter_facts_the_mix_rests_on() -> None:
    """What ncu 2025.3.1 reported on the H200; the instruction-mix rules in profiling.instructions follow from it."""
    fp32 = raw_csv("baseline", "sample")
    families = sum(family(fp32, f) for f in FAMILIES)
    # The ten families partition the predicated-on thread instructions (exactly, in a step without wgmma).
    assert (families == fp32["smsp__thread_inst_executed_pred_on.sum"]).all()
    # The fp32 step keeps the HMMA pipe busy with HFMA2.MMA moves: tensor-pipe instructions, no tensor math.
    assert fp32[HMMA].sum() == 247_619 and (fp32[OPS] == 0).all().all()
    bf16 = raw_csv("bf16", "sample")
    assert family(bf16, "fp16").sum() == 27_778_454 and 32 * bf16[HMMA].sum() == 27_805_088
    math_kernels = bf16[OPS].sum(axis=1) > 0
    # Where there is tensor math, each HMMA warp instruction is 32 thread instructions inside the fp16 family...
    assert (family(bf16, "fp16")[math_kernels] >= 32 * bf16.loc[math_kernels, HMMA]).all()
    # ... while HFMA2.MMA moves of partial warps count fewer threads (GroupNorm's statistics kernel).
    moves = ~math_kernels & (bf16[HMMA] > 0)
    assert (family(bf16, "fp16")[moves] < 32 * bf16.loc[moves, HMMA]).any()
    # On gh100 the HMMA count includes Hopper's wgmma.
    wgmma = bf16[GMMA] > 0
    assert wgmma.any() and (bf16.loc[wgmma, HMMA] == bf16.loc[wgmma, GMMA]).all()
    # Operations per HMMA instruction: m16n8k16 bf16 = 2 x 16 x 8 x 16 = 4,096; m16n8k8 TF32 = 2,048.
    sm80 = bf16["Kernel Name"].str.startswith("sm80_xmma_fprop") & math_kernels
    assert (bf16.loc[sm80, OPS[1]] == 4096 * bf16.loc[sm80, HMMA]).all() and sm80.any()
    tf32 = raw_csv("tf32", "sample")
    sm80 = tf32["Kernel Name"].str.startswith("sm80_xmma_fprop_implicit_gemm_tf32")
    assert (tf32.loc[sm80, OPS[0]] == 2048 * tf32.loc[sm80, HMMA]).all() and sm80.any()
    # The HMMA and Tensor (All) utilisations agree on every kernel of these steps.
    for variant in SAMPLED:
        raw = raw_csv(variant, "sample")
        assert (raw[HMMA_PCT] == raw[ALL_PCT]).all()


def test_tidy_table_maps_the_new_counters_and_drops_unrequested_rollups() -> None:
    raw, tidy = raw_csv("bf16", "sample"), tidy_small("bf16", "sample")
    mapped = {
        "sm__inst_executed_pipe_tensor.sum": "tensor_instructions",
        OPS[0]: "tensor_ops_tf32",
        OPS[1]: "tensor_ops_bf16",
        OPS[2]: "tensor_ops_fp16",
        "smsp__thread_inst_executed_pred_on.sum": "thread_instructions_pred_on",
        "smsp__sass_inst_executed_op_ldgsts.sum": "inst_ldgsts",
        "smsp__sass_inst_executed_op_tma.sum": "inst_tma",
        "smsp__sass_thread_inst_executed_op_inter_thread_communication_pred_on.sum": (
            "thread_inst_inter_thread_communication"
        ),
        HMMA_PCT: "tensor_hmma_pct",
        ALL_PCT: "tensor_all_pct",
    }
    for metric, column in mapped.items():
        assert tidy[column].to_numpy() == pytest.approx(raw[metric].to_numpy()), column
    # The raw page's other roll-ups of requested counters are not in the table...
    assert "sm__inst_executed_pipe_tensor.avg" in raw.columns and "gpu__time_duration.max" in raw.columns
    for dropped in ("sm_inst_executed_pipe_tensor_avg", "gpu_time_duration_max", "smsp_inst_executed_min"):
        assert dropped not in tidy.columns
    assert not [c for c in tidy.columns if c.startswith(("sm_pipe_tensor_op_hmma", "smsp_thread_inst_executed"))]
    # ... while counters the table does not map stay, all roll-ups, under their sanitised names.
    assert {f"profiler_replayer_bytes_mem_accessible_{r}" for r in ("avg", "max", "min", "sum")} <= set(tidy.columns)
    assert len(tidy.columns) < len(raw.columns)


def test_amperes_two_fp16_destinations_add_up_to_the_fp16_column() -> None:
    """ga100's ncu lists the fp16 tensor operations by destination only (config.yaml's sm80 override collects the
    two): the real H200 page with its fp16 total split in two (the total's values, 1/3 and 2/3) gives the same
    fp16 column and the same tensor FLOPs; one destination alone is not a total."""
    page = parsed("bf16", "sample")
    whole = tables.from_ncu(page)
    split = page.drop(columns=[OPS[2]]).copy().assign(**{
        "sm__ops_path_tensor_src_fp16_dst_fp16.sum": page[OPS[2]] / 3,
        "sm__ops_path_tensor_src_fp16_dst_fp32.sum": page[OPS[2]] * 2 / 3})
    ampere = tables.from_ncu(split)
    assert ampere["tensor_ops_fp16"].to_numpy() == pytest.approx(whole["tensor_ops_fp16"].to_numpy())
    assert ampere["tensor_flop"].to_numpy() == pytest.approx(whole["tensor_flop"].to_numpy())
    assert whole["tensor_flop"].notna().all()
    one = tables.from_ncu(split.drop(columns=["sm__ops_path_tensor_src_fp16_dst_fp32.sum"]))
    assert "tensor_ops_fp16" not in one.columns and one["tensor_flop"].isna().all()


def test_tensor_pipe_pct_prefers_hmma_and_falls_back_to_tensor_all_per_run() -> None:
    raw = raw_csv("tf32", "sample")
    duration = raw["gpu__time_duration.sum"]
    tidy = tidy_small("tf32", "sample")
    assert tidy["tensor_pipe_pct"].to_numpy() == pytest.approx(raw[HMMA_PCT].to_numpy())
    assert set(tidy["tensor_pipe_metric"]) == {HMMA_PCT}
    # Both present but different: HMMA wins (the Tensor (All) values are halved here to tell them apart).
    halved = parsed("tf32", "sample").copy()
    halved[ALL_PCT] = halved[ALL_PCT] / 2
    assert tables.from_ncu(halved)["tensor_pipe_pct"].to_numpy() == pytest.approx(raw[HMMA_PCT].to_numpy())
    # A profile that measured the tensor pipe as Tensor (All) only.
    hmma_columns = [c for c in parsed("tf32", "sample").columns if c.startswith("sm__pipe_tensor_op_hmma_cycles")]
    all_only = tables.from_ncu(parsed("tf32", "sample").drop(columns=hmma_columns))
    assert all_only["tensor_pipe_pct"].to_numpy() == pytest.approx(raw[ALL_PCT].to_numpy())
    everything = tables.summarise(all_only).set_index("kernel_class").loc["all"]
    assert everything["tensor_pipe_metric"] == ALL_PCT
    assert everything["tensor_pipe_pct"] == pytest.approx((raw[ALL_PCT] * duration).sum() / duration.sum())
    assert everything["tensor_pipe_pct"] > 5  # the TF32 step is on the tensor pipe
    # Per run, never mixed per kernel: a kernel without the HMMA value stays unknown.
    one_missing = parsed("tf32", "sample").copy()
    one_missing.loc[3, HMMA_PCT] = math.nan
    mixed = tables.from_ncu(one_missing)
    assert math.isnan(mixed.loc[3, "tensor_pipe_pct"]) and set(mixed["tensor_pipe_metric"]) == {HMMA_PCT}
    # Neither measured: NaN, and the metric column says so.
    neither = tables.from_ncu(parsed("tf32", "sample").drop(columns=[*hmma_columns, ALL_PCT]))
    assert neither["tensor_pipe_pct"].isna().all() and set(neither["tensor_pipe_metric"]) == {""}


@pytest.mark.parametrize("variant", SAMPLED)
def test_tensor_and_fp32_flop_per_kernel_and_per_class(variant: str) -> None:
    raw, tidy = raw_csv(variant, "sample"), tidy_small(variant, "sample")
    tensor = raw[OPS].sum(axis=1)
    ffma, fadd, fmul = (family(raw, op) for op in ("ffma", "fadd", "fmul"))
    assert tidy["tensor_flop"].to_numpy() == pytest.approx(tensor.to_numpy())
    assert tidy["fp32_flop"].to_numpy() == pytest.approx((2 * ffma + fadd + fmul).to_numpy())
    summary = tables.summarise(tidy).set_index("kernel_class")
    by_class = tensor.groupby(tidy["kernel_class"].to_numpy()).sum()
    assert summary.loc[by_class.index, "tensor_flop"].to_numpy() == pytest.approx(by_class.to_numpy())
    assert summary.loc["all", "tensor_flop"] == tensor.sum()
    expected = {"baseline": 0, "tf32": 6_424_100_864, "bf16": 7_663_386_624}[variant]
    assert summary.loc["all", "tensor_flop"] == expected  # bf16: 7.66e9 ops for 4.64e9 model FLOPs (tile padding)


def test_flops_are_unknown_where_not_collected() -> None:
    tidy = tidy_small("bf16", "train")  # the one-pass training set: no tensor-op or FP32 counters
    assert tidy["tensor_flop"].isna().all() and tidy["fp32_flop"].isna().all()
    everything = tables.summarise(tidy).set_index("kernel_class").loc["all"]
    assert math.isnan(everything["tensor_flop"]) and math.isnan(everything["fp32_flop"])


def expected_mix(raw: pd.DataFrame) -> pd.DataFrame:
    """The documented categories from a raw page with every counter collected."""
    ops = raw[OPS].sum(axis=1)
    fp32_arith = sum(family(raw, op) for op in ("ffma", "fadd", "fmul"))
    tensor = (32 * raw[HMMA]).where(ops > 0, 0)
    return pd.DataFrame(
        {
            "mix_fp32_arith": fp32_arith,
            "mix_tensor": tensor,
            "mix_fp16_bf16": family(raw, "fp16") - tensor,
            "mix_integer": family(raw, "integer") + family(raw, "bit"),
            "mix_memory": family(raw, "memory"),
            "mix_control": family(raw, "control"),
            "mix_conversion": family(raw, "conversion"),
            "mix_other": family(raw, "fp32") - fp32_arith + family(raw, "uniform") + family(raw, "misc")
            + family(raw, "inter_thread_communication"),
            "mix_not_split": 0,
            "mix_total": sum(family(raw, f) for f in FAMILIES),
        }
    ).astype(float)


@pytest.mark.parametrize("variant", SAMPLED)
def test_instruction_mix_with_every_counter(variant: str) -> None:
    raw, tidy = raw_csv(variant, "sample"), tidy_small(variant, "sample")
    mix = instructions.kernel_mix(tidy)
    pd.testing.assert_frame_equal(mix[instructions.MIX_COLUMNS], expected_mix(raw), check_dtype=False)
    assert (mix[[f"mix_{c}" for c in instructions.CATEGORY_NAMES]] >= 0).all().all()
    assert set(mix["mix_total_metric"]) == {instructions.TOTAL_FAMILIES}
    if variant == "baseline":  # HMMA-pipe instructions without tensor ops are not tensor math
        assert raw[HMMA].sum() > 0 and mix["mix_tensor"].sum() == 0
    else:
        assert mix["mix_tensor"].sum() > 0.01 * mix["mix_total"].sum()
    # Per class and run: sums of the kernels.
    by_class = instructions.mix_by_class(tidy).set_index("kernel_class")
    assert by_class.loc["all", "mix_total"] == sum(family(raw, f) for f in FAMILIES).sum()
    assert by_class.loc["all", "kernels"] == len(raw)
    classes = [c for c in by_class.index if c != "all"]
    assert by_class.loc[classes, "mix_fp32_arith"].sum() == pytest.approx(by_class.loc["all", "mix_fp32_arith"])
    conv = tidy["kernel_class"] == "conv_fprop"
    assert by_class.loc["conv_fprop", "mix_tensor"] == expected_mix(raw).loc[conv, "mix_tensor"].sum()


def test_instruction_mix_with_the_older_counter_set() -> None:
    """The config's counters (FP32/FP16 thread counters, HMMA/GMMA counts, no families, no tensor ops, no pred_on)."""
    raw = raw_csv("bf16", "sample")
    older = [
        "thread_inst_ffma",
        "thread_inst_fadd",
        "thread_inst_fmul",
        "tensor_hmma_instructions",
        "tensor_gmma_instructions",
        "thread_instructions",
        "inst_global",
        "kernel_class",
    ]
    mix = instructions.kernel_mix(tidy_small("bf16", "sample")[older])
    total = raw["smsp__thread_inst_executed.sum"]  # also counts predicated-off threads
    fp32_arith = sum(family(raw, op) for op in ("ffma", "fadd", "fmul"))
    assert mix["mix_total"].to_numpy() == pytest.approx(total.to_numpy())
    assert mix["mix_fp32_arith"].to_numpy() == pytest.approx(fp32_arith.to_numpy())
    # Tensor math cannot be told from HFMA2.MMA moves without the tensor-op counters: it is not split.
    for category in ("tensor", "fp16_bf16", "integer", "memory", "control", "conversion", "other"):
        assert (mix[f"mix_{category}"] == 0).all(), category
    assert mix["mix_not_split"].to_numpy() == pytest.approx((total - fp32_arith).to_numpy())
    assert set(mix["mix_total_metric"]) == {instructions.TOTAL_ALL_THREADS}


def test_instruction_mix_of_the_one_pass_training_set_is_not_split() -> None:
    raw, tidy = raw_csv("bf16", "train"), tidy_small("bf16", "train")
    mix = instructions.kernel_mix(tidy)
    assert mix["mix_not_split"].to_numpy() == pytest.approx(raw["smsp__thread_inst_executed.sum"].to_numpy())
    assert (mix[[f"mix_{c}" for c in instructions.CATEGORY_NAMES if c != "not_split"]] == 0).all().all()
    # No thread-instruction counter at all: no mix, and a class with such a kernel sums to unknown.
    bare = tidy.drop(columns=["thread_instructions"])
    assert instructions.kernel_mix(bare)["mix_not_split"].isna().all()
    assert instructions.mix_by_class(bare)["mix_total"].isna().all()


def test_a_byte_order_mark_before_the_header_is_not_part_of_it(tmp_path):
    """Some editors and spreadsheet programs write a UTF-8 byte-order mark first: the pages read as without it
    (before, the raw page was called headerless and nsys's Time (%) column was not found)."""
    bom = "\ufeff"
    raw = H200_RAW.read_text()
    pd.testing.assert_frame_equal(ncu.parse_raw(bom + raw), ncu.parse_raw(raw))
    details = (FIXTURES / "ncu_details_h200_tiny_train_step.csv").read_text()
    assert ncu.page_kernels(bom + details, "details") == ncu.page_kernels(details, "details")
    for path in NSYS_KERN_SUM:
        marked = tmp_path / path.name
        marked.write_text(bom + path.read_text())
        with_mark, without = nsys.parse_kern_sum(marked), nsys.parse_kern_sum(path)
        pd.testing.assert_frame_equal(with_mark, without)
        assert with_mark["time_pct"].notna().all()
    summary = tmp_path / "ncu_summary.csv"
    summary.write_text(bom + "source,kernel_class,kernels\nncu,all,3\n")
    assert list(tables.load_csv(summary).columns) == ["source", "kernel_class", "kernels"]


def test_a_summary_carries_its_profiled_steps_conditions_in_its_total_row() -> None:
    """tables.with_conditions: the "all" row holds the step's wall time, the other load, the speed probe's mean and
    what changed; the class rows hold none of them, and the summary still adds up."""
    summary = tables.summarise(small_run())
    record = {"wall_ms": 812.5, "other_load_cores": 0.25, "before": {"speed_probe_ms": 9.0},
              "after": {"speed_probe_ms": 11.0}, "changes": ["the CPU set changed from [0, 1] to [0]"]}
    summary = tables.with_conditions(summary, record)
    total = summary[summary["kernel_class"] == "all"].iloc[0]
    assert (total["profiled_wall_ms"], total["other_load_cores"], total["speed_probe_ms"]) == (812.5, 0.25, 10.0)
    assert total["condition_changes"] == "the CPU set changed from [0, 1] to [0]"
    assert summary.loc[summary["kernel_class"] != "all", "other_load_cores"].isna().all()
    assert tables.summary_problem(summary) is None
    assert list(summary.columns) == tables.SUMMARY_COLUMNS
