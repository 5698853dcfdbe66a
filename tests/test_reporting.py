"""The reporting layer: the registry, the one reader of results (measured and shipped), derived numbers, the claims'
verdicts, and every registered output built from the shipped H200 set plus a small synthetic result tree whose
numbers are known."""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import re
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.patches import Rectangle

from profiling.tables import summarise
from reporting import claims, derived, render
from reporting.registry import BY_ID, OUTPUTS, markdown_list
from reporting.results import MEASURED, SHIPPED, SHIPPED_NAMES, Results, collect, panel_label

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "data" / "reference" / "h200"
CLAIMS = yaml.safe_load((REPO / "data" / "paper_claims.yaml").read_text())
PROVENANCE = json.loads((H200 / "baseline" / "train.json").read_text())


def shipped_files(without_ncu: bool = False) -> list[Path]:
    """The shipped H200 files the figures read (as the workflow lists them), optionally without the ncu profiles."""
    files = [p for p in H200.rglob("*") if p.is_file() and p.name.endswith(SHIPPED_NAMES)]
    return sorted(p for p in files if not (without_ncu and p.name.startswith("ncu")))


def ncu_kernels(scale: float, tensor_pct: float, ipc: float, full: bool) -> pd.DataFrame:
    """Four kernels of known metrics; `scale` multiplies the convolutions' cycles, instructions and time."""
    names = ["sm80_xmma_fprop_implicit_gemm_tf32f32_kernel", "sm80_xmma_wgrad_implicit_gemm_kernel",
             "void cudnn::nchwToNhwcKernel<float>", "void at::native::vectorized_elementwise_kernel<4>"]
    frame = pd.DataFrame({
        "source": "ncu", "device": "gpu", "launch": range(4), "name": names, "short_name": names,
        "kernel_class": ["conv_fprop", "conv_wgrad", "layout_conversion", "elementwise"], "precision": "fp32",
        "instances": 1, "duration_ns": [400.0 * scale, 300.0 * scale, 200.0, 100.0],
        "sm_cycles": [4e6 * scale, 3e6 * scale, 2e6, 1e6],
        "warp_instructions": [8e6 * scale, 6e6 * scale, 1e6, 1e6],
        "thread_instructions": [2.56e8 * scale, 1.92e8 * scale, 3.2e7, 3.2e7],
        "ipc": [ipc] * 4, "tensor_pipe_pct": [tensor_pct] * 4, "tensor_hmma_instructions": [1e5, 1e5, 0.0, 0.0],
        "dram_read_bytes": [4e6, 3e6, 8e6, 4e6], "dram_write_bytes": [1e6, 1e6, 8e6, 4e6],
    })
    if full:
        frame = frame.assign(
            l1_hit_pct=[60.0, 50.0, 10.0, 5.0], l2_hit_pct=[80.0, 70.0, 40.0, 30.0],
            achieved_occupancy_pct=[25.0, 30.0, 90.0, 80.0],
            stall_long_scoreboard=[1.0, 2.0, 6.0, 5.0], stall_math_pipe_throttle=[3.0, 2.0, 0.1, 0.1],
            stall_barrier=[0.5, 0.5, 0.0, 0.0],
            inst_global_ld=[1e5, 1e5, 2e5, 2e5], inst_global_st=[5e4, 5e4, 2e5, 2e5],
            inst_shared_ld=[1e6, 1e6, 0.0, 0.0], inst_shared_st=[2e5, 2e5, 0.0, 0.0],
            thread_inst_ffma=[1e8, 8e7, 0.0, 1e5], thread_inst_fadd=[1e6, 1e6, 0.0, 1e6],
            thread_inst_fmul=[1e6, 1e6, 0.0, 1e6],
        )
    return frame


