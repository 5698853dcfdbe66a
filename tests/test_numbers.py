"""Numbers a reader can trust: one measurement per (workload, gpu, variant) in every table and figure, and a
direction stated only where the step-time quartiles are apart."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.patches import Rectangle

from reporting import derived, results
from reporting.registry import BY_ID
from reporting.render import Job
from reporting.results import Results, collect
from planning.plan import SHIPPED_NAMES
from config_settings import output_settings


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
    assert list(verdict.columns) == ["gpu", "speedup", "low", "high", "within_noise", "verdict", "paired", "why"]
    assert not verdict["paired"].any() and verdict["why"].isna().all()  # no paired comparison: unpaired, no reason
    assert verdict.loc["channels_last", "speedup"] == pytest.approx(2177 / 1902)
    assert verdict.loc["channels_last", "low"] == pytest.approx(1900 / 2250)
    assert verdict.loc["channels_last", "high"] == pytest.approx(2300 / 1850)
    assert verdict.loc["channels_last", "within_noise"]
    assert verdict.loc["channels_last", "verdict"] == "within noise"
    assert verdict.loc["tf32", "verdict"] == "faster" and not verdict.loc["tf32", "within_noise"]
    assert verdict.loc["slow", "verdict"] == "slower" and not verdict.loc["slow", "within_noise"]
    assert verdict.loc["baseline", "verdict"] == "reference"


def test_speedup_verdict_takes_the_paired_comparison_where_the_label_has_one():
    """The runs table's <phase>_vs_<reference>_* columns (reporting.results.with_comparisons) decide, whatever the
    two jobs' own times say; a label without them keeps the unpaired ratio, marked so."""
    from reporting.results import with_comparisons

    runs = _runs([("cpu", "baseline", 2177.0, 1900.0, 2300.0), ("cpu", "channels_last", 1000.0, 990.0, 1010.0),
                  ("gpu", "baseline", 100.0, 99.0, 101.0), ("gpu", "channels_last", 50.0, 49.0, 51.0)])
    comparisons = pd.DataFrame([{"gpu": "cpu", "phase": "train", "reference": "baseline", "variant": "channels_last",
                                 "speedup": 0.97, "low": 0.8, "high": 1.2, "rounds": 6,
                                 "verdict": "not measurable under this load", "why": "the interval is wider"}])
    verdict = derived.speedup_verdict(with_comparisons(runs, comparisons)).set_index(["gpu", "variant"])
    cpu = verdict.loc[("cpu", "channels_last")]
    assert (cpu["speedup"], cpu["low"], cpu["high"]) == (0.97, 0.8, 1.2) and bool(cpu["paired"])
    assert cpu["verdict"] == "not measurable under this load" and cpu["why"] == "the interval is wider"
    assert not cpu["within_noise"]
    assert verdict.loc[("cpu", "baseline"), "verdict"] == "reference" and bool(verdict.loc[("cpu", "baseline"),
                                                                                           "paired"])
    gpu = verdict.loc[("gpu", "channels_last")]
    assert gpu["speedup"] == pytest.approx(2.0) and not gpu["paired"] and gpu["verdict"] == "faster"
    assert derived.speedup_verdict(with_comparisons(runs, comparisons), "sample").empty  # no sampling times


def test_each_run_carries_its_median_step_over_its_labels_paired_rounds():
    """<phase>_rounds_median_ms on each runs row: the variant's median over the rounds, the reference's on the
    reference's own row; a label or phase without rounds has none (conformance checks a job against them)."""
    from reporting.results import with_comparisons

    runs = _runs([("cpu", "baseline", 400.0, 390.0, 410.0), ("cpu", "channels_last", 555.0, 550.0, 560.0),
                  ("gpu", "baseline", 100.0, 99.0, 101.0)])
    comparisons = pd.DataFrame([{"gpu": "cpu", "phase": phase, "reference": "baseline", "variant": "channels_last",
                                 "speedup": 1.0, "low": 0.9, "high": 1.1, "rounds": 6, "verdict": "within noise",
                                 "why": None, "variant_median_ms": variant, "reference_median_ms": reference}
                                for phase, variant, reference in (("train", 384.2, 380.2), ("sample", 125.1, 108.7))])
    paired = with_comparisons(runs, comparisons).set_index(["gpu", "variant"])
    assert paired.loc[("cpu", "channels_last"), ["train_rounds_median_ms", "sample_rounds_median_ms"]].tolist() == \
        [384.2, 125.1]
    assert paired.loc[("cpu", "baseline"), ["train_rounds_median_ms", "sample_rounds_median_ms"]].tolist() == \
        [380.2, 108.7]
    assert paired.loc[("gpu", "baseline"), ["train_rounds_median_ms", "sample_rounds_median_ms"]].isna().all()


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


