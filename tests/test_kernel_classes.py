"""Kernel classes checked against decisions written down by hand for every kernel name of the real H200 exports.

tests/fixtures/profiling/kernel_classes_h200.csv lists each distinct kernel name (full name: casts and permute copies
share a short name) found in the H200 exports of this repository, with the export it was first found in and the
class decided by reading the name (and, for the few unclear ones, its neighbours in the launch sequence). Shares are
then checked against sums over the raw exports done here with plain name matching, without the classifier.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

from profiling import kernels

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "profiling"
DECISIONS = pd.read_csv(FIXTURES / "kernel_classes_h200.csv", keep_default_na=False)
SMALL = FIXTURES / "h200_small"
H200 = ROOT / "data" / "reference" / "wholehead" / "h200"
# The real exports whose names the decision table must cover.
EXPORTS = sorted(SMALL.glob("*/*/*.gz")) + sorted((FIXTURES / "h200_set_full").glob("ncu_raw*.csv.gz")) + [
    *sorted(H200.glob("*/profile/*/ncu_raw*.csv.gz")),
    *sorted(H200.glob("*/profile/*/torch_trace.json.gz")),
    FIXTURES / "ncu_raw_h200_tiny_train_step.csv",
    FIXTURES / "ncu_raw_h200_tiny_train_step_pushpop.csv",
    FIXTURES / "torch_trace_h200_tiny_train_step.json",
]


def _text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode()


@cache
def launches(path: Path) -> pd.DataFrame:
    """(name, duration) of every kernel launch of an export, read with the csv/json modules only.

    ncu raw page: "Kernel Name" and gpu__time_duration.sum (units row checked to be ns). torch.profiler trace: the
    complete events of category "kernel", in start order.
    """
    text = _text(path)
    if ".json" in path.name:
        events = json.loads(text)["traceEvents"]
        kernel_events = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
        rows = [(e["name"], float(e["dur"]) * 1e3) for e in sorted(kernel_events, key=lambda e: e["ts"])]
        return pd.DataFrame(rows, columns=["name", "duration_ns"])
    rows = list(csv.reader(io.StringIO(text)))
    header, units = rows[0], rows[1]
    name, duration = header.index("Kernel Name"), header.index("gpu__time_duration.sum")
    assert units[duration] == "ns", path
    return pd.DataFrame(
        [(row[name], float(row[duration].replace(",", ""))) for row in rows[2:]], columns=["name", "duration_ns"]
    )


def test_decision_table_is_well_formed():
    assert list(DECISIONS.columns) == ["kernel_class", "export", "note", "name"]
    assert DECISIONS["name"].is_unique
    assert set(DECISIONS["kernel_class"]) <= set(kernels.CLASS_NAMES)
    # Every class that the workload's kernels can fall in is decided for some real name.
    assert set(DECISIONS["kernel_class"]) == set(kernels.CLASS_NAMES)


def test_each_real_kernel_name_gets_the_decided_class():
    # One test over the whole table (about 1,600 names): every disagreement is listed with its row, the decided
    # class and the classifier's, so a failure names each kernel as a test per row would, without 1,600 items.
    given = DECISIONS["name"].map(kernels.classify)
    wrong = DECISIONS.assign(classified=given)[given != DECISIONS["kernel_class"]]
    assert wrong.empty, "\n".join(
        f"row {row.Index}: {row.name[:120]} decided {row.kernel_class}, classified {row.classified}"
        for row in wrong.itertuples()
    )


def test_decision_table_covers_every_kernel_of_the_real_exports_and_names_where_each_came_from():
    decided = set(DECISIONS["name"])
    missing = {}
    for path in EXPORTS:
        names = set(launches(path)["name"])
        if names - decided:
            missing[path.name] = sorted(names - decided)[:3]
    assert not missing
    for export, group in DECISIONS.groupby("export"):
        assert set(group["name"]) <= set(launches(ROOT / export)["name"]), export


def test_both_spellings_of_one_kernel_get_one_class():
    """ncu's CSV and torch.profiler name the same launches differently; the classes must agree launch by launch."""
    for step in ("bf16/train", "bf16_channels_last/train", "bf16/sample"):
        by_ncu = launches(SMALL / step / "ncu_raw.csv.gz")["name"]
        by_torch = launches(SMALL / step / "torch_trace.json.gz")["name"]
        assert len(by_ncu) == len(by_torch)
        assert list(by_ncu.map(kernels.short_name)) == list(by_torch.map(kernels.short_name)), step
        assert list(by_ncu.map(kernels.classify)) == list(by_torch.map(kernels.classify)), step