def write_run(root: Path, gpu: str, variant: str, train_ms: float, scale: float, tensor_pct: float, ipc: float,
              device: str = "NVIDIA A100-SXM4-80GB", switches: dict | None = None) -> list[Path]:
    run = root / "results" / gpu / variant
    (run / "profile" / "train").mkdir(parents=True)
    (run / "profile" / "sample").mkdir(parents=True)
    provenance = copy.deepcopy(PROVENANCE["provenance"]) | {"device_name": device, "multiprocessors": 108,
                                                            "hardware_label": gpu, "variant": variant}
    if switches is not None:
        provenance |= switches
    train = copy.deepcopy(PROVENANCE) | {"provenance": provenance, "train_ms_per_sample": train_ms}
    (run / "train.json").write_text(json.dumps(train))
    sample = json.loads((H200 / "baseline" / "sample.json").read_text()) | {"provenance": provenance}
    (run / "sample.json").write_text(json.dumps(sample))
    files = [run / "train.json", run / "sample.json"]
    for phase, full in (("train", False), ("sample", True)):
        kernels = ncu_kernels(scale, tensor_pct, ipc, full)
        folder = run / "profile" / phase
        kernels.to_parquet(folder / "ncu_kernels.parquet", index=False)
        summarise(kernels).to_csv(folder / "ncu_summary.csv", index=False)
        files += [folder / "ncu_kernels.parquet", folder / "ncu_summary.csv"]
    rules = pd.DataFrame({
        "kernel_id": [0, 0, 2, 3], "kernel_name": ["a", "a", "b", "c"], "section": "SpeedOfLight",
        "rule": ["UncoalescedGlobalAccess", "AchievedOccupancy", "UncoalescedGlobalAccess", "AchievedOccupancy"],
        "rule_type": "OPT", "description": "", "speedup_type": "local", "estimated_speedup_pct": [50.0, 10.0, 25.0, 0.0],
    })
    rules.to_csv(run / "profile" / "sample" / "ncu_rules.csv", index=False)
    return files + [run / "profile" / "sample" / "ncu_rules.csv"]


@pytest.fixture(scope="module")
def a100_files(tmp_path_factory) -> list[Path]:
    """A synthetic a100 measured here: tf32 halves the convolutions' cycles, instructions and time, and trains in
    50 ms per sample against baseline's 100."""
    root = tmp_path_factory.mktemp("a100")
    files = write_run(root, "a100", "baseline", 100.0, 2.0, 1.5, 1.0) + write_run(root, "a100", "tf32", 50.0, 1.0,
                                                                                  10.0, 1.07)
    # The bench of both: 1 ms of model FLOPs at the device's measured bf16 rate (1 % and 2 % of it).
    bench = pd.DataFrame({"variant": ["baseline", "tf32"], "switches": ["fp32", "TF32"],
                          "train_ms_per_sample": [100.0, 50.0], "train_fraction_of_bf16_rate": [0.01, 0.02],
                          "sample_volume_s": [40.0, 20.0], "sample_fraction_of_bf16_rate": [0.05, 0.1],
                          "train_speedup_vs_baseline": [1.0, 2.0]})
    bench.to_csv(root / "results" / "a100" / "bench.csv", index=False)
    return files + [root / "results" / "a100" / "bench.csv"]


@pytest.fixture(scope="module")
def tables(a100_files) -> dict[str, pd.DataFrame]:
    return collect(a100_files, shipped_files(), ["a100"])


@pytest.fixture(scope="module")
def results(tables) -> Results:
    return Results.from_tables(tables)


@pytest.fixture(scope="module")
def built(tables, tmp_path_factory) -> dict:
    """Every registered output (except the workload table, which needs a prepared dataset) built from the collected
    a100 + shipped H200 tables, through the same loader the rules use."""
    folder = tmp_path_factory.mktemp("bundle")
    paths = {}
    for name, frame in tables.items():
        paths[name] = folder / f"{name}.parquet"
        frame.to_parquet(paths[name], index=False)
    made = {}
    for output in OUTPUTS:
        if output.id == "tab02_workload":
            continue
        inputs = {**paths, **{name: REPO / path for name, path in output.files.items()}}
        made[output.id] = render.build(output.id, inputs)
    yield made
    plt.close("all")