# -- one number per (gpu, variant) on the shipped H200 set, read through the collector ---------------------------
REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "data" / "reference" / "wholehead" / "h200"


@pytest.fixture(scope="module")
def h200() -> Results:
    files = sorted(p for p in H200.rglob("*") if p.is_file() and p.name.endswith(SHIPPED_NAMES))
    return Results.from_tables(collect([], files))


def _build(results: Results, output_id: str):
    output = BY_ID[output_id]
    return importlib.import_module(output.module).build(Job(output, results, {}, output_settings(output)))


def _drawn(ax) -> list[float]:
    """Every bar's length in an axes, whichever way the bars lie."""
    rects = [p for p in ax.patches if isinstance(p, Rectangle)]
    return [abs(r.get_height()) for r in rects] + [abs(r.get_width()) for r in rects]


def _shows_all(values, drawn) -> bool:
    return all(any(math.isclose(v, d, rel_tol=1e-6) for d in drawn) for v in values)


def test_tables_and_figures_agree_on_every_shipped_h200_number(h200):
    train_json = {p.parent.name: json.loads(p.read_text()) for p in H200.glob("*/train.json")}
    sample_json = {p.parent.name: json.loads(p.read_text()) for p in H200.glob("*/sample.json")}
    tab04 = _build(h200, "tab04_optimization")
    tab07 = _build(h200, "tab07_frontier")
    four = tab04.frame[tab04.frame["gpu"] == "h200"].set_index("variant")
    seven = tab07.frame[tab07.frame["gpu"] == "h200"].set_index("variant")
    assert set(seven.index) <= set(four.index) == set(train_json)
    for variant, data in train_json.items():  # the run's own train.json is the one number
        assert four.loc[variant, "train_ms_per_sample"] == pytest.approx(data["train_ms_per_sample"], rel=1e-9)
        assert four.loc[variant, "sample_step_median_ms"] == pytest.approx(
            sample_json[variant]["step_time"]["median_ms"], rel=1e-9)
        assert four.loc[variant, "sample_verdict"] in ("reference", "faster", "slower", "within noise")
    for variant in seven.index:
        for column in ("train_ms_per_sample", "train_speedup_vs_baseline", "train_speedup_low", "train_speedup_high"):
            assert seven.loc[variant, column] == pytest.approx(four.loc[variant, column], rel=1e-9), (variant, column)
        assert seven.loc[variant, "train_verdict"] == four.loc[variant, "train_verdict"]
        assert seven.loc[variant, "sample_step_ms"] == pytest.approx(four.loc[variant, "sample_step_median_ms"])
    # A speed-up from the paired rounds where comparison.json has the rung, else from the two jobs' medians.
    paired = {c["variant"]: c for c in json.loads((H200 / "comparison.json").read_text())["phases"]["train"][
        "comparisons"] if c["reference"] == "baseline"}
    for variant in ("tf32", "frontier_graphed"):
        assert four.loc[variant, "train_speedup_vs_baseline"] == pytest.approx(paired[variant]["speedup"], rel=1e-9)
        assert (four.loc[variant, "train_speedup_low"], four.loc[variant, "train_speedup_high"]) == pytest.approx(
            (paired[variant]["low"], paired[variant]["high"]), rel=1e-9)
    assert "channels_last" not in paired  # the paper's channels-last rung: not one of the ladder's rungs
    assert four.loc["channels_last", "train_speedup_vs_baseline"] == pytest.approx(
        train_json["baseline"]["train_ms_per_sample"] / train_json["channels_last"]["train_ms_per_sample"], rel=1e-9)
    # The ladder's bench rows are its runs (one measurement of the bench, 2026-12-02): no other run to state.
    bench = pd.read_csv(H200 / "bench.csv").set_index("variant")
    for variant in bench.index:
        assert bench.loc[variant, "train_ms_per_sample"] == pytest.approx(
            train_json[variant]["train_ms_per_sample"], rel=1e-9), variant
    # The figures draw the same training times.
    for output_id, variants in (("fig08_end_to_end", list(four.index)), ("fig11_optimization_ladder",
                                                                         list(seven.index))):
        fig = _build(h200, output_id)
        drawn = [_drawn(ax) for ax in fig.get_axes()]
        expected = [four.loc[v, "train_ms_per_sample"] for v in variants]
        assert any(_shows_all(expected, bars) for bars in drawn), output_id
        plt.close(fig)


