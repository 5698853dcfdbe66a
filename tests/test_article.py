"""The article's abstract from small hand-made tables: what it says per label, and never a NaN for a time that a
reference set did not measure (a set may time training only, as data/reference/brats/h200/ does)."""

from __future__ import annotations

import math

import pandas as pd

from reporting.article import _headlines


def optimization(rows: list[tuple[str, str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["gpu", "variant", "train_ms_per_sample", "sample_step_median_ms"])


def test_headline_gives_both_sampling_steps_and_the_speedup():
    (line,) = _headlines(optimization([("h200", "baseline", 1227.0, 196.0), ("h200", "tf32", 236.0, 88.3)]))
    assert line == ("on h200, training takes 1227 ms per sample with baseline and 236 ms with tf32 (5.2x), "
                    "a sampling step 196 ms and 88.3 ms")


def test_headline_says_which_sampling_step_was_not_measured_instead_of_nan():
    nan = math.nan
    (both,) = _headlines(optimization([("h200_brats", "baseline", 4730.7, nan), ("h200_brats", "tf32", 817.9, nan)]))
    assert both.endswith("(5.78x), sampling not measured with baseline and tf32") and "nan" not in both
    (one,) = _headlines(optimization([("a100", "baseline", 900.0, 150.0), ("a100", "tf32", 300.0, nan)]))
    assert one.endswith("(3x), a sampling step 150 ms with baseline, sampling not measured with tf32")
    assert "nan" not in one