# Rules that the real exports exercise in one spelling or not at all, on names built from PyTorch's templates as
# both tools print them (CUDALoops.cuh: contiguous inputs go through vectorized_elementwise_kernel, or
# unrolled_elementwise_kernel when misaligned; strided ones through elementwise_kernel; casts through LoadWithCast or
# the strided gpu_kernel_impl; Copy.cu: bfloat16/float16_copy_kernel_cuda for float -> bf16/fp16).
_COPY_TORCH = (
    "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
    "{lambda()#7}::operator()() const::{lambda(float)#1}"
)
_COPY_NCU = (
    "at::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::"
    "[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)]"
)
CONSTRUCTED = [
    # contiguous same-dtype copy: neither a cast nor a re-layout
    (f"void at::native::vectorized_elementwise_kernel<4, {_COPY_TORCH}, std::array<char*, 2ul> >(int, "
     f"{_COPY_TORCH}, std::array<char*, 2ul>)", "elementwise"),
    (f"void at::vectorized_elementwise_kernel<4, {_COPY_NCU}, std::array<char *, 2>>(int, T2, T3)", "elementwise"),
    (f"void at::native::unrolled_elementwise_kernel<{_COPY_TORCH}, std::array<char*, 2ul>, 4, "
     "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
     "at::native::memory::LoadWithoutCast, at::native::memory::StoreWithoutCast>(int)", "elementwise"),
    # strided copy through the casting path: a cast (that also permutes)
    (f"void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<{_COPY_TORCH}>"
     f"(at::TensorIteratorBase&, {_COPY_TORCH} const&)::{{lambda(int)#2}}>(int)", "dtype_cast"),
    (f"void at::elementwise_kernel<128, 4, void at::gpu_kernel_impl<{_COPY_NCU}>(at::TensorIteratorBase &, "
     "const T1 &)::[lambda(int) (instance 2)]>(int, T3)", "dtype_cast"),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::float16_copy_kernel_cuda(at::TensorIteratorBase&)"
     "::{lambda(float)#1}, std::array<char*, 2ul> >(int)", "dtype_cast"),
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
     "bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}>(at::TensorIteratorBase&)>(int)",
     "dtype_cast"),
    # GroupNorm's gradient kernel under its second name; cuDNN channel padding removed again
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel<float, float>(long, long, float const*)",
     "normalization"),
    ("void nhwcRemovePaddingKernel<float, float, float, true, (cudnnKernelDataType_t)0>(int)", "layout_conversion"),
]


@pytest.mark.parametrize(("name", "expected"), CONSTRUCTED, ids=[f"constructed-{i}" for i in range(len(CONSTRUCTED))])
def test_rules_without_a_real_example(name, expected):
    assert kernels.classify(name) == expected


def test_bf16_names_are_tagged_bf16():
    bf16 = DECISIONS[DECISIONS["name"].str.contains("__nv_bfloat16|c10::BFloat16|bf16bf16", regex=True)]
    assert len(bf16) > 20
    assert bf16["name"].map(kernels.precision_tag).eq("bf16").all()


# --- class time shares of real steps, computed here by plain name matching -----------------------------------

GROUPNORM = (
    "GroupNorm",  # GroupNormKernelImplInternal / GroupNormBackwardKernelImplInternal elementwise kernels
    "RowwiseMomentsCUDAKernel",
    "ComputeFusedParamsCUDAKernel",
    "ComputeBackwardFusedParamsCUDAKernel",
    "ComputeInternalGradientsCUDAKernel",
    "GammaBetaBackwardCUDAKernel",
)


def _share(step: pd.DataFrame, selected: pd.Series) -> float:
    return step.loc[selected, "duration_ns"].sum() / step["duration_ns"].sum()


def _is_cast(name: str) -> bool:
    return "LoadWithCast" in name or "bfloat16_copy_kernel_cuda" in name


def _is_relayout(name: str) -> bool:
    short = kernels.short_name(name)
    cudnn = short in {"nchwToNhwcKernel", "nhwcToNchwKernel", "tensorTransformGeneric", "convertTensor_kernel",
                      "nhwcAddPaddingKernel"}
    permute = short == "elementwise_kernel" and "gpu_kernel_impl_nocast" in name and "direct_copy_kernel_cuda" in name
    return cudnn or permute


def _class_shares(step: pd.DataFrame) -> pd.Series:
    """Time share per class that kernels.classify gives the launches (the tables' summaries add these up alike)."""
    return step.groupby(step["name"].map(kernels.classify))["duration_ns"].sum() / step["duration_ns"].sum()