def test_fig11_labels_the_shipped_ladders_volumes_per_hour_by_what_was_swept(h200):
    """The shipped ladder swept batches 1-8 for tf32 and frontier_graphed and batch 1 alone for the other rungs: the
    throughput panel labels the first with their best batch, the others "(b1)", each from its sample.json."""
    from reporting.bench import rate_text

    sample = {p.parent.name: json.loads(p.read_text()) for p in H200.glob("*/sample.json")}
    fig = _build(h200, "fig11_optimization_ladder")
    try:
        [ax] = [ax for ax in fig.get_axes() if ax.get_title(loc="left") == "volumes per hour"]
        labels = {t.get_text() for t in ax.texts}
        ceilings = [line.get_xdata()[0] for line in ax.get_lines()]
    finally:
        plt.close(fig)
    # The FLOP ceiling, dashed: every U-Net evaluation of a volume at the measured bf16 rate (bench.csv's seconds per
    # volume times its share of that rate, the same for every rung), above every rung's rate there.
    bench = pd.read_csv(H200 / "bench.csv")
    floor_s = (bench["sample_volume_s"] * bench["sample_fraction_of_bf16_rate"]).median()
    assert ceilings == pytest.approx([3600 / floor_s])
    for variant in pd.read_csv(H200 / "bench.csv")["variant"]:
        sweep = sample[variant]["throughput"]
        if len(sweep["batches"]) > 1:
            expected = f"{rate_text(sweep['volumes_per_hour_best'])} (b{sweep['best_batch']})"
        else:
            expected = f"{rate_text(sweep['batches'][0]['volumes_per_hour'])} (b1)"
        assert expected in labels, variant
    assert "778 (b4)" in labels and "73 (b1)" in labels


def test_the_ladder_page_quotes_the_shipped_bench():
    """docs/optimization-ladder.md's table of the H200's ladder holds bench.csv's numbers, row for row, as rounded
    there: a new bench shipped without the page following fails here."""
    page = (REPO / "docs" / "optimization-ladder.md").read_text()
    section = page[page.index("## The H200's ladder"):]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| `")]
    bench = pd.read_csv(H200 / "bench.csv").set_index("variant")
    assert [cells[0].strip().strip("`") for cells in rows] == list(bench.index)
    for cells in rows:
        variant, train, base, tf32, share, step, volume, rate, peak = (cell.strip() for cell in cells)
        row = bench.loc[variant.strip("`")]
        assert float(train) == round(row["train_ms_per_sample"], 1), variant
        for cell, reference in ((base, "baseline"), (tf32, "tf32")):  # "5.31 [5.30-5.32]" where paired
            value, *interval = cell.replace("[", " ").replace("]", " ").replace("-", " ").split()
            column = f"train_speedup_vs_{reference}"
            assert float(value) == round(row[column], 2), variant
            if pd.notna(row[f"{column}_low"]) and row[column] != 1.0:
                assert [float(x) for x in interval] == [round(row[f"{column}_low"], 2),
                                                         round(row[f"{column}_high"], 2)], variant
            else:
                assert interval == [], variant
        assert float(share.rstrip(" %")) == round(100 * row["train_fraction_of_bf16_rate"], 1), variant
        assert float(step) == round(row["sample_step_ms"], 2) and float(volume) == round(row["sample_volume_s"], 2)
        assert float(peak) == round(row["train_peak_gib"], 2), variant
        one = float(rate.split()[0].replace(",", ""))
        assert one == round(row["sample_volumes_per_hour_b1"]), variant
        if pd.notna(row["sample_volumes_per_hour_best"]):
            assert f"({round(row['sample_volumes_per_hour_best'])} at {int(row['sample_best_batch'])})" in rate
        else:
            assert rate == str(round(row["sample_volumes_per_hour_b1"])), variant




def test_a_job_row_carries_its_speed_probe_as_the_mean_of_before_and_after():
    """The fixed single-core workload's time before and after a job's timed steps (measurement.conditions): their
    mean on the runs row; NaN for a job written before the probe, or with none recorded."""
    data = {"conditions": {"before": {"cpu_count": 2, "speed_probe_ms": 9.0}, "after": {"speed_probe_ms": 11.0},
                           "changes": [], "other_load_cores": 0.1}}
    columns = results._load_columns("train", data)
    assert columns["train_speed_probe_ms"] == 10.0 and columns["train_other_load_cores"] == 0.1
    assert math.isnan(results._load_columns("sample", {"conditions": {"before": {"cpu_count": 2}}})[
        "sample_speed_probe_ms"])
    assert math.isnan(results._load_columns("sample", {})["sample_speed_probe_ms"])