# -- registry -----------------------------------------------------------------------------------------------------
def test_every_registered_output_has_its_module_caption_and_readme_line():
    readme = (REPO / "README.md").read_text()
    for output in OUTPUTS:
        assert re.fullmatch(r"(fig|tab)\d\d_[a-z0-9_]+", output.id)
        module = importlib.import_module(output.module)
        assert callable(module.build), output.id
        assert (REPO / output.code).is_file() and (REPO / output.caption).is_file(), output.id
    assert len(BY_ID) == len(OUTPUTS)
    listed = readme.split("<!-- outputs:")[1].split("-->", 1)[1].split("<!-- end outputs -->")[0]
    assert listed.strip() == markdown_list()


# -- the one reader -----------------------------------------------------------------------------------------------
def test_collected_tables_tag_every_row_and_measured_wins(tmp_path, tables, results):
    assert results.labels() == ["a100", "h200"]
    runs = tables["runs"]
    assert set(runs["origin"]) == {MEASURED, SHIPPED}
    assert runs[["gpu", "variant", "origin", "device", "date"]].notna().all().all()
    ladder = ["bf16", "bf16_channels_last", "bf16_channels_last_fused", "bf16_checkpoint_all", "frontier",
              "frontier_channels_last"]  # the shipped rungs beyond the paper, alphabetically after its variants
    assert list(runs["variant"]) == ["baseline", "tf32", "baseline", "tf32", "channels_last", "tf32_channels_last",
                                     *ladder]
    assert results.panel_label("h200") == "h200: NVIDIA H200, shipped reference, 2026-11-29"
    assert panel_label("x", "dev", MEASURED, "2026-01-01") == "x: dev, measured here, 2026-01-01"
    assert set(tables["summaries"].loc[tables["summaries"]["gpu"] == "h200", "tool"]) == {"torch", "ncu"}
    # The shipped training steps reach the loss table too (fig09 draws them).
    assert set(tables["losses"]["gpu"]) == {"h200"}  # the synthetic a100 wrote no train_steps.csv
    # A shipped label measured here is skipped.
    files = write_run(tmp_path, "h200", "baseline", 10.0, 1.0, 1.0, 1.0, device="NVIDIA H200")
    both = collect(files, shipped_files(), ["h200"])
    assert set(both["runs"]["origin"]) == {MEASURED} and list(both["runs"]["variant"]) == ["baseline"]


# -- derived numbers ------------------------------------------------------------------------------------------
def test_ratios_and_speedups_known_numbers(results):
    frame = pd.DataFrame({"gpu": ["g", "g", "h"], "variant": ["baseline", "tf32", "tf32"],
                          "sm_cycles": [200.0, 50.0, 10.0]})
    rel = derived.relative_to(frame, ["sm_cycles"])
    assert rel["sm_cycles"].tolist()[:2] == [1.0, 0.25] and np.isnan(rel["sm_cycles"].iloc[2])  # h: no baseline
    runs = results.table("runs")
    speed = runs.assign(s=derived.speedup(runs)).set_index(["gpu", "variant"])["s"]
    assert speed[("a100", "tf32")] == pytest.approx(2.0)
    assert speed[("h200", "tf32")] == pytest.approx(1227.402 / 236.340, rel=1e-3)


def test_a_variant_counts_as_exercised_only_when_its_switches_act_on_the_device():
    off = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False}
    runs = pd.DataFrame({
        "gpu": "cpu", "variant": ["baseline", "tf32", "channels_last"],
        "switches": [json.dumps(off), json.dumps(off | {"cudnn_tf32": True, "matmul_tf32": True}),
                     json.dumps(off | {"channels_last": True})],
        "switches_effective": [json.dumps({"cudnn_tf32": False, "matmul_tf32": False, "channels_last": True})] * 3,
    })
    assert derived.differing_switches(runs, "cpu", "tf32") == {"cudnn_tf32": False, "matmul_tf32": False}
    assert not derived.exercised(runs, "cpu", "tf32")
    assert derived.exercised(runs, "cpu", "channels_last")
    assert not derived.exercised(runs, "cpu", "baseline")  # nothing sets it apart
    assert not derived.exercised(runs, "gpu", "tf32")  # no such run


