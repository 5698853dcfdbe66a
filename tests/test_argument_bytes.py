"""Argument bytes (profiling.argument_bytes): the memory floor of a step from the tensor shapes torch.profiler recorded,
read from the shipped H200 traces: frontier_ndhwc's 128^3 training step (recorded with shapes, every kernel launched
by its operator) and frontier_graphed's (the same compiled step replayed from a CUDA graph)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from profiling import argument_bytes
from profiling.errors import ProfilingError

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "data" / "reference" / "wholehead" / "h200"
NDHWC = H200 / "frontier_ndhwc" / "profile" / "train"
GRAPHED = H200 / "frontier_graphed" / "profile" / "train"
COPY = json.loads((H200 / "device_rates.json").read_text())["copy_gb_per_s"]
PARAMETERS = 40_226_433  # the whole-head U-Net's parameters (shared/reference: Med-DDPM facts)


@pytest.fixture(scope="module")
def step() -> pd.DataFrame:
    return argument_bytes.read_launches(NDHWC / "torch_trace.json.gz")


def test_every_kernel_of_the_trace_is_one_launch_in_the_kernel_tables_order(step):
    shipped = pd.read_parquet(NDHWC / "torch_kernels.parquet")
    assert len(step) == len(shipped) == 2505
    assert step["name"].tolist() == shipped["name"].tolist()
    assert step["kernel_class"].tolist() == shipped["kernel_class"].tolist()
    assert step["duration_ns"].to_numpy() == pytest.approx(shipped["duration_ns"].to_numpy(), rel=1e-9)


def test_the_accumulated_gradients_adds_move_both_gradients_of_every_parameter(step):
    """The 246 in-place adds of the second micro-batch's float32 gradients to the first's, one per parameter tensor:
    each reads its two gradients (and writes the first in place), so together 2 x 4 bytes per parameter."""
    adds = step[step["operator"] == "aten::add_"]
    assert len(adds) == 246 and adds["counts_output"].all()
    assert adds["argument_bytes"].sum() == 2 * 4 * PARAMETERS


def test_an_inductor_kernel_counts_its_tensors_no_larger_than_its_iteration_space(step):
    """The fused residual add at 128 channels of 128^3 is handed two bfloat16 activations and iterates over all of
    one; the bias-gradient reduction is handed the whole 128-channel gradient but iterates over 64 channels of it
    (xnumel 65,536 x r0_numel 2,048), beside its 64 x 1,024 float32 partial sums."""
    add = step[step["name"] == "triton_poi_fused_add_7"]
    assert len(add) == 4 and (add["argument_bytes"] == 2 * 2 * 128 * 128**3).all()
    sliced = step[step["name"] == "triton_red_fused_add_convolution_backward_slice_42"]
    assert len(sliced) == 4 and (sliced["argument_bytes"] == 2 * 65_536 * 2_048 + 4 * 64 * 1_024).all()
    assert step[step["name"].str.startswith("triton_")]["counts_output"].all()


def test_a_broadcast_dimension_adds_no_elements():
    expanded = {"name": "aten::div", "args": {"Input type": ["float", "float"],
                                               "Input Dims": [[1, 1, 128, 128, 128], [1, 1, 128, 128, 128]],
                                               "Input Strides": [[2097152, 2097152, 16384, 128, 1], [0, 0, 0, 0, 0]],
                                               "Concrete Inputs": ["", ""]}}
    assert argument_bytes.operator_bytes(expanded) == 4 * 128**3 + 4


def test_kernels_sharing_an_operator_or_handed_a_tensor_list_have_no_argument_bytes(step):
    shared = step[step["operator_kernels"] > 1]
    assert shared["argument_bytes"].isna().all() and (shared["unattributed"] == argument_bytes.SHARED).all()
    assert set(shared["operator"]) >= {"aten::convolution_backward", "medddpm::group_norm_silu_ndhwc_forward",
                                       "medddpm::group_norm_silu_ndhwc_backward", "aten::_fused_adam_"}
    norm = step[step["operator"].str.startswith("medddpm::group_norm_silu_ndhwc")]
    assert len(norm) == 420 and norm["argument_bytes"].isna().all()
    assert {"aten::_foreach_add_", "aten::_foreach_mul_"} <= set(shared["operator"])  # the EMA's updates
    # The one kernel of a tensor list's operator: the noisy volume and its two mask channels concatenated.
    lists = step[step["unattributed"] == argument_bytes.UNTYPED]
    assert set(lists["operator"]) == {"aten::cat"} and len(lists) == 2
    assert lists["argument_bytes"].isna().all() and (lists["operator_kernels"] == 1).all()
    # Every other launch has its bytes.
    assert (step["argument_bytes"].notna() == (step["unattributed"] == "")).all()
    assert not (step["unattributed"] == argument_bytes.NO_OPERATOR).any()


def test_no_floor_exceeds_its_time_and_no_kernel_beats_the_copy_by_much(step):
    """Each launch's floor is at most its time; the kernels that moved their argument bytes faster than the copy (the
    running step leaves some of a kernel's input in the 50 MB L2) do so by under 10 %. A kernel handed a whole
    activation of which it reads a slice would, counted whole, come out at twice the copy's rate."""
    floors = argument_bytes._floors(step, COPY)
    assert (floors["memory_floor_ns"] <= floors["duration_ns"]).all()
    fastest = (floors["argument_bytes"] / floors["duration_ns"]).max()
    assert COPY < fastest < 1.1 * COPY


