"""The configured Nsight Compute profiles hold everything a figure or table draws (docs/profiling.md, "What reads each
metric"), shown on the shipped H200 exports: each figure's numbers computed from an export cut down to what config.yaml
collects on an H200 (the phase's metric set, and the launch attributes of the LaunchStats section where it is
configured) equal those from the whole export, and the configured sampling sections hold every rule that gives the
shipped profiles an estimated speedup (fig06). A metric or section left out that a figure reads fails here.
"""

from __future__ import annotations

import gzip
import sys
from functools import cache
from pathlib import Path

import pandas as pd
import pytest
import yaml
from profiling import memory_floor, ncu, tables
from profiling.instructions import kernel_flop, mix_by_class
from profiling.settings import ncu_settings
from reporting.derived import weighted_mean
from reporting.outputs.fig03_instruction_mix import instruction_mix
from reporting.outputs.fig04_memory_system import memory_by_class
from reporting.outputs.fig05_warp_states import warp_states

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "data" / "reference" / "wholehead" / "h200"
NCU_CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())["profiling"]["ncu"]
METRIC_SETS = yaml.safe_load((REPO / NCU_CONFIG["metric_sets"]).read_text())
RATES = yaml.safe_load((H200 / "device_rates.json").read_text())
# Shipped exports taken with every metric the configured sets hold: an fp32 and a TF32 sampling step (the instruction-mix
# set) and a training step (the one-pass set itself).
STEPS = [("baseline", "sample"), ("tf32", "sample"), ("tf32", "train")]
# What LaunchStats adds to every kernel's row, read by the memory floor's normalization sites.
LAUNCH = ["launch__grid_size", "launch__block_size"]


def configured(phase: str) -> dict:
    return ncu_settings(NCU_CONFIG, "sm90", phase, METRIC_SETS)


@cache
def whole(variant: str, phase: str) -> pd.DataFrame:
    text = gzip.decompress((H200 / variant / "profile" / phase / "ncu_raw.csv.gz").read_bytes()).decode()
    return ncu.parse_raw(text)


def cut_down(raw: pd.DataFrame, phase: str) -> pd.DataFrame:
    """The export as the configured profile collects it: the launch columns, the set's metrics and, with LaunchStats,
    the launch attributes; nothing of what the other metrics, their roll-ups or other sections add."""
    settings = configured(phase)
    keep = set(ncu.IDENTITY_COLUMNS.values()) | set(settings["metrics"])
    keep |= set(LAUNCH) if "LaunchStats" in settings["sections"] else set()
    cut = raw[[c for c in raw.columns if c in keep]].copy()
    cut.attrs["units"] = {k: v for k, v in raw.attrs.get("units", {}).items() if k in keep}
    return cut


def drawn(kernels: pd.DataFrame, phase: str) -> dict[str, pd.Series]:
    """What the figures and tables draw from one profiled step, through their own functions (the training steps' set
    feeds the per-class summary alone: fig03 to fig06 and fig10 draw sampling steps' counters)."""
    kernels = kernels.assign(variant="v")
    out = {
        "tab03/tab04/fig07/tab08 (per-class summary)": tables.summarise(kernels).set_index("kernel_class").drop(
            columns=["source", "tensor_pipe_metric"]).stack(future_stack=True),
    }
    if phase == "sample":
        out |= {
            "fig03 (instructions by kind)": instruction_mix(kernels).drop(columns="variant").iloc[0],
            "fig03 (by kernel class)": mix_by_class(kernels).set_index("kernel_class").stack(),
            "fig04 (DRAM bytes, L2 and L1 hit rates)": memory_by_class(kernels).drop(columns="variant").set_index(
                "kernel_class").stack(),
            "fig05 (warp stall reasons)": warp_states(kernels, top=100).set_index("reason")["value"],
            "fig05 (achieved occupancy)": pd.Series({"occupancy": weighted_mean(kernels, "achieved_occupancy_pct")}),
            "fig10 (FLOPs per kernel)": kernel_flop(kernels),
            "tab07/fig11 (memory floor)": floors(kernels),
            "memory floor's normalization sites": memory_floor.norm_sites(kernels, RATES["copy_gb_per_s"]).drop(
                columns="short_name").stack(),
        }
    return out