# -- claims: every rule just inside and just outside each condition -----------------------------------------------
def ctx(headline=None, classes=None, study=None, is_gpu=True, ncu_classes=None, runs=None):
    empty = pd.DataFrame(columns=["gpu", "variant", "kernel_class", "sm_cycles", "warp_instructions"])
    effective = {"cudnn_tf32": True, "matmul_tf32": True, "channels_last": True}
    default_runs = pd.DataFrame({
        "gpu": "g", "variant": ["baseline", "tf32"],
        "switches": [json.dumps({"cudnn_tf32": False}), json.dumps({"cudnn_tf32": True})],
        "switches_effective": [json.dumps(effective)] * 2})
    return {"headline": empty if headline is None else headline, "classes": empty if classes is None else classes,
            "ncu_classes": empty if ncu_classes is None else ncu_classes,
            "study": pd.DataFrame() if study is None else study, "is_gpu": is_gpu,
            "runs": default_runs if runs is None else runs, "optimized": CLAIMS["optimized_variants"]}


def claim(claim_id):
    return next(c for c in CLAIMS["claims"] if c["id"] == claim_id)


def head(**tf32) -> pd.DataFrame:
    values = {"sm_cycles": 1.5, "warp_instructions": 20.0, "tensor_pipe_pct": 9.0, "ipc": 1.08} | tf32
    return pd.DataFrame({"gpu": "g", "variant": ["baseline", "tf32"], "sm_cycles": [100.0, values["sm_cycles"]],
                         "warp_instructions": [100.0, values["warp_instructions"]],
                         "tensor_pipe_pct": [1.45, values["tensor_pipe_pct"]], "ipc": [1.0, values["ipc"]]})


def conv(dgrad_tf32: float) -> pd.DataFrame:
    """Per-class sums: baseline conv_dgrad 100, tf32 conv_dgrad `dgrad_tf32`; fprop 50 -> 10; elementwise 900 -> 1
    (not a convolution class: never the 'up to' ratio)."""
    return pd.DataFrame({"gpu": "g", "variant": ["baseline", "tf32"] * 3,
                         "kernel_class": ["conv_fprop"] * 2 + ["conv_dgrad"] * 2 + ["elementwise"] * 2,
                         "sm_cycles": [50.0, 10.0, 100.0, dgrad_tf32, 900.0, 1.0],
                         "warp_instructions": [50.0, 10.0, 100.0, dgrad_tf32, 900.0, 1.0]})


@pytest.mark.parametrize("dgrad_tf32, ratio, verdict", [
    (2.0, "50x", claims.REPRODUCED),          # 50x: the lower edge of "100x within a factor 2"
    (2.02, "49.5x", claims.SAME_DIRECTION),   # just below 50x
    (0.5, "200x", claims.REPRODUCED),         # the upper edge
    (0.49, "204x", claims.SAME_DIRECTION),    # just above 200x
    (101.0, "5x", claims.SAME_DIRECTION),     # the fprop ratio (5x) is then the largest: lower, but far off
])
def test_reduction_claim_takes_the_largest_convolution_class_ratio(dgrad_tf32, ratio, verdict):
    measured, got = claims.evaluate(claim("sm_cycles"), "g", ctx(head(), ncu_classes=conv(dgrad_tf32)))
    assert got == verdict and measured.startswith(ratio + " lower")


