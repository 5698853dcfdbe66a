"""The memory floor (profiling.memory_floor): its arithmetic on a hand-made step whose numbers are written down here,
and its reading of the shipped H200 Nsight Compute exports, checked against the raw exports themselves.

Which shipped exports hold DRAM bytes: the four sampling steps (baseline, tf32, channels_last, tf32_channels_last;
the full metric set). No training step does: they were profiled with the one-pass set (config/ncu-metrics.yaml's
train_one_pass), frontier_graphed's among them, and have no memory floor."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from profiling import memory_floor
from profiling.kernels import CLASS_NAMES

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "data" / "reference" / "wholehead" / "h200"
RATES = json.loads((H200 / "device_rates.json").read_text())
COPY, BF16 = RATES["copy_gb_per_s"], RATES["bf16_matmul_tflops"]
WITH_BYTES = ["baseline", "tf32", "channels_last", "tf32_channels_last"]


def kernels_of(variant: str, phase: str) -> pd.DataFrame:
    return pd.read_parquet(H200 / variant / "profile" / phase / "ncu_kernels.parquet")


def raw_page(variant: str, phase: str) -> tuple[list[str], list[str], list[list[str]]]:
    """(header, units, kernel rows) of a shipped raw export, read with the csv module alone."""
    text = gzip.decompress((H200 / variant / "profile" / phase / "ncu_raw.csv.gz").read_bytes()).decode()
    rows = list(csv.reader(io.StringIO("".join(line for line in io.StringIO(text) if not line.startswith("==")))))
    return rows[0], rows[1], rows[2:]


def number(text: str) -> float:
    return float(text.replace(",", ""))


# -- the arithmetic, on a step of four launches -------------------------------------------------------------------
# Copy bandwidth 1 GB/s: one byte per ns. bf16 rate 2 TFLOP/s: 2,000 FLOP per ns.
HAND_COPY, HAND_BF16 = 1.0, 2.0


def hand_made() -> pd.DataFrame:
    return pd.DataFrame({
        "source": "ncu", "launch": range(4), "instances": 1,
        "name": ["conv", "norm_a", "norm_b", "add"], "short_name": ["conv", "norm", "norm", "add"],
        "kernel_class": ["conv_fprop", "normalization", "normalization", "elementwise"],
        "precision": ["bf16", "fp32", "fp32", "fp32"],
        "duration_ns": [10_000.0, 4_000.0, 2_000.0, 1_500.0],
        "dram_read_bytes": [600.0, 1_500.0, 800.0, 2_000.0],
        "dram_write_bytes": [400.0, 500.0, 200.0, 1_000.0],
        # The convolution: 8e6 FLOP (4,000 ns at the bf16 rate), against 1,000 bytes (1,000 ns at the copy's rate).
        "tensor_flop": [8e6, 0.0, 0.0, 0.0], "fp32_flop": [0.0, 2e5, 1e5, 1e4],
        "launch_grid_size": [64.0, 32.0, 32.0, 128.0], "launch_block_size": [256.0, 512.0, 512.0, 128.0],
    })


def test_the_floors_of_a_hand_made_step():
    rows = memory_floor.class_floors(hand_made(), HAND_COPY, HAND_BF16).set_index("kernel_class")
    assert list(rows.index) == ["conv_fprop", "normalization", "elementwise", "all"]
    conv, norm, add, step = (rows.loc[c] for c in ("conv_fprop", "normalization", "elementwise", "all"))
    # The convolution: the FLOP floor (4,000 ns) binds, against its 1,000 ns memory floor.
    assert (conv["dram_bytes"], conv["memory_floor_ns"], conv["flop_floor_ns"]) == (1_000, 1_000, 4_000)
    assert (conv["limit_ns"], conv["time_over_limit"], conv["binding"]) == (4_000, 2.5, "flop")
    # The two norm launches: 2,000 + 1,000 bytes in 6,000 ns, 0.5 bytes per ns (0.5 GB/s), twice their floor.
    assert (norm["kernels"], norm["dram_bytes"], norm["memory_floor_ns"]) == (2, 3_000, 3_000)
    assert (norm["achieved_gb_per_s"], norm["time_over_memory_floor"], norm["binding"]) == (0.5, 2.0, "memory")
    assert norm["flop_floor_ns"] == pytest.approx(150)  # 3e5 FP32 FLOP
    # The add moved 3,000 bytes in 1,500 ns, twice the copy's rate: at its limit, its floor its own time.
    assert (add["memory_floor_ns"], add["beyond_copy_kernels"], add["time_over_memory_floor"]) == (1_500, 1, 1.0)
    assert (add["achieved_gb_per_s"], add["limit_ns"]) == (2.0, 1_500)
    # The step: 17,500 ns against 5,500 ns of memory floors and 8,500 ns of limits (4,000 + 3,000 + 1,500).
    assert (step["kernels"], step["time_ns"], step["dram_bytes"]) == (4, 17_500, 7_000)
    assert (step["memory_floor_ns"], step["limit_ns"], step["beyond_copy_kernels"]) == (5_500, 8_500, 1)
    assert step["flop_floor_ns"] == pytest.approx(4_000 + 155)
    assert step["binding"] == "memory"  # 4,500 ns of the limits are memory floors, 4,000 the convolution's FLOPs


def test_a_tensor_kernel_without_tensor_counts_has_its_memory_floor_for_a_limit():
    kernels = hand_made().assign(tensor_flop=float("nan"))  # the tensor-op counters not collected
    conv = memory_floor.class_floors(kernels, HAND_COPY, HAND_BF16).set_index("kernel_class").loc["conv_fprop"]
    assert math.isnan(conv["flop"]) and math.isnan(conv["flop_floor_ns"])
    assert (conv["limit_ns"], conv["binding"]) == (1_000, memory_floor.UNCOUNTED)


def test_the_norm_sites_of_a_hand_made_step():
    kernels = pd.concat([hand_made(), hand_made().iloc[[1, 1, 2]].assign(
        launch=[4, 5, 6], dram_read_bytes=[1_550.0, 3_000.0, 790.0])], ignore_index=True)
    # norm with 2,000, 2,050 (within 10 %) and 3,500 bytes; 1,000 and 990 bytes: three sites of one name and launch.
    sites = memory_floor.norm_sites(kernels, HAND_COPY)
    assert sorted(sites["kernels"]) == [1, 2, 2]
    assert sorted(sites["dram_bytes"]) == [1_990, 3_500, 4_050]
    assert sites["time_ns"].sum() == 4_000 * 3 + 2_000 * 2  # every normalization launch once
    assert set(sites["short_name"]) == {"norm"} and set(sites["grid_size"]) == {32}


def test_a_step_without_a_floor_says_why():
    assert memory_floor.reason(None, COPY) == memory_floor.NO_EXPORT
    assert memory_floor.reason(hand_made().iloc[:0], COPY) == memory_floor.NO_EXPORT
    assert memory_floor.reason(hand_made().drop(columns=["dram_write_bytes"]), COPY) == memory_floor.NO_DRAM_BYTES
    assert memory_floor.reason(hand_made(), None) == memory_floor.NO_COPY_BANDWIDTH
    one_gap = hand_made()
    one_gap.loc[2, "dram_read_bytes"] = float("nan")
    assert memory_floor.reason(one_gap, COPY) == ("no memory floor: 1 of its 4 kernels have no DRAM bytes in its "
                                                  "Nsight Compute export")
    with pytest.raises(ValueError, match="no DRAM bytes"):
        memory_floor.class_floors(hand_made().drop(columns=list(memory_floor.BYTES_COLUMNS)), COPY, BF16)


# -- the shipped H200 exports -------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", WITH_BYTES)
def test_the_classes_bytes_are_the_raw_exports_dram_bytes(variant):
    """Every byte of the step's raw export (dram__bytes_read.sum + dram__bytes_write.sum, in the unit its units row
    names) in exactly one class, and the classes' times the export's durations."""
    header, units, rows = raw_page(variant, "sample")
    read, write, duration = (header.index(m) for m in ("dram__bytes_read.sum", "dram__bytes_write.sum",
                                                        "gpu__time_duration.sum"))
    assert (units[read], units[write], units[duration]) == ("byte", "byte", "ns")
    step_bytes = sum(number(row[read]) + number(row[write]) for row in rows)
    step_ns = sum(number(row[duration]) for row in rows)
    floors = memory_floor.class_floors(kernels_of(variant, "sample"), COPY, BF16).set_index("kernel_class")
    classes = floors.drop(index="all")
    assert set(classes.index) <= set(CLASS_NAMES)
    assert classes["dram_bytes"].sum() == pytest.approx(step_bytes, rel=1e-12)
    assert floors.loc["all", "dram_bytes"] == pytest.approx(step_bytes, rel=1e-12)
    assert classes["kernels"].sum() == len(rows) == floors.loc["all", "kernels"]
    assert classes["time_ns"].sum() == pytest.approx(step_ns, rel=1e-12)
    assert 50e9 < step_bytes < 200e9  # tens of GB per 128^3 U-Net evaluation: bytes, not kilobytes or bits


@pytest.mark.parametrize("variant", WITH_BYTES)
def test_no_class_beats_its_floor_and_no_kernel_beats_the_copy_by_much(variant):
    """Every class's measured time is at least its memory floor and its limit. A kernel cannot move DRAM much faster
    than a device-to-device copy: on these steps the fastest did 3 % better (large element-wise kernels of 1.6 GB
    under a cold L2, against the copy's 2 GiB through PyTorch), and the floor of each such kernel is its time."""
    kernels = kernels_of(variant, "sample")
    moved = kernels["dram_read_bytes"] + kernels["dram_write_bytes"]
    rate = moved / kernels["duration_ns"]  # bytes per ns = GB/s
    assert rate.max() < 1.03 * COPY  # docs/profiling.md: by up to 3 %
    floors = memory_floor.class_floors(kernels, COPY, BF16)
    assert (floors["memory_floor_ns"] <= floors["time_ns"]).all()
    assert (floors["limit_ns"] <= floors["time_ns"]).all()
    beyond = kernels[rate > COPY]
    assert 3 <= len(beyond) <= 5
    assert set(beyond["short_name"]) <= {"vectorized_elementwise_kernel", "Kernel2"}  # Kernel2: a cuBLAS GEMM
    assert floors.set_index("kernel_class").loc["all", "beyond_copy_kernels"] == len(beyond)
    per_kernel = memory_floor.kernel_floors(kernels, COPY, BF16)
    assert (per_kernel.loc[beyond.index, "memory_floor_ns"] == beyond["duration_ns"]).all()


def test_the_tf32_sampling_steps_floors_as_the_h200_record_states_them():
    """The numbers data/reference/wholehead/h200/README.md quotes from `python3 -m profiling.memory_floor`."""
    floors = memory_floor.class_floors(kernels_of("tf32", "sample"), COPY, BF16).set_index("kernel_class")
    assert floors.loc["all", "time_ns"] / 1e6 == pytest.approx(86.86, abs=0.01)
    assert floors.loc["all", "memory_floor_ns"] / 1e6 == pytest.approx(18.73, abs=0.01)
    assert floors.loc["normalization", "time_over_memory_floor"] == pytest.approx(9.9, abs=0.05)
    assert floors.loc["conv_fprop", "binding"] == "flop" and floors.loc["normalization", "binding"] == "memory"


@pytest.mark.parametrize("variant,phase", [(v, "sample") for v in WITH_BYTES] + [("frontier_graphed", "train"),
                                                                                   ("baseline", "train")])
def test_the_norm_sites_hold_every_normalization_kernel_once(variant, phase):
    kernels = kernels_of(variant, phase)
    site = memory_floor.site_of(kernels)
    norm = kernels["kernel_class"] == "normalization"
    assert site[norm].notna().all() and site[~norm].isna().all()
    sites = memory_floor.norm_sites(kernels, COPY)
    assert sites["kernels"].sum() == norm.sum()
    assert sites["time_ns"].sum() == pytest.approx(kernels.loc[norm, "duration_ns"].sum(), rel=1e-12)
    # One site, one name and launch configuration.
    for _, members in kernels[norm].groupby(site[norm]):
        assert members[["short_name", "launch_grid_size", "launch_block_size"]].drop_duplicates().shape[0] == 1


@pytest.mark.parametrize("variant", WITH_BYTES)
def test_a_norm_site_is_one_activation_size(variant):
    """Within a site the launches' bytes lie within 10 % of its smallest, and within 2 % where they are 1 MB or more
    (one activation size: the tolerance falls between sizes, not inside one); two sites of one name and launch
    configuration lie further apart (ATen's RowwiseMomentsCUDAKernel launches 32 blocks, one per group, at every
    size: only the bytes tell its sites apart)."""
    kernels = kernels_of(variant, "sample")
    norm = kernels[kernels["kernel_class"] == "normalization"]
    moved = norm["dram_read_bytes"] + norm["dram_write_bytes"]
    site = memory_floor.site_of(kernels)[norm.index]
    smallest = moved.groupby(site).min()
    assert (moved <= 1.1 * site.map(smallest)).all()
    large = site.map(smallest) >= 1e6
    assert (moved[large] <= 1.02 * site[large].map(smallest)).all()
    moments = site[norm["short_name"] == "RowwiseMomentsCUDAKernel"].unique()
    assert len(moments) >= 5
    sizes = sorted(smallest[moments])
    assert all(later > 1.1 * earlier for earlier, later in zip(sizes, sizes[1:]))


def test_the_training_exports_have_no_memory_floor_and_say_why():
    for variant in ("frontier_graphed", "baseline", "tf32", "frontier", "bf16_compile_tuned"):
        kernels = kernels_of(variant, "train")
        assert memory_floor.reason(kernels, COPY) == memory_floor.NO_DRAM_BYTES, variant
        with pytest.raises(ValueError, match="no memory floor"):
            memory_floor.class_floors(kernels, COPY, BF16)


def test_frontier_graphed_norm_sites_without_bytes_are_its_launch_configurations():
    """frontier_graphed's NDHWC norm kernels (the issue's 19.2 ms) by launch configuration, no bytes: its sums
    passes launch 1,024 programs at every size, so one site holds 36 launches of several sizes."""
    sites = memory_floor.norm_sites(kernels_of("frontier_graphed", "train"), COPY)
    ndhwc = sites[sites["short_name"].str.match(r"_(forward|backward)_")]
    assert ndhwc["time_ns"].sum() / 1e6 == pytest.approx(19.2, abs=0.05)
    assert sites["dram_bytes"].isna().all() and sites["memory_floor_ns"].isna().all()
    first = sites.iloc[0]
    assert (first["short_name"], first["grid_size"], first["kernels"]) == ("_backward_sums", 1024, 36)


def test_the_command_prints_both_tables(capsys):
    memory_floor.main([str(H200 / "tf32" / "profile" / "sample" / "ncu_kernels.parquet"),
                       str(H200 / "device_rates.json"), "--sites", "3"])
    printed = capsys.readouterr().out
    assert "| normalization | 117 | 38.44 | 16.46 | 3.88 | 0.43 | 9.9 |" in printed
    assert printed.count("| RowwiseMomentsCUDAKernel (grid 32, block 512) |") == 2
    memory_floor.main([str(H200 / "frontier_graphed" / "profile" / "train" / "ncu_kernels.parquet"),
                       str(H200 / "device_rates.json")])
    assert memory_floor.NO_DRAM_BYTES in capsys.readouterr().out


# -- where the reader finds it: tab07 on the shipped H200 set ------------------------------------------------------
@pytest.fixture(scope="module")
def h200_tables() -> dict[str, pd.DataFrame]:
    from planning.plan import SHIPPED_NAMES
    from reporting.results import collect

    return collect([], sorted(p for p in H200.rglob("*") if p.is_file() and p.name.endswith(SHIPPED_NAMES)))


def test_tab07_puts_the_memory_floor_beside_the_flop_floor(h200_tables):
    from config_settings import output_settings
    from reporting.registry import BY_ID
    from reporting.render import Job
    from reporting.results import Results
    from reporting.outputs import tab07_frontier

    output = BY_ID["tab07_frontier"]
    table = tab07_frontier.build(Job(output, Results.from_tables(h200_tables), {}, output_settings(output)))
    rows = table.frame.set_index("variant")
    # The FLOP floors bench.md states for the label (its header line), in every row.
    header = (H200 / "bench.md").read_text()
    assert "floors at the measured bf16 rate: 20.42 ms per training sample, 6.816 ms per U-Net evaluation" in header
    assert rows["train_flop_floor_ms_per_sample"].round(2).eq(20.42).all()
    assert rows["sample_flop_floor_ms"].round(3).eq(6.816).all()
    # The sampling steps of baseline and tf32 hold DRAM bytes: 15.81 and 18.73 ms of memory floor per evaluation, above
    # the FLOP floor (memory binds the sampling step), and below the step's time.
    assert rows.loc["baseline", "sample_memory_floor_ms"] == pytest.approx(15.81, abs=0.01)
    assert rows.loc["tf32", "sample_memory_floor_ms"] == pytest.approx(18.73, abs=0.01)
    assert rows.loc["tf32", "sample_kernel_limit_ms"] == pytest.approx(23.28, abs=0.01)
    for variant in ("baseline", "tf32"):
        assert rows.loc[variant, "sample_flop_floor_ms"] < rows.loc[variant, "sample_memory_floor_ms"] \
            < rows.loc[variant, "sample_kernel_limit_ms"] < rows.loc[variant, "sample_step_ms"]
        assert rows.loc[variant, "memory_floor_note"] == f"train: {memory_floor.NO_DRAM_BYTES}"
    # No training step has DRAM bytes; the rungs never profiled by Nsight Compute say so, not a blank or a zero.
    assert rows["train_memory_floor_ms_per_sample"].isna().all()
    assert rows.loc["frontier_graphed", "memory_floor_note"] == (f"train: {memory_floor.NO_DRAM_BYTES}; sample: "
                                                                  f"{memory_floor.NO_EXPORT}")
    assert rows.loc["bf16", "memory_floor_note"] == (f"train: {memory_floor.NO_EXPORT}; sample: "
                                                     f"{memory_floor.NO_EXPORT}")
    assert (rows["memory_floor_note"] != "").all()
    [note] = [n for n in table.notes if "without DRAM bytes" in n]
    assert note.startswith("h200: the training steps of baseline, tf32, bf16_compile_tuned, frontier, "
                           "frontier_graphed were profiled without DRAM bytes") and "train_memory_floor" in note


def test_fig11_marks_the_memory_floor_where_it_binds_and_fig10_draws_the_measured_copy(h200_tables):
    """On the shipped H200 set the sampling steps of baseline and tf32 have a memory floor above the FLOP floor: fig11
    marks it on their bars of the sampling panel (T evaluations of 15.81 and 18.73 ms); fig10 draws the copy
    bandwidth of device_rates.json beside the datasheet's DRAM slope."""
    import matplotlib.pyplot as plt
    from config_settings import output_settings
    from reporting.outputs import fig10_roofline, fig11_optimization_ladder
    from reporting.registry import BY_ID
    from reporting.render import Job
    from reporting.results import Results

    results = Results.from_tables(h200_tables)
    timesteps = json.loads((H200 / "baseline" / "sample.json").read_text())["timesteps"]
    output = BY_ID["fig11_optimization_ladder"]
    fig = fig11_optimization_ladder.build(Job(output, results, {}, output_settings(output)))
    try:
        [sample] = [ax for ax in fig.get_axes() if ax.get_title(loc="left") == "sampling per volume"]
        [train] = [ax for ax in fig.get_axes() if ax.get_title(loc="left") == "training per sample"]
        fig.canvas.draw()  # the shared y axis names the rungs on the leftmost panel once drawn
        names = [t.get_text() for t in train.get_yticklabels()]
        [diamonds] = sample.collections
        marked = {names[int(y)]: x for x, y in diamonds.get_offsets()}
        assert marked == pytest.approx({"baseline": 15.81 * timesteps / 1e3, "tf32": 18.73 * timesteps / 1e3},
                                       abs=0.01 * timesteps / 1e3)
        assert "memory floor" in sample.get_xlabel() and not train.collections  # no training step has DRAM bytes
    finally:
        plt.close(fig)
    output = BY_ID["fig10_roofline"]
    fig = fig10_roofline.build(Job(output, results, {"peaks": REPO / "data" / "gpu_peaks.yaml"},
                                   output_settings(output)))
    try:
        labels = [line.get_label() for ax in fig.get_axes() for line in ax.get_lines()]
        assert "copy 4246 GB/s, measured (slope)" in labels and "DRAM 4800 GB/s (slope)" in labels
    finally:
        plt.close(fig)


def test_fig11_says_which_sampling_steps_memory_bounds(h200_tables, tmp_path):
    from reporting.outputs import fig11_optimization_ladder
    from reporting.prose import Context, Inputs
    from reporting.derived import speedup_verdict
    from reporting.outputs.tab07_frontier import frontier_table

    (tmp_path / "paper" / "tables").mkdir(parents=True)
    frame, _ = frontier_table(h200_tables["bench"], h200_tables["runs"])
    frame.to_csv(tmp_path / "paper" / "tables" / "tab07_frontier.csv", index=False)
    said = fig11_optimization_ladder.describe(Context(Inputs(tmp_path), speedup_verdict))
    assert ("On h200 the memory floor of the sampling steps profiled with their DRAM bytes lies above the FLOP floor "
            "of 6.82 ms per U-Net evaluation, so the bytes moved, not the arithmetic, bound those steps: baseline "
            "15.8 ms (its step 197 ms), tf32 18.7 ms (its step 89.5 ms).") in said