def floors(kernels: pd.DataFrame) -> pd.Series:
    """The memory floor per kernel class (tab07, fig11), or the line saying why the step has none."""
    why = memory_floor.reason(kernels, RATES["copy_gb_per_s"])
    if why:
        return pd.Series({"no memory floor": why})
    return memory_floor.class_floors(kernels, RATES["copy_gb_per_s"], RATES["bf16_matmul_tflops"]).set_index(
        "kernel_class").stack()


@pytest.mark.parametrize(("variant", "phase"), STEPS)
def test_every_number_a_figure_draws_comes_from_the_configured_profile(variant, phase):
    raw = whole(variant, phase)
    assert set(configured(phase)["metrics"]) <= set(raw.columns), "the shipped export lacks a configured metric"
    full, mine = drawn(tables.from_ncu(raw), phase), drawn(tables.from_ncu(cut_down(raw, phase)), phase)
    for what, numbers in full.items():
        assert numbers.notna().any(), f"{what}: the shipped export gives no number to compare"
        pd.testing.assert_series_equal(mine[what], numbers, check_names=False, obj=f"{variant} {phase}: {what}")


def test_the_check_fails_when_the_sampling_set_loses_a_metric_a_figure_reads(monkeypatch):
    """The same comparison with one metric of each figure taken out of the sampling set finds the figure changed."""
    raw = whole("tf32", "sample")
    full = drawn(tables.from_ncu(raw), "sample")
    for metric, what in [("lts__t_sector_hit_rate.pct", "fig04 (DRAM bytes, L2 and L1 hit rates)"),
                         ("dram__bytes_write.sum", "tab07/fig11 (memory floor)"),
                         ("smsp__sass_thread_inst_executed_op_integer_pred_on.sum", "fig03 (instructions by kind)"),
                         ("smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "fig05 (warp stall reasons)"),
                         ("sm__ops_path_tensor_src_tf32_dst_fp32.sum", "fig10 (FLOPs per kernel)"),
                         ("sm__warps_active.avg.pct_of_peak_sustained_active", "fig05 (achieved occupancy)")]:
        lacking = {**METRIC_SETS, "paper_figures": [m for m in METRIC_SETS["paper_figures"] if m != metric]}
        monkeypatch.setattr(sys.modules[__name__], "METRIC_SETS", lacking)
        mine = drawn(tables.from_ncu(cut_down(raw, "sample")), "sample")
        assert not mine[what].equals(full[what]), f"without {metric}, {what} is unchanged"
    monkeypatch.undo()
    sections = {**NCU_CONFIG, "sections": ["Occupancy", "WarpStateStats"]}
    monkeypatch.setattr(sys.modules[__name__], "NCU_CONFIG", sections)
    mine = drawn(tables.from_ncu(cut_down(raw, "sample")), "sample")
    assert not mine["memory floor's normalization sites"].equals(full["memory floor's normalization sites"])


@pytest.mark.parametrize("variant", ["baseline", "tf32", "channels_last", "tf32_channels_last"])
def test_the_sampling_sections_hold_every_rule_that_fig06_draws(variant):
    """fig06 draws the rules with an estimated speedup; the shipped sampling profiles (taken with SpeedOfLight too)
    give one only in the sections the sampling step collects: SpeedOfLight's rule gives none."""
    rules = pd.read_csv(H200 / variant / "profile" / "sample" / "ncu_rules.csv.gz")
    with_speedup = rules[rules["estimated_speedup_pct"].notna()]
    assert set(with_speedup["rule"]) == {"AchievedOccupancy", "CPIStall", "LaunchConfiguration",
                                         "TheoreticalOccupancy", "ThreadDivergence"}
    assert set(with_speedup["section"]) <= set(configured("sample")["sections"])
    assert "SpeedOfLight" in set(rules["section"]) - set(configured("sample")["sections"])
    assert configured("train")["sections"] == []  # the one-pass training step runs no rules (fig06: sampling only)