def test_reduction_claim_is_contradicted_when_nothing_got_lower():
    more = conv(100.0).assign(sm_cycles=[50.0, 60.0, 100.0, 120.0, 900.0, 1.0])
    assert claims.evaluate(claim("sm_cycles"), "g", ctx(head(), ncu_classes=more))[1] == claims.CONTRADICTED


@pytest.mark.parametrize("tensor, verdict", [(4.98, claims.SAME_DIRECTION), (4.991, claims.REPRODUCED),
                                             (19.96, claims.REPRODUCED), (19.97, claims.SAME_DIRECTION),
                                             (21.1, claims.SAME_DIRECTION), (1.45, claims.CONTRADICTED),
                                             (1.0, claims.CONTRADICTED)])
def test_tensor_claim_needs_more_than_baseline_and_the_factor(tensor, verdict):
    assert claims.evaluate(claim("tensor_utilisation"), "g", ctx(head(tensor_pipe_pct=tensor)))[1] == verdict


@pytest.mark.parametrize("ipc, verdict", [(1.0351, claims.REPRODUCED), (1.0349, claims.SAME_DIRECTION),
                                          (1.1399, claims.REPRODUCED), (1.1401, claims.SAME_DIRECTION),
                                          (1.0, claims.CONTRADICTED), (0.93, claims.CONTRADICTED)])
def test_ipc_claim_needs_a_gain_within_the_factor(ipc, verdict):
    assert claims.evaluate(claim("ipc"), "g", ctx(head(ipc=ipc)))[1] == verdict


def test_ncu_claims_without_profiles_are_not_measurable():
    only_base = head()[head()["variant"] == "baseline"]
    for claim_id in ("sm_cycles", "instructions", "tensor_utilisation", "ipc"):
        assert claims.evaluate(claim(claim_id), "g", ctx(only_base))[1] == claims.NOT_MEASURABLE
        measured, verdict = claims.evaluate(claim(claim_id), "g", ctx())
        assert verdict == claims.NOT_MEASURABLE and "baseline" in measured


def test_quality_claim_is_judged_on_the_quality_study():
    """tests/test_quality_study.py holds the rule's edges; here: without a study the claim is not measurable."""
    measured, verdict = claims.evaluate(claim("quality"), "g", ctx())
    assert verdict == claims.NOT_MEASURABLE and measured == "no quality study on g"


@pytest.mark.parametrize("conv_share, verdict", [(0.51, claims.REPRODUCED), (0.5, claims.CONTRADICTED)])
def test_convolution_dominance_threshold(conv_share, verdict):
    rest = 1 - conv_share
    classes = pd.DataFrame({"variant": "baseline", "tool": "ncu", "kernel_class": ["conv_fprop", "conv_wgrad",
                            "layout_conversion", "elementwise"],
                            "time_share": [conv_share / 2, conv_share / 2, 0.01, rest - 0.01]})
    assert claims.evaluate(claim("conv_dominates"), "g", ctx(classes=classes))[1] == verdict
    assert claims.evaluate(claim("conv_dominates"), "g", ctx(classes=classes, is_gpu=False))[1] == \
        claims.NOT_MEASURABLE


@pytest.mark.parametrize("layout, verdict", [(0.05, claims.REPRODUCED), (0.0499, claims.CONTRADICTED)])
def test_layout_conversion_threshold_in_some_variant(layout, verdict):
    classes = pd.DataFrame({"variant": ["baseline", "baseline", "tf32", "tf32"], "tool": "ncu",
                            "kernel_class": ["conv_fprop", "layout_conversion"] * 2,
                            "time_share": [0.99, 0.01, 1 - layout, layout]})
    assert claims.evaluate(claim("layout_conversions"), "g", ctx(classes=classes))[1] == verdict