def test_the_class_floors_add_up_to_the_step(step):
    classes = argument_bytes.class_floors(step, COPY).set_index("kernel_class")
    total, parts = classes.loc["all"], classes.drop(index="all")
    for column in ("kernels", "time_ns", "attributed_kernels", "attributed_time_ns", "argument_bytes",
                   "memory_floor_ns", "beyond_copy_kernels"):
        assert parts[column].sum() == pytest.approx(total[column]), column
    assert total["time_ns"] == pytest.approx(step["duration_ns"].sum())
    assert (parts["memory_floor_ns"] <= parts["attributed_time_ns"]).all()
    # The step's element-wise kernels: every one attributed, 1.5 times their floor (H200 README, item 3).
    elementwise = classes.loc["elementwise"]
    assert elementwise["attributed_kernels"] == elementwise["kernels"] == 618
    assert elementwise["time_over_floor"] == pytest.approx(1.48, abs=0.01)


def test_the_kernel_list_leaves_the_arithmetic_classes_out_and_ranks_by_time_above_floor(step):
    kernels = argument_bytes.kernel_floors(step, COPY)
    assert not kernels["kernel_class"].isin(argument_bytes.ARITHMETIC_CLASSES).any()
    assert kernels["above_floor_ns"].is_monotonic_decreasing
    first = kernels.iloc[0]
    assert (first["operator"], first["kernel_class"], first["kernels"]) == ("aten::copy_", "layout_conversion", 50)


def test_a_graph_replay_attributes_only_what_runs_outside_the_graph():
    replay = argument_bytes.read_launches(GRAPHED / "torch_trace.json.gz")
    assert len(replay) == 2527
    outside = replay[replay["argument_bytes"].notna()]
    assert set(outside["operator"]) == {"aten::copy_", "aten::normal_", "aten::random_"}
    assert len(outside) == 6


def test_a_trace_without_shapes_or_cut_short_is_refused_in_one_line(tmp_path):
    events = json.loads(gzip.decompress((NDHWC / "torch_trace.json.gz").read_bytes()))
    for event in events["traceEvents"]:
        event.get("args", {}).pop("Input Dims", None)
    bare = tmp_path / "torch_trace.json"
    bare.write_text(json.dumps(events))
    with pytest.raises(ProfilingError, match="no operator recorded its tensors' shapes") as refused:
        argument_bytes.read_launches(bare)
    assert str(bare) in str(refused.value) and "\n" not in str(refused.value)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes((NDHWC / "torch_trace.json.gz").read_bytes()[:50_000])
    with pytest.raises(ProfilingError, match="not a whole gzip file") as refused:
        argument_bytes.read_launches(cut)
    assert str(cut) in str(refused.value) and "\n" not in str(refused.value)


def test_an_unmeasured_copy_bandwidth_is_refused(step):
    with pytest.raises(ProfilingError, match="no measured bandwidth"):
        argument_bytes.class_floors(step, math.nan)


def test_the_command_prints_the_class_table_and_the_kernels_above_their_floors(capsys):
    argument_bytes.main([str(NDHWC / "torch_trace.json.gz"), str(H200 / "device_rates.json"), "--kernels", "2"])
    printed = capsys.readouterr().out
    assert "| elementwise | 618 | 8.25 | 618 | 8.25 | 23.74 | 5.57 | 2.88 (11 beyond the copy) | 1.5 |" in printed
    copies = "| elementwise_kernel (aten::copy_) | layout_conversion | 50 | 3.142 | 5.118 | 1.205 | 1.63 | 2.61 |"
    assert copies in printed
    assert "| triton_poi_fused_add_7 | elementwise | 4 | 1.464 | 4.295 | 1.012 | 2.93 | 1.45 |" in printed
    listed = printed.split("Memory-bound kernels")[1].splitlines()
    assert len([line for line in listed if line.startswith("| ")]) == 1 + 2  # its header and two kernels
