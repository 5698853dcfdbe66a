"""Verdicts of the paper's claims by construction, beyond the cases of tests/test_reporting.py: on small hand-made
tables, each condition of each rule just inside and just outside (which variants count, which metric and class a
claim reads, above baseline, every variant versus some variant, the not-measurable reasons), and the measured text.
The published values and factors come from data/paper_claims.yaml."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from reporting import claims

CLAIMS = yaml.safe_load((Path(__file__).resolve().parents[1] / "data" / "paper_claims.yaml").read_text())
OPTIMIZED = CLAIMS["optimized_variants"]
SWITCHES = {"baseline": {"cudnn_tf32": False, "channels_last": False}, "tf32": {"cudnn_tf32": True,
            "channels_last": False}, "channels_last": {"cudnn_tf32": False, "channels_last": True},
            "tf32_channels_last": {"cudnn_tf32": True, "channels_last": True},
            "bf16": {"cudnn_tf32": False, "channels_last": False, "autocast": "bfloat16"}}


def claim(claim_id: str) -> dict:
    return next(c for c in CLAIMS["claims"] if c["id"] == claim_id)


def runs(variants, idle=()) -> pd.DataFrame:
    """End-to-end rows with switches; the switches in `idle` had no effect on the device."""
    effective = {"cudnn_tf32": True, "channels_last": True, "autocast": True} | {s: False for s in idle}
    return pd.DataFrame({"gpu": "g", "variant": list(variants),
                         "switches": [json.dumps(SWITCHES[v]) for v in variants],
                         "switches_effective": [json.dumps(effective)] * len(variants)})


def context(headline=None, ncu_classes=None, classes=None, study=None, is_gpu=True, run_rows=None,
            optimized=OPTIMIZED) -> dict:
    empty = pd.DataFrame(columns=["gpu", "variant", "kernel_class", "sm_cycles", "warp_instructions"])
    return {"headline": empty if headline is None else headline,
            "ncu_classes": empty if ncu_classes is None else ncu_classes,
            "classes": empty if classes is None else classes, "study": pd.DataFrame() if study is None else study,
            "is_gpu": is_gpu, "runs": runs(["baseline", *OPTIMIZED]) if run_rows is None else run_rows,
            "optimized": optimized}


def headline(**variants: dict) -> pd.DataFrame:
    """The whole-step ncu numbers per variant: sm_cycles, warp_instructions, ipc, tensor_pipe_pct."""
    rows = [{"gpu": "g", "variant": v, "sm_cycles": np.nan, "warp_instructions": np.nan, "ipc": np.nan,
             "tensor_pipe_pct": np.nan} | values for v, values in variants.items()]
    return pd.DataFrame(rows)


def class_sums(**variants: dict) -> pd.DataFrame:
    """Per-class ncu sums: variant -> {class: (sm_cycles, warp_instructions)}."""
    rows = [{"gpu": "g", "variant": v, "kernel_class": c, "sm_cycles": cycles, "warp_instructions": instructions}
            for v, per_class in variants.items() for c, (cycles, instructions) in per_class.items()]
    return pd.DataFrame(rows)


def evaluate(claim_id: str, **ctx) -> tuple[str, str]:
    return claims.evaluate(claim(claim_id), "g", context(**ctx))


# --- "up to Nx lower": the largest per-class ratio, of the claim's own metric -----------------------------------

BASE = {"conv_fprop": (1000.0, 5000.0), "conv_dgrad": (400.0, 800.0), "conv_wgrad": (300.0, 600.0),
        "elementwise": (9000.0, 9000.0)}


def test_each_reduction_claim_reads_its_own_metric_and_reports_the_whole_step_beside_it():
    sums = class_sums(baseline=BASE, tf32={"conv_fprop": (10.0, 500.0), "conv_dgrad": (100.0, 4.0),
                                           "conv_wgrad": (300.0, 600.0), "elementwise": (1.0, 1.0)})
    head = headline(baseline={"sm_cycles": 1000.0, "warp_instructions": 900.0},
                    tf32={"sm_cycles": 40.0, "warp_instructions": 300.0})
    cycles = evaluate("sm_cycles", headline=head, ncu_classes=sums)
    assert cycles == ("100x lower (conv_fprop, tf32); whole step 25x (tf32)", claims.REPRODUCED)
    instructions = evaluate("instructions", headline=head, ncu_classes=sums)
    assert instructions == ("200x lower (conv_dgrad, tf32); whole step 3x (tf32)", claims.REPRODUCED)


def test_reduction_ratio_is_the_largest_over_every_optimized_variant_and_only_those():
    sums = class_sums(baseline=BASE, tf32={"conv_fprop": (500.0, 1.0)}, channels_last={"conv_dgrad": (8.0, 1.0)},
                      bf16={"conv_fprop": (0.1, 0.1)})  # bf16 is not one of the paper's optimizations
    head = headline(baseline={"sm_cycles": 100.0}, tf32={"sm_cycles": 80.0}, channels_last={"sm_cycles": 50.0},
                    bf16={"sm_cycles": 1.0})
    measured, verdict = evaluate("sm_cycles", headline=head, ncu_classes=sums)
    assert (measured, verdict) == ("50x lower (conv_dgrad, channels_last); whole step 2x (channels_last)",
                                   claims.REPRODUCED)
    # The same tables with bf16 counted as an optimization: 10000x, far above "up to 100x".
    measured, verdict = claims.evaluate(claim("sm_cycles"), "g", context(headline=head, ncu_classes=sums,
                                                                       optimized=[*OPTIMIZED, "bf16"]))
    assert measured.startswith("1e+04x lower (conv_fprop, bf16)") and verdict == claims.SAME_DIRECTION


def test_reduction_of_a_step_below_one_cycle_and_a_ratio_of_exactly_one():
    sums = class_sums(baseline=BASE, tf32={"conv_fprop": (1000.0, 1.0), "conv_dgrad": (800.0, 1.0),
                                           "conv_wgrad": (600.0, 1.0)})
    head = headline(baseline={"sm_cycles": 100.0}, tf32={"sm_cycles": 0.5})
    assert evaluate("sm_cycles", headline=head, ncu_classes=sums) == (
        "1x lower (conv_fprop, tf32); whole step 200x (tf32)", claims.CONTRADICTED)  # no class got lower


def test_reduction_skips_classes_a_variant_does_not_have_or_ran_in_no_time():
    sums = class_sums(baseline=BASE, tf32={"conv_fprop": (0.0, 0.0), "conv_wgrad": (3.0, 6.0)})
    head = headline(baseline={"sm_cycles": 100.0}, tf32={"sm_cycles": 50.0})
    assert evaluate("sm_cycles", headline=head, ncu_classes=sums)[0].startswith("100x lower (conv_wgrad, tf32)")


@pytest.mark.parametrize("sums, head", [
    (class_sums(baseline=BASE), headline(baseline={"sm_cycles": 100.0}, tf32={"sm_cycles": 50.0})),
    (class_sums(tf32={"conv_fprop": (10.0, 10.0)}), headline(baseline={"sm_cycles": 100.0}, tf32={"sm_cycles": 50.0})),
    (class_sums(baseline=BASE, tf32={"conv_fprop": (10.0, 10.0)}),
     headline(baseline={"sm_cycles": 100.0}, tf32={"sm_cycles": 0.0})),
], ids=["no variant classes", "no baseline classes", "variant step of zero cycles"])
def test_reduction_without_the_numbers_to_divide_is_not_measurable(sums, head):
    measured, verdict = evaluate("sm_cycles", headline=head, ncu_classes=sums)
    assert verdict == claims.NOT_MEASURABLE
    assert measured == "no sm_cycles of the convolution kernels in an optimized variant on g"


def test_a_reduction_within_the_factor_but_no_lower_than_one_is_contradicted():
    sums = class_sums(baseline=BASE, tf32={c: (v[0] * 1.01, v[1]) for c, v in BASE.items()})
    head = headline(baseline={"sm_cycles": 100.0}, tf32={"sm_cycles": 101.0})
    measured, verdict = evaluate("sm_cycles", headline=head, ncu_classes=sums)
    assert verdict == claims.CONTRADICTED and measured.startswith("0.99x lower")


# --- the headline claims need a baseline and an optimized variant --------------------------------------------


@pytest.mark.parametrize("claim_id, metric", [("sm_cycles", "sm_cycles"), ("instructions", "warp_instructions"),
                                              ("ipc", "ipc"), ("tensor_utilisation", "tensor_pipe_pct")])
def test_headline_claims_without_a_baseline_value_are_not_measurable(claim_id, metric):
    no_baseline = headline(tf32={metric: 5.0}, channels_last={metric: 6.0})
    nan_baseline = headline(baseline={metric: np.nan}, tf32={metric: 5.0})
    for head in (no_baseline, nan_baseline):
        assert evaluate(claim_id, headline=head) == (
            "no Nsight Compute training-step profile of baseline on g", claims.NOT_MEASURABLE)
    # Variants that are no optimization of the paper, or without the value, do not count as the optimized one.
    others = headline(baseline={metric: 1.0}, bf16={metric: 5.0}, tf32={metric: np.nan})
    assert evaluate(claim_id, headline=others) == (
        "no Nsight Compute training-step profile of an optimized variant on g", claims.NOT_MEASURABLE)


def test_ipc_gain_is_the_best_variants_percentage_and_a_zero_baseline_is_not_measurable():
    head = headline(baseline={"ipc": 2.0}, tf32={"ipc": 2.1}, channels_last={"ipc": 1.9},
                    tf32_channels_last={"ipc": 2.14})
    assert evaluate("ipc", headline=head) == (
        "+7 % (tf32_channels_last; the highest of tf32, channels_last, tf32_channels_last)", claims.REPRODUCED)
    worse = headline(baseline={"ipc": 2.0}, tf32={"ipc": 1.9}, channels_last={"ipc": 1.5})
    assert evaluate("ipc", headline=worse) == ("-5 % (tf32; the highest of tf32, channels_last)", claims.CONTRADICTED)
    large = headline(baseline={"ipc": 1.0}, tf32={"ipc": 1.5})
    assert evaluate("ipc", headline=large) == ("+50 % (tf32)", claims.SAME_DIRECTION)
    small = headline(baseline={"ipc": 2.0}, tf32={"ipc": 2.01}, channels_last={"ipc": 2.1},
                     tf32_channels_last={"ipc": 1.0})  # the best is neither the first nor the last by name
    assert evaluate("ipc", headline=small)[0].startswith("+5 % (channels_last; the highest of")
    tiny = headline(baseline={"ipc": 2.0}, tf32={"ipc": 2.01})
    assert evaluate("ipc", headline=tiny) == ("+0.5 % (tf32)", claims.SAME_DIRECTION)  # a gain, far below +7 %
    zero = headline(baseline={"ipc": 0.0}, tf32={"ipc": 1.0})
    assert evaluate("ipc", headline=zero) == ("baseline IPC is zero on g", claims.NOT_MEASURABLE)


def test_tensor_utilisation_reports_baseline_and_the_best_variant():
    head = headline(baseline={"tensor_pipe_pct": 1.45}, tf32={"tensor_pipe_pct": 9.98},
                    channels_last={"tensor_pipe_pct": 2.0})
    assert evaluate("tensor_utilisation", headline=head) == ("1.45 -> 9.98 % (tf32)", claims.REPRODUCED)
    # Within the factor of the published 9.98 % but not above what baseline already had.
    above = headline(baseline={"tensor_pipe_pct": 12.0}, tf32={"tensor_pipe_pct": 11.0})
    assert evaluate("tensor_utilisation", headline=above) == ("12 -> 11 % (tf32)", claims.CONTRADICTED)


# --- quality: tests/test_claims_quality.py (the equivalence test, its edges and its not-measurable reasons) --------


# --- kernel-time shares: GPU only, baseline first, the largest layout share -------------------------------------


def shares(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"variant": v, "tool": "ncu" if v != "tf32" else "torch", "kernel_class": c,
                          "time_share": s} for v, c, s in rows])


def test_convolution_share_is_baselines_when_baseline_was_profiled():
    table = shares([("tf32", "conv_fprop", 0.9), ("tf32", "elementwise", 0.1), ("baseline", "conv_fprop", 0.2),
                    ("baseline", "conv_dgrad", 0.15), ("baseline", "conv_wgrad", 0.1), ("baseline", "gemm", 0.55)])
    assert evaluate("conv_dominates", classes=table) == ("45.0% of kernel time (baseline, ncu)", claims.CONTRADICTED)
    # Without baseline, the first variant in the paper's order.
    without = table[table["variant"] != "baseline"]
    assert evaluate("conv_dominates", classes=without) == (
        "90.0% of kernel time (tf32, torch.profiler, not the paper's Nsight tools)", claims.REPRODUCED)
    # A variant beyond the paper is never the evidence, even where it is the only one profiled.
    beyond = shares([("bf16", "conv_fprop", 0.9), ("bf16", "elementwise", 0.1)])
    assert evaluate("conv_dominates", classes=beyond) == (
        "no training-step kernel profile of the paper's variants (baseline, tf32, channels_last, tf32_channels_last) "
        "on g", claims.NOT_MEASURABLE)


def test_layout_share_is_the_largest_over_the_variants():
    table = shares([("baseline", "layout_conversion", 0.07), ("baseline", "conv_fprop", 0.93),
                    ("tf32", "layout_conversion", 0.02), ("tf32", "conv_fprop", 0.98)])
    assert evaluate("layout_conversions", classes=table) == (
        "7.0% of kernel time (baseline, ncu; largest of baseline, tf32)", claims.REPRODUCED)
    none = table[table["kernel_class"] != "layout_conversion"]
    assert evaluate("layout_conversions", classes=none) == (
        "0 % (no layout-conversion kernels in baseline, tf32)", claims.CONTRADICTED)


def test_layout_share_counts_only_the_papers_variants_and_says_which_tool():
    # bf16_channels_last (beyond the paper) converts layouts the most: it is no evidence for the paper's claim.
    table = pd.DataFrame([
        {"variant": "bf16_channels_last", "tool": "torch", "kernel_class": "layout_conversion", "time_share": 0.35},
        {"variant": "tf32_channels_last", "tool": "ncu", "kernel_class": "layout_conversion", "time_share": 0.031},
        {"variant": "baseline", "tool": "ncu", "kernel_class": "layout_conversion", "time_share": 0.008}])
    assert evaluate("layout_conversions", classes=table) == (
        "3.1% of kernel time (tf32_channels_last, ncu; largest of baseline, tf32_channels_last)", claims.CONTRADICTED)
    torch_only = table.assign(tool="torch", time_share=[0.35, 0.31, 0.008])
    assert evaluate("layout_conversions", classes=torch_only) == (
        "31.0% of kernel time (tf32_channels_last, torch.profiler, not the paper's Nsight tools; largest of baseline, "
        "tf32_channels_last)", claims.REPRODUCED)
    nsys = table.assign(tool="nsys", time_share=[0.35, 0.06, 0.008])
    assert evaluate("layout_conversions", classes=nsys)[0].startswith("6.0% of kernel time (tf32_channels_last, nsys;")


def test_every_note_names_the_variants_its_verdict_is_over(tmp_path):
    for item in CLAIMS["claims"]:
        for variant in ("baseline", *OPTIMIZED):
            assert re.search(rf"\b{variant}\b", item["rule"]), (item["id"], variant)
    # A claims file whose rule does not name them is refused, naming the claim and the variants.
    edited = {**CLAIMS, "optimized_variants": [*OPTIMIZED, "bf16"]}
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(edited))
    with pytest.raises(ValueError, match="the rule of claim 'sm_cycles' does not name bf16"):
        claims.load_claims(path)
    assert claims.load_claims(Path(__file__).resolve().parents[1] / "data" / "paper_claims.yaml") == CLAIMS


@pytest.mark.parametrize("claim_id", ["conv_dominates", "layout_conversions"])
def test_kernel_share_claims_need_gpu_kernels(claim_id):
    table = shares([("baseline", "layout_conversion", 0.5), ("baseline", "conv_fprop", 0.5)])
    assert evaluate(claim_id, classes=table, is_gpu=False) == ("g ran on a CPU (no GPU kernels)",
                                                               claims.NOT_MEASURABLE)
    assert evaluate(claim_id) == ("no training-step kernel profile on g", claims.NOT_MEASURABLE)


def test_an_unknown_measure_is_an_error_naming_it():
    with pytest.raises(ValueError, match="unknown measure 'flops' in claim 'x'"):
        claims.evaluate({"id": "x", "measure": "flops"}, "g", context())


# --- the factor-of-two window and the claims file ---------------------------------------------------------------


@pytest.mark.parametrize("measured, inside", [(50.0, True), (49.999, False), (200.0, True), (200.001, False),
                                              (100.0, True)])
def test_within_a_factor_includes_both_edges(measured, inside):
    assert claims.within(measured, 100.0, 2.0) is inside
    assert claims.magnitude_verdict(True, measured, 100.0, 2.0) == (claims.REPRODUCED if inside
                                                                    else claims.SAME_DIRECTION)
    assert claims.magnitude_verdict(False, measured, 100.0, 2.0) == claims.CONTRADICTED


def test_claims_file_is_checked_for_its_keys(tmp_path):
    assert claims.load_claims(Path(__file__).resolve().parents[1] / "data" / "paper_claims.yaml") == CLAIMS
    for text, message in [("- a list\n", "expected a mapping with a `claims` list"),
                          ("claims: {}\n", "expected a mapping with a `claims` list"),
                          ("claims:\n  - {id: x, claim: c, published_text: p, measure: m}\n",
                           "claim 'x' lacks `rule`"),
                          ("claims:\n  - {claim: c, published_text: p, measure: m, rule: r}\n",
                           "claim '?' lacks `id`")]:
        path = tmp_path / "claims.yaml"
        path.write_text(text)
        with pytest.raises(ValueError, match=re.escape(message)):
            claims.load_claims(path)