def test_claims_table_keeps_published_values_out_of_the_measured_column(results):
    table, notes = claims.claims_table(CLAIMS, results)
    assert len(table) == len(CLAIMS["claims"]) * 2 and len(notes) == len(CLAIMS["claims"])
    assert set(table["verdict"]) <= set(claims.VERDICTS)
    assert "9.98" not in " ".join(table["measured"])
    row = table[(table["gpu"] == "a100") & (table["claim"].str.startswith("SM cycles"))].iloc[0]
    # conv_fprop cycles 8e6 -> 4e6 (the largest conv-class reduction), 17e6 -> 10e6 per step
    assert row["measured"] == "2x lower (conv_fprop, tf32); whole step 1.7x (tf32)"
    assert row["verdict"] == claims.SAME_DIRECTION
    h200 = table[table["gpu"] == "h200"].set_index(table[table["gpu"] == "h200"]["claim"].str[:12])
    tensor = h200.loc["Tensor Core "]
    assert tensor["verdict"] == claims.SAME_DIRECTION and tensor["measured"].startswith("0.767 -> 21.1 %")
    assert h200.loc["IPC +7 % wit", "verdict"] == claims.CONTRADICTED


# -- every output, built from the collected tables ----------------------------------------------------------------
def bar_heights(ax) -> list[float]:
    return [patch.get_height() for patch in ax.patches if isinstance(patch, Rectangle) and patch.get_height() > 0]


def axes_titled(fig, title: str) -> list:
    return [ax for ax in fig.get_axes() if ax.get_title(loc="left") == title]


def texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(plt.Text)).replace("\n", " ")


def test_end_to_end_figure_draws_every_label_with_its_numbers(built, results):
    fig = built["fig08_end_to_end"]
    runs = results.table("runs").set_index(["gpu", "variant"])
    training = axes_titled(fig, "training")
    assert len(training) == 2  # a row for the label measured here and one for the shipped H200
    assert bar_heights(training[1]) == pytest.approx(list(runs.loc["h200", "train_ms_per_sample"]))
    assert bar_heights(training[0]) == pytest.approx([100.0, 50.0])
    memory = axes_titled(fig, "memory")[1]
    assert bar_heights(memory) == pytest.approx(list(runs.loc["h200", "train_peak_memory_gib"]))


def test_runtime_breakdown_stacks_the_class_shares_of_each_run(built, tables):
    fig = built["fig01_runtime_breakdown"]
    h200_train = axes_titled(fig, "train step")[1]
    summaries = tables["summaries"]
    tf32 = summaries[(summaries["gpu"] == "h200") & (summaries["variant"] == "tf32") & (summaries["phase"] == "train")
                     & (summaries["tool"] == "ncu") & (summaries["kernel_class"] != "all")]
    # Segments are drawn class by class; the tf32 bar (second of four) holds the run's shares, in percent.
    tf32_segments = [p.get_height() for p in h200_train.patches if abs(p.get_x() + p.get_width() / 2 - 1) < 1e-9]
    assert sorted(tf32_segments) == pytest.approx(sorted(tf32["time_share"][tf32["time_share"] > 0] * 100))
    assert sum(tf32_segments) == pytest.approx(100.0)


def test_optimization_impact_ratios_and_speedups(built, tables):
    fig = built["fig07_optimization_impact"]
    speed = axes_titled(fig, "end-to-end training")
    assert bar_heights(speed[0]) == pytest.approx([1.0, 2.0])
    text = texts(fig)
    assert "0.59" in text  # a100 tf32 SM cycles: 10e6 / 17e6


