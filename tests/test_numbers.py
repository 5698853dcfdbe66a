"""Numbers a reader can trust: one measurement per (workload, gpu, variant) in every table and figure, and a
direction stated only where the step-time quartiles are apart."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from reporting import derived


def _runs(rows) -> pd.DataFrame:
    """rows: (gpu, variant, median, q1, q3) of one-sample optimizer steps."""
    frame = pd.DataFrame(rows, columns=["gpu", "variant", "train_step_median_ms", "train_step_q1_ms",
                                        "train_step_q3_ms"])
    return frame.assign(train_ms_per_sample=frame["train_step_median_ms"])


def test_speedup_verdict_within_noise_when_quartiles_overlap():
    # The default CPU run: channels_last measured 1.14x over baseline in one run, 0.89x in another; three steps
    # each, whose quartiles overlap the baseline's.
    runs = _runs([("cpu", "baseline", 2177.0, 1900.0, 2300.0), ("cpu", "channels_last", 1902.0, 1850.0, 2250.0),
                  ("cpu", "tf32", 1000.0, 990.0, 1010.0), ("cpu", "slow", 4000.0, 3900.0, 4100.0)])
    verdict = derived.speedup_verdict(runs).set_index("variant")
    assert list(verdict.columns) == ["gpu", "speedup", "low", "high", "within_noise", "verdict"]
    assert verdict.loc["channels_last", "speedup"] == pytest.approx(2177 / 1902)
    assert verdict.loc["channels_last", "low"] == pytest.approx(1900 / 2250)
    assert verdict.loc["channels_last", "high"] == pytest.approx(2300 / 1850)
    assert verdict.loc["channels_last", "within_noise"]
    assert verdict.loc["channels_last", "verdict"] == "within noise"
    assert verdict.loc["tf32", "verdict"] == "faster" and not verdict.loc["tf32", "within_noise"]
    assert verdict.loc["slow", "verdict"] == "slower" and not verdict.loc["slow", "within_noise"]
    assert verdict.loc["baseline", "verdict"] == "reference"


def test_speedup_verdict_scales_step_quartiles_to_samples_and_handles_gaps():
    runs = _runs([("a", "baseline", 200.0, 198.0, 202.0), ("a", "tf32", 40.0, 39.0, 41.0),
                  ("b", "tf32", 40.0, 39.0, 41.0)])
    runs["train_ms_per_sample"] = runs["train_step_median_ms"] / 2  # two micro-batches per optimizer step
    verdict = derived.speedup_verdict(runs).set_index(["gpu", "variant"])
    assert verdict.loc[("a", "tf32"), "low"] == pytest.approx(198 / 41)
    assert verdict.loc[("b", "tf32"), "verdict"] == "not measured"  # no baseline on b
    assert math.isnan(verdict.loc[("b", "tf32"), "speedup"])
    no_quartiles = runs.assign(train_step_q1_ms=float("nan"))
    assert derived.speedup_verdict(no_quartiles).set_index("variant").loc["tf32", "verdict"].iloc[0] == \
        "no spread measured"
    assert derived.speedup_verdict(pd.DataFrame()).empty


def test_speedup_verdict_sampling_phase():
    runs = pd.DataFrame({"gpu": ["g", "g"], "variant": ["baseline", "bf16"], "sample_step_median_ms": [196.0, 74.6],
                         "sample_step_q1_ms": [195.9, 74.5], "sample_step_q3_ms": [196.1, 74.7]})
    verdict = derived.speedup_verdict(runs, "sample").set_index("variant")
    assert verdict.loc["bf16", "speedup"] == pytest.approx(196 / 74.6)
    assert verdict.loc["bf16", "verdict"] == "faster"