@pytest.mark.parametrize("export", ["ncu_raw.csv.gz", "torch_trace.json.gz"])
def test_groupnorm_is_a_quarter_of_the_shipped_tf32_training_step(export):
    path = H200 / "tf32" / "profile" / "train" / export
    step = launches(path)
    groupnorm = _share(step, step["name"].map(lambda n: any(token in n for token in GROUPNORM)))
    assert 0.24 < groupnorm < 0.27  # forward and backward of every GroupNorm of two micro-batches
    backward = step["name"].map(
        lambda n: any(token in n for token in GROUPNORM) and ("Backward" in n or "ComputeInternalGradients" in n)
    )
    assert _share(step, backward) > 0.08  # the part the reference class table left in other and elementwise
    shares = _class_shares(step)
    assert shares["normalization"] == pytest.approx(groupnorm, abs=1e-9)  # the model has no other normalisation
    assert shares["other"] < 0.03


@pytest.mark.parametrize(
    "export",
    ["bf16/train/ncu_raw.csv.gz", "bf16/train/torch_trace.json.gz", "bf16_channels_last/train/ncu_raw.csv.gz",
     "bf16_channels_last/train/torch_trace.json.gz", "bf16/sample/ncu_raw.csv.gz"],
)
def test_casts_and_true_relayouts_of_the_bf16_steps(export):
    path = SMALL / export
    step = launches(path)
    casts = _share(step, step["name"].map(_is_cast))
    relayouts = _share(step, step["name"].map(_is_relayout))
    shares = _class_shares(step)
    assert shares["dtype_cast"] == pytest.approx(casts, abs=1e-9)
    assert shares["layout_conversion"] == pytest.approx(relayouts, abs=1e-9)
    # bf16 autocast casts every GroupNorm input to float32 and every convolution input back to bf16.
    assert casts > 0.13 and relayouts > 0.08


def test_tf32_channels_last_step_relayouts_are_permute_copies_and_cudnn_transposes():
    path = H200 / "tf32_channels_last" / "profile" / "train" / "ncu_raw.csv.gz"
    step = launches(path)
    relayouts = _share(step, step["name"].map(_is_relayout))
    permutes = _share(step, step["name"].str.contains("gpu_kernel_impl_nocast<at::direct_copy_kernel_cuda"))
    assert relayouts == pytest.approx(_class_shares(step)["layout_conversion"], abs=1e-9)
    assert 0.25 < permutes < relayouts < 0.35  # GroupNorm is not channels-last-native: PyTorch permutes around it
    assert _share(step, step["name"].map(_is_cast)) < 1e-3


def _is_compiled_groupnorm(name: str) -> bool:
    """An inductor kernel that computes GroupNorm: its operators named, its statistics, or GroupNorm + SiLU written
    out (SiLU fused with a mean subtraction)."""
    if not name.startswith("triton_"):
        return False
    return "group_norm" in name or "var_mean" in name or ("silu" in name and "_sub_" in name + "_")


def test_compiled_frontier_step_spends_a_quarter_in_cudnn_transposes_and_no_time_in_other_casts():
    step = launches(H200 / "frontier" / "profile" / "train" / "torch_trace.json.gz")
    shares = _class_shares(step)
    transposes = _share(step, step["name"].str.contains("nchwToNhwcKernel|nhwcToNchwKernel"))
    assert shares["layout_conversion"] == pytest.approx(_share(step, step["name"].map(_is_relayout)), abs=1e-9)
    # The contiguous bf16 graph converts in and out of cuDNN's NDHWC around each convolution (23 % of the step).
    assert 0.20 < transposes < shares["layout_conversion"] < 0.25
    groupnorm = _share(step, step["name"].map(lambda n: _is_compiled_groupnorm(n) or any(t in n for t in GROUPNORM)))
    assert shares["normalization"] == pytest.approx(groupnorm, abs=1e-9)
    assert 0.15 < groupnorm < 0.25
    upsampling_or_softmax = _share(step, step["name"].str.contains("_unsafe_index|_softmax|arange_clamp"))
    assert upsampling_or_softmax > 0.05 and shares["other"] < upsampling_or_softmax + 0.005


def test_fused_norm_act_kernels_are_normalization_in_the_eager_channels_last_step():
    step = launches(H200 / "bf16_channels_last_fused" / "profile" / "train" / "torch_trace.json.gz")
    shares = _class_shares(step)
    fused = _share(step, step["name"].map(_is_compiled_groupnorm))
    eager_groupnorm = _share(step, step["name"].map(lambda n: any(t in n for t in GROUPNORM)))
    assert shares["normalization"] == pytest.approx(fused + eager_groupnorm, abs=1e-9)
    assert fused > 0.25 and eager_groupnorm < 0.01  # the GroupNorm + SiLU pairs run as compiled kernels
    assert shares["other"] < 0.06  # trilinear upsampling, softmax and concatenation remain