def test_ladder_draws_every_rung_against_the_flop_floor(built):
    fig = built["fig11_optimization_ladder"]
    train = axes_titled(fig, "training per sample (ms, log)")[0]
    assert bar_heights(train) == pytest.approx([100.0, 50.0])  # slowest first when no run order is configured
    floors = [line.get_ydata()[0] for line in train.get_lines()]
    assert floors == pytest.approx([1.0])  # 100 ms x 1 % = 50 ms x 2 %
    sample = axes_titled(fig, "sampling per volume (s, log)")[0]
    assert [line.get_ydata()[0] for line in sample.get_lines()] == pytest.approx([2.0])
    mix = axes_titled(fig, "training step: kernel time by class")[0]
    assert sum(bar_heights(mix)) == pytest.approx(200.0)  # two profiled rungs, 100 % each
    frontier = built["tab07_frontier"].frame.set_index(["gpu", "variant"])
    assert frontier.loc[("a100", "tf32"), "train_speedup_vs_baseline"] == 2.0
    # The shipped H200 ladder reaches the table and its own row of the figure, value for value.
    assert list(frontier.index.get_level_values("gpu").unique()) == ["a100", "h200"]
    shipped = pd.read_csv(REPO / "data" / "reference" / "h200" / "bench.csv").set_index("variant")
    h200 = frontier.loc["h200"]
    assert h200["train_ms_per_sample"].to_dict() == pytest.approx(shipped["train_ms_per_sample"].to_dict())
    h200_train = axes_titled(fig, "training per sample (ms, log)")[1]
    heights = bar_heights(h200_train)
    assert sorted(heights) == pytest.approx(sorted(shipped["train_ms_per_sample"]))
    assert heights[1:] == sorted(heights[1:], reverse=True)  # baseline, then the rungs from slowest to fastest


def test_claims_and_optimization_tables(built):
    table = built["tab05_claims"]
    assert table.notes and table.frame["rule"].str.fullmatch(r"\[\d\]").all()
    optimization = built["tab04_optimization"].frame.set_index(["gpu", "variant"])
    assert optimization.loc[("a100", "tf32"), "train_speedup_vs_baseline"] == pytest.approx(2.0)
    assert optimization.loc[("a100", "tf32"), "sm_cycles_rel"] == pytest.approx(10e6 / 17e6)
    hardware = built["tab01_hardware"].frame.set_index("label")
    assert hardware.loc["h200", "cudnn"] == "9.19.0" and hardware.loc["h200", "sms"] == "132"
    kernels = built["tab03_kernels"].frame.set_index(["gpu", "variant", "phase", "tool"])
    assert kernels.loc[("a100", "tf32", "train", "ncu"), "conv_share"] == pytest.approx(700 / 1000)


def test_panels_without_ncu_say_why(tmp_path, a100_files):
    torch_only = collect([], shipped_files(without_ncu=True), [])
    paths = {}
    for name, frame in torch_only.items():
        paths[name] = tmp_path / f"{name}.parquet"
        frame.to_parquet(paths[name], index=False)
    for output_id in ("fig03_instruction_mix", "fig04_memory_system", "fig05_warp_states", "fig06_priority_scores",
                      "fig07_optimization_impact", "fig10_roofline"):
        inputs = {**paths, **{name: REPO / path for name, path in BY_ID[output_id].files.items()}}
        fig = render.build(output_id, inputs)
        assert "no Nsight Compute" in texts(fig), output_id
        plt.close(fig)


def test_figures_render_byte_identically(tmp_path, tables):
    paths = {}
    for name, frame in tables.items():
        paths[name] = tmp_path / f"{name}.parquet"
        frame.to_parquet(paths[name], index=False)
    for output_id in ("fig01_runtime_breakdown", "fig07_optimization_impact"):
        digests = []
        for k in range(2):
            files = {ext: tmp_path / f"{output_id}-{k}.{ext}" for ext in ("pdf", "png")}
            render.render(output_id, paths, files)
            digests.append([hashlib.sha256(files[ext].read_bytes()).hexdigest() for ext in ("pdf", "png")])
        assert digests[0] == digests[1], output_id
        assert files["png"].stat().st_size > 10_000


def test_every_kernel_class_has_its_own_colour():
    from profiling.kernels import CLASS_NAMES
    from reporting.panels import CLASS_COLORS

    assert set(CLASS_COLORS) == set(CLASS_NAMES)
    assert len({tuple(matplotlib.colors.to_rgb(c)) for c in CLASS_COLORS.values()}) == len(CLASS_NAMES)
