"""Paired comparisons (measurement.pairing, measurement.conditions, medddpm.comparison, measurement.verdicts,
measurement.comparison_groups): the sign-test interval against binomial sums written out by hand, the verdict at each of
its edges, the stop rule, the machine's conditions read from stand-in /proc and nvidia-smi output, and the comparison
jobs (a job per group, one that judges them) on real steps and on scripted loads."""

import json
import math
import os
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import random_prepared_dataset

from measurement import conditions, pairing, verdicts
from medddpm import comparison, comparison_workers
from measurement import comparison_groups
from medddpm.settings import ComparisonSettings


def binomial_tail(n: int, k: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), summed here from math.comb."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


@pytest.mark.parametrize("n, expected", [(5, None), (6, (1, 6)), (10, (2, 9)), (20, (6, 15)), (40, (14, 27))])
def test_the_median_interval_takes_the_order_statistics_a_sign_test_allows(n, expected):
    assert pairing.median_interval_ranks(n, 0.95) == expected
    if expected:
        k = expected[0]
        assert 1 - 2 * binomial_tail(n, k - 1) >= 0.95 > 1 - 2 * binomial_tail(n, k)  # k is the largest that covers
        assert pairing.coverage(n, k) == pytest.approx(1 - 2 * binomial_tail(n, k - 1))
    assert pairing.coverage(6, 1) == pytest.approx(62 / 64)  # [min, max] of 6: all but the two one-sided extremes


def test_the_ratio_is_the_median_of_the_rounds_and_its_interval_their_order_statistics():
    reference = [100.0, 100.0, 100.0, 100.0, 100.0, 100.0]
    variant = [50.0, 40.0, 80.0, 25.0, 100.0, 62.5]  # ratios 2, 2.5, 1.25, 4, 1, 1.6
    ratio = pairing.paired_ratio(reference, variant, 0.95)
    assert ratio.rounds == 6
    assert ratio.speedup == pytest.approx(math.sqrt(1.6 * 2.0))  # the median of 1, 1.25, 1.6, 2, 2.5, 4 on a log scale
    assert (ratio.low, ratio.high) == pytest.approx((1.0, 4.0))  # ranks 1 and 6
    assert ratio.coverage == pytest.approx(62 / 64)
    assert ratio.half_width == pytest.approx(math.log(4.0) / 2)
    few = pairing.paired_ratio(reference[:5], variant[:5], 0.95)
    assert few.low is None and few.half_width == math.inf and few.speedup == pytest.approx(2.0)
    with pytest.raises(ValueError, match="as many reference times as variant times"):
        pairing.paired_ratio([1.0, 2.0], [1.0], 0.95)


def _ratio(speedup, low, high):
    return pairing.Ratio(10, speedup, low, high, 0.98)


@pytest.mark.parametrize("speedup, low, high, expected", [
    (1.0, 0.95, 1.05, pairing.WITHIN),
    (1.05, 1 / 1.1, 1.1, pairing.WITHIN),  # the band's edges themselves are inside
    (1.2, 1.1001, 1.3, pairing.FASTER),
    (2.6, 1.2, 3.1, pairing.FASTER),  # wide, but wholly beyond the band: load could not have made it
    (0.8, 0.75, 0.9, pairing.SLOWER),
    (1.1, 1.05, 1.15, pairing.UNMEASURABLE),  # across the upper edge: a 10 % difference could hide in it
    (1.15, 1.09, 1.2, pairing.UNMEASURABLE),  # beyond the band by its median, not by its interval
    (1 / 1.1, 0.87, 0.95, pairing.UNMEASURABLE),
    (1.0, 0.8, 1.25, pairing.UNMEASURABLE),  # across both edges
])
def test_the_verdict_is_the_intervals_at_each_of_its_edges(speedup, low, high, expected):
    assert pairing.verdict(_ratio(speedup, low, high), 0.10) == expected
    if expected == pairing.UNMEASURABLE:
        reason = pairing.undecided_reason(_ratio(speedup, low, high), 0.95, 0.10)
        crossed = [edge for edge in ("0.909", "1.1") if float(edge) > low and float(edge) < high]
        assert reason == (f"the interval [{low:.3g}, {high:.3g}] reaches across the band's edge "
                          f"{' and '.join(crossed)} (+-10 %)")


def test_a_narrow_interval_across_the_edge_is_at_the_edge_and_a_wide_one_not_measurable():
    """Given the comparison's precision: an interval across the band's edge that is narrower than it was measured (a
    difference of about the band's size, which no load made); a wider one stays not measurable under this load, and
    without a precision every interval across an edge does. The shipped CPU set's sampling comparison: [0.906,
    0.934] in 6 rounds, half-width 1.5 %."""
    narrow, wide = _ratio(0.924, 0.906, 0.934), _ratio(0.90, 0.72, 1.02)
    assert pairing.verdict(narrow, 0.10, precision=0.03) == pairing.AT_EDGE
    assert pairing.undecided_reason(narrow, 0.95, 0.10, 0.03) == (
        "the interval [0.906, 0.934] reaches across the band's edge 0.909 (+-10 %), narrower than +-3 %: a "
        "difference of about the band's size")
    assert pairing.verdict(narrow, 0.10) == pairing.UNMEASURABLE
    assert pairing.verdict(wide, 0.10, precision=0.03) == pairing.UNMEASURABLE
    assert pairing.verdict(_ratio(1.2, 1.1001, 1.3), 0.10, precision=0.5) == pairing.FASTER  # decided: unchanged


def test_an_interval_that_ends_on_an_edge_is_decided_only_where_it_lies_inside():
    """The band's edges, hit exactly: an interval from the upper edge up is not wholly beyond it (not faster), one
    from below up to the lower edge not wholly below (not slower); each says which edge it touches. An interval whose
    half-width is the precision itself counts as narrow (at the edge; the rounds stop)."""
    low_edge, high_edge = 1 / 1.1, 1.1
    touching_high, touching_low = _ratio(1.2, high_edge, 1.3), _ratio(0.85, 0.8, low_edge)
    assert pairing.verdict(touching_high, 0.10) == pairing.verdict(touching_low, 0.10) == pairing.UNMEASURABLE
    assert pairing.undecided_reason(touching_high, 0.95, 0.10).endswith("band's edge 1.1 (+-10 %)")
    assert pairing.undecided_reason(touching_low, 0.95, 0.10).endswith("band's edge 0.909 (+-10 %)")
    narrow = _ratio(0.92, 0.9, 0.94)
    exactly = narrow.half_width
    assert pairing.verdict(narrow, 0.10, precision=exactly) == pairing.AT_EDGE
    assert pairing.undecided_reason(narrow, 0.95, 0.10, exactly).endswith("a difference of about the band's size")
    rule = pairing.StopRule(0.95, precision=exactly, band=0.10, min_rounds=6, max_rounds=20, budget_seconds=10.0)
    assert rule.stop([narrow], 6, 1.0) == "settled"


def test_the_median_interval_takes_the_innermost_ranks_the_confidence_allows():
    """At a low confidence the interval narrows towards the middle; a confidence equal to a coverage is met by it."""
    assert pairing.median_interval_ranks(6, 0.5) == (2, 5)  # 78.1 % at k = 2, 31.3 % at k = 3
    assert pairing.median_interval_ranks(6, pairing.coverage(6, 2)) == (2, 5)
    assert pairing.median_interval_ranks(20, 0.5) == (8, 13)
    assert pairing.paired_ratio([100.0] * 3, [50.0] * 3, 0.95) == pairing.Ratio(3, 2.0, None, None, None)
    assert pairing.halves_disagree([100.0], [50.0], 0.95) is None  # one round: no halves


def _rounds(reference_ms, variant_ms, reference_load=None, variant_load=None) -> pd.DataFrame:
    rows = []
    for k, (r, v) in enumerate(zip(reference_ms, variant_ms)):
        rows.append({"round": k, "variant": "baseline", "step_ms": r,
                     "other_load_cores": 0.0 if reference_load is None else reference_load})
        rows.append({"round": k, "variant": "other", "step_ms": v,
                     "other_load_cores": 0.0 if variant_load is None else variant_load})
    return pd.DataFrame(rows)


def test_judging_a_comparison_records_its_interval_and_says_why_it_is_not_decided():
    settings = ComparisonSettings(**SETTINGS)
    differ = {"baseline": {"switches": {"x": 0}, "switches_effective": {"x": True}},
              "other": {"switches": {"x": 1}, "switches_effective": {"x": True}}}
    steady = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2] * 2
    faster = verdicts.judge("baseline", "other", _rounds(steady, [50.0] * 12), settings, differ, [])
    ratio = pairing.paired_ratio(steady, [50.0] * 12, 0.95)
    assert faster == {"reference": "baseline", "variant": "other", "rounds": 12, "speedup": ratio.speedup,
                      "low": ratio.low, "high": ratio.high, "coverage": ratio.coverage,
                      "half_width": ratio.half_width, "halves_disagree": False, "load_difference_cores": 0.0,
                      "verdict": pairing.FASTER, "why": None}
    # The variant's effect moved halfway through (the load changed one side): not measurable, whatever the median.
    drifting = [50.0, 51.0, 49.0, 50.5, 49.5, 50.2, 80.0, 81.0, 79.0, 80.5, 79.5, 80.2]
    moved = verdicts.judge("baseline", "other", _rounds(steady, drifting), settings, differ, [])
    assert moved["verdict"] == pairing.UNMEASURABLE and moved["halves_disagree"] is True
    assert moved["why"] == "the first and the second half of the rounds give intervals that do not overlap"
    # Too few rounds for an interval: no half-width, and the reason names the confidence.
    short = verdicts.judge("baseline", "other", _rounds(steady[:3], [50.0] * 3), settings, differ, [])
    assert short["half_width"] is None and short["coverage"] is None
    assert short["why"] == "3 rounds give no interval at 95 %"
    # The load the other processes put on each side, as a median difference in cores.
    loaded = verdicts.judge("baseline", "other", _rounds(steady, [50.0] * 12, 1.5, 0.25), settings, differ, [])
    assert loaded["load_difference_cores"] == 1.25 and loaded["why"] == (
        "the two sides ran under different load: other processes used +1.25 cores more during baseline's steps")


def test_a_variant_whose_switches_do_nothing_here_is_not_measurable_here_and_says_which():
    settings = ComparisonSettings(**SETTINGS)
    rounds = _rounds([100.0] * 6, [99.0] * 6)
    idle = {"baseline": {"switches": {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False},
                         "switches_effective": {}},
            "other": {"switches": {"cudnn_tf32": True, "matmul_tf32": True, "channels_last": False},
                      "switches_effective": {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": True}}}
    judged = verdicts.judge("baseline", "other", rounds, settings, idle, [])
    assert judged["verdict"] == verdicts.NO_EFFECT and judged["why"] == (
        "every switch that sets other apart from baseline (cudnn_tf32, matmul_tf32) has no effect on this device")
    # A switch the device's record does not list is taken to act: the rounds decide.
    del idle["other"]["switches_effective"]["matmul_tf32"]
    assert verdicts.judge("baseline", "other", rounds, settings, idle, [])["verdict"] == pairing.WITHIN


def test_no_interval_is_not_measurable():
    assert pairing.verdict(pairing.Ratio(3, 2.0, None, None, None), 0.10) == pairing.UNMEASURABLE
    assert pairing.undecided_reason(pairing.Ratio(3, 2.0, None, None, None), 0.95, 0.10) == \
        "3 rounds give no interval at 95 %"


def test_the_rounds_stop_when_every_comparison_is_settled_or_a_limit_ends_them():
    rule = pairing.StopRule(0.95, precision=0.03, band=0.10, min_rounds=6, max_rounds=20, budget_seconds=10.0)
    narrow, wide = _ratio(1.0, 0.98, 1.02), _ratio(1.0, 0.9, 1.1)
    assert rule.stop([narrow], 5, 1.0) is None  # min_rounds always run
    assert rule.stop([narrow], 6, 1.0) == "settled"
    assert rule.stop([narrow, wide], 6, 1.0) is None  # every comparison must be settled
    assert rule.stop([_ratio(2.6, 1.2, 3.1)], 6, 1.0) == "settled"  # decided, however wide
    assert rule.stop([_ratio(1.1, 1.08, 1.12)], 6, 1.0) == "settled"  # on the band's edge: more rounds would not help
    assert rule.stop([wide], 6, 10.0) == "budget"
    assert rule.stop([wide], 5, 50.0) is None  # the budget does not cut min_rounds short
    assert rule.stop([wide], 20, 1.0) == "max_rounds"


def test_halves_that_disagree_are_found():
    steady = [100.0] * 12
    assert pairing.halves_disagree(steady, [50.0, 51.0, 49.0, 50.5, 49.5, 50.2] * 2, 0.95) is False
    drifting = [50.0, 51.0, 49.0, 50.5, 49.5, 50.2, 80.0, 81.0, 79.0, 80.5, 79.5, 80.2]
    assert pairing.halves_disagree(steady, drifting, 0.95) is True
    assert pairing.halves_disagree(steady[:10], drifting[:10], 0.95) is None  # halves of 5 give no 95 % interval


# -- the machine's conditions --------------------------------------------------------------------------------------
def test_other_load_is_the_machines_busy_time_less_this_processs_own():
    clock, busy, own = iter([10.0, 12.0]), iter([100.0, 103.0]), iter([5.0, 6.5])
    load = conditions.OtherLoad(busy=lambda: next(busy), own=lambda: next(own), clock=lambda: next(clock))
    load.start()
    assert load.stop() == pytest.approx((3.0 - 1.5) / 2.0)  # 1.5 CPU seconds of others in 2 s: 0.75 cores
    clock, busy, own = iter([0.0, 1.0]), iter([10.0, 10.2]), iter([1.0, 1.25])
    tick = conditions.OtherLoad(busy=lambda: next(busy), own=lambda: next(own), clock=lambda: next(clock))
    tick.start()
    assert tick.stop() == 0.0  # a tick's rounding below zero is no load
    blind = conditions.OtherLoad(busy=lambda: None, own=lambda: 0.0, clock=iter([0.0, 1.0]).__next__)
    blind.start()
    assert blind.stop() is None


def test_proc_stat_is_read_for_busy_time_and_runnable_processes(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 20 30 400 50 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nprocs_running 3\nprocs_blocked 0\n")
    assert conditions.busy_cpu_seconds(stat) == pytest.approx((100 + 20 + 30 + 6 + 7 + 8) / conditions.TICKS)
    assert conditions.runnable_processes(stat) == 3
    assert conditions.busy_cpu_seconds(tmp_path / "missing") is None
    live = conditions.busy_cpu_seconds()
    assert live is None or live > 0


def test_the_gpu_state_is_parsed_with_its_slowdowns_and_other_processes():
    state = conditions.parse_gpu_state("1980, 2619, 54, 612.34, 0x0000000000000024, 99")
    assert state["sm_clock_mhz"] == 1980.0 and state["memory_clock_mhz"] == 2619.0 and state["temperature_c"] == 54
    assert state["power_w"] == 612.34 and state["utilization_pct"] == 99.0
    # 0x4, the software power cap, is a busy board's normal state: no slowdown.
    assert state["throttle_reasons"] == 0x24 and state["slowdowns"] == ["software thermal slowdown"]
    partial = conditions.parse_gpu_state("1980, [N/A], 54, [N/A], [N/A], 10")
    assert "memory_clock_mhz" not in partial and "slowdowns" not in partial
    apps = conditions.parse_compute_apps(["4242, python3, 8123", "77, /usr/bin/other, [N/A]", "garbage"], own_pid=4242)
    assert apps == [{"pid": 77, "name": "/usr/bin/other", "used_memory_mib": None}]


def test_gpu_state_asks_nvidia_smi_for_the_jobs_gpu_and_falls_back_to_the_newer_field_name():
    calls = []

    def run(command, **_):
        calls.append(command)
        if any("clocks_throttle_reasons" in part for part in command):
            raise conditions.subprocess.CalledProcessError(2, command)
        if any(part.startswith("--query-gpu") for part in command):
            return SimpleNamespace(stdout="1755, 2619, 40, 300.0, 0x0000000000000001, 0\n")
        return SimpleNamespace(stdout="9, python3, 100\n")

    state = conditions.gpu_state("00000000:1B:00.0", run)
    assert state["sm_clock_mhz"] == 1755.0 and state["other_processes"][0]["pid"] == 9
    assert all(command[-2:] == ["-i", "00000000:1B:00.0"] for command in calls)
    assert any("clocks_event_reasons.active" in part for part in calls[1])


def test_what_changed_between_two_snapshots():
    before = {"cpu_set": [0, 1], "gpu": {"other_processes": [], "slowdowns": []}}
    after = {"cpu_set": [0, 1], "gpu": {"other_processes": [{"pid": 5, "name": "trainer"}],
                                        "slowdowns": ["hardware thermal slowdown"]}}
    assert conditions.changes(before, before) == []
    assert conditions.changes(before, after) == ["other processes started on the GPU: trainer",
                                                 "the GPU throttled (hardware thermal slowdown)"]
    assert conditions.changes({"cpu_set": [0, 1]}, {"cpu_set": [0]}) == ["the CPU set changed from [0, 1] to [0]"]
    here = conditions.snapshot()
    assert here["cpu_set"] and here["cpu_count"] >= 1 and len(here["load_average"]) == 3 and "gpu" not in here
    assert here["speed_probe_ms"] > 0


def test_the_speed_probe_is_the_median_of_its_repeats_and_times_its_loop(monkeypatch):
    times = iter([5.0, 9.0, 7.0])
    assert conditions.speed_probe(3, once=lambda: next(times)) == 7.0
    # One run of the loop is the clock's reading after it less the one before, in ms (a scripted clock: a timing
    # assertion would be the machine's load, not the code).
    readings = iter([100.0, 100.0123])
    monkeypatch.setattr(conditions.time, "perf_counter", lambda: next(readings))
    assert conditions._probe_once(1000) == pytest.approx(12.3)
    monkeypatch.undo()
    assert conditions.speed_probe(1) > 0


# -- the comparison job -------------------------------------------------------------------------------------------
SETTINGS = dict(references=("baseline",), phases=("train", "sample"), confidence=0.95, precision=0.03, band=0.10,
                min_rounds=6, max_rounds=8, budget_seconds=1.0, warmup_steps=1, load_difference_cores=0.5)


class Scripted:
    """A side whose step takes `ms` times the machine's slowdown at that moment (a load that comes and goes, the
    same for both sides of a round), reporting the others' load it saw."""

    def __init__(self, ms: float, load):
        self.ms, self.load = ms, load

    def timed(self):
        factor = self.load()
        return self.ms * factor, factor - 1


def test_paired_rounds_recover_the_effect_under_a_load_that_would_flip_separate_jobs():
    """The load triples halfway through: timed in two jobs, one before and one after, the variant (truly 1.25x
    faster) would come out 2.4x slower; paired, every round's ratio is 1.25 and the verdict is 'faster'."""
    step = iter(range(1000))

    def load() -> float:
        return 1.0 if next(step) < 8 else 3.0

    sides = {"baseline": Scripted(100.0, load), "fast": Scripted(80.0, load)}
    switches = {name: {"switches": {"x": name}, "switches_effective": {"x": True}} for name in sides}
    settings = ComparisonSettings(**(SETTINGS | {"max_rounds": 12, "min_rounds": 12}))
    frame, why, _ = comparison.measure_phase("train", sides, settings)
    assert why == "max_rounds" and len(frame) == 24
    assert list(frame["variant"][:4]) == ["baseline", "fast", "fast", "baseline"]  # the leader rotates
    judged = verdicts.judge("baseline", "fast", frame, settings, switches, [])
    assert judged["speedup"] == pytest.approx(1.25) and judged["verdict"] == pairing.FASTER
    assert judged["halves_disagree"] is False and judged["load_difference_cores"] == 0.0
    separate = 100.0 * 1.0 / (80.0 * 3.0)  # the baseline's job before the load, the variant's after it
    assert separate < 1 / 2.4 + 1e-9


def test_a_variant_measured_at_the_bands_edge_says_so_with_its_interval():
    """A variant 10 % slower, give or take half a per cent from round to round, on a quiet machine: its narrow
    interval lies across the band's edge (0.909). That was measured, not made by load: "at the band's edge"."""
    jitter = iter([109.5, 110.5] * 20)
    sides = {"baseline": Scripted(100.0, lambda: 1.0), "edge": Scripted(110.0, lambda: 1.0)}
    sides["edge"].timed = lambda: (next(jitter), 0.0)
    switches = {name: {"switches": {"x": name}, "switches_effective": {"x": True}} for name in sides}
    settings = ComparisonSettings(**SETTINGS)
    frame, stopped, _ = comparison.measure_phase("train", sides, settings)
    judged = verdicts.judge("baseline", "edge", frame, settings, switches, [])
    assert stopped == "settled" and judged["verdict"] == pairing.AT_EDGE
    assert judged["low"] < 1 / 1.1 < judged["high"] and judged["why"].endswith(
        "narrower than +-3 %: a difference of about the band's size")


def test_a_comparison_under_a_load_that_hits_one_side_says_so():
    """Another process that runs only while the baseline's steps run (one core more) would make an equal variant
    look twice as fast, with a narrow interval: the recorded load tells the two sides apart."""
    sides = {"baseline": Scripted(100.0, lambda: 2.0), "other": Scripted(100.0, lambda: 1.0)}
    switches = {name: {"switches": {"x": name}, "switches_effective": {"x": True}} for name in sides}
    settings = ComparisonSettings(**SETTINGS)
    frame, _, _ = comparison.measure_phase("train", sides, settings)
    judged = verdicts.judge("baseline", "other", frame, settings, switches, [])
    assert judged["verdict"] == pairing.UNMEASURABLE and "different load" in judged["why"]
    changed = verdicts.judge("baseline", "other", frame, settings, switches,
                             ["other processes started on the GPU: x"])
    assert changed["verdict"] == pairing.UNMEASURABLE and changed["why"] == "other processes started on the GPU: x"


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """The comparison job on a tiny workload on the CPU: baseline, channels_last, and tf32 (no effect on a CPU), two
    processes at once: baseline beside channels_last, then baseline beside tf32 (the one-group job runs in the
    tiny workflow's run)."""
    from config_settings import config_section
    from medddpm.build import ModelSpec
    from medddpm.runs import start_run
    from medddpm.settings import DeviceSpec, SampleSettings, TrainSettings, from_mapping
    from medddpm.switches import Variant
    from conftest import REPO

    dataset = random_prepared_dataset(tmp_path_factory)
    config = {name: config_section(name, "tests/tiny.yaml") for name in ("model", "diffusion", "train", "sample",
                                                                          "variants")}
    spec = DeviceSpec("cpu", "cpu", None, False)
    runs = {name: start_run(spec, Variant.from_config(name, config["variants"][name]), REPO, {})
            for name in ("baseline", "channels_last", "tf32")}
    folder = tmp_path_factory.mktemp("compared")
    settings = ComparisonSettings(**SETTINGS, processes_at_once=2)
    planned = comparison_groups.groups(list(runs), settings.references, settings.processes_at_once)
    files = [(folder / f"{number}.json", folder / f"{number}.csv") for number in range(1, len(planned) + 1)]
    for number, (members, (summary, rounds)) in enumerate(zip(planned, files)):
        comparison.time_group(number, members, ModelSpec.from_params(config["model"], config["diffusion"]),
                              from_mapping(TrainSettings, config["train"], "train"),
                              from_mapping(SampleSettings, config["sample"], "sample"), settings, runs, dataset,
                              summary, rounds, count=len(planned))
    verdicts.merge_groups(files, planned, settings, folder / "comparison.json", folder / "comparison_rounds.csv")
    return (json.loads((folder / "comparison.json").read_text()), pd.read_csv(folder / "comparison_rounds.csv"),
            files, planned, settings)


def test_the_job_times_every_variant_in_every_round_of_its_group(compared):
    record, rounds, *_ = compared
    for phase in ("train", "sample"):
        mine = rounds[rounds["phase"] == phase]
        groups = record["phases"][phase]["groups"]
        assert [group["variants"] for group in groups] == [["baseline", "channels_last"], ["baseline", "tf32"]]
        for number, group in enumerate(groups):
            own = mine[mine["group"] == number]
            assert SETTINGS["min_rounds"] <= group["rounds"] == own["round"].nunique() <= SETTINGS["max_rounds"]
            assert group["stopped"] in ("settled", "budget", "max_rounds")
            members = own.groupby("round")["variant"].apply(sorted).tolist()
            assert members == [sorted(group["variants"])] * group["rounds"]
        assert record["phases"][phase]["rounds"] == max(group["rounds"] for group in groups)
        assert (mine["step_ms"] > 0).all()
        judged = {c["variant"]: c for c in record["phases"][phase]["comparisons"]}
        assert set(judged) == {"channels_last", "tf32"}
        assert (judged["channels_last"]["group"], judged["tf32"]["group"]) == (0, 1)
        by_round = mine[mine["group"] == 0].pivot(index="round", columns="variant", values="step_ms")
        logs = sorted(math.log(a / b) for a, b in zip(by_round["baseline"], by_round["channels_last"]))
        n = len(logs)
        middle = (logs[(n - 1) // 2] + logs[n // 2]) / 2
        assert judged["channels_last"]["speedup"] == pytest.approx(math.exp(middle), rel=1e-5)  # the CSV: 6 digits
        # Whatever this machine measures: every verdict the rounds can give (a narrow interval across the band's
        # edge is AT_EDGE; a clean-clone CI run measured channels_last there).
        assert judged["channels_last"]["verdict"] in (pairing.FASTER, pairing.SLOWER, pairing.WITHIN,
                                                      pairing.UNMEASURABLE, pairing.AT_EDGE)
        # TF32 does nothing on a CPU: its comparison says so instead of comparing noise with noise.
        assert judged["tf32"]["verdict"] == verdicts.NO_EFFECT and "cudnn_tf32" in judged["tf32"]["why"]
    assert record["settings"]["comparison"]["band"] == 0.10
    assert set(record["variants"]) == {"baseline", "channels_last", "tf32"}
    assert record["conditions"]["before"]["cpu_set"] and record["conditions"]["changes"] == []
    assert "other_load_cores" in rounds and rounds["other_load_cores"].notna().all()


def test_each_variant_is_timed_in_a_process_of_its_own_that_ends_with_the_job(compared):
    """One process per variant, none of them the job's: nothing one variant leaves in a process (cuDNN's plan
    cache, dynamo's and inductor's caches, process-wide switches) reaches another's steps."""
    import os

    record, *_ = compared
    pids = [pid for variant in record["variants"].values() for pid in variant["processes"]]
    assert len(set(pids)) == len(pids) == 4 and os.getpid() not in pids  # baseline's in each of the two groups
    assert [len(variant["processes"]) for variant in record["variants"].values()] == [2, 1, 1]
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_record_keeps_each_groups_conditions_and_names_the_group_of_a_change(compared, tmp_path):
    """Another process on the GPU while the second group ran: the record says so under that group; the first
    group's verdicts stay as they were, and tf32 (no effect on a CPU) still says that first."""
    record, _, files, planned, settings = compared
    changed = json.loads(files[1][0].read_text())
    changed["conditions"]["changes"] = ["other processes started on the GPU: 4242 python3"]
    copied = [files[0], (tmp_path / "2.json", files[1][1])]
    copied[1][0].write_text(json.dumps(changed))
    verdicts.merge_groups(copied, planned, settings, tmp_path / "comparison.json", tmp_path / "rounds.csv")
    merged = json.loads((tmp_path / "comparison.json").read_text())
    for phase in ("train", "sample"):
        before = {c["variant"]: c for c in record["phases"][phase]["comparisons"]}
        after = {c["variant"]: c for c in merged["phases"][phase]["comparisons"]}
        assert after["channels_last"] == before["channels_last"]  # group 1
        assert after["tf32"]["verdict"] == verdicts.NO_EFFECT  # a switch that does nothing here says so first
    assert merged["conditions"]["changes"] == ["group 2: other processes started on the GPU: 4242 python3"]
    assert [group["conditions"]["changes"] for group in merged["groups"]] == [
        [], ["other processes started on the GPU: 4242 python3"]]
    # each group's own provenance (its machine and GPU: on a cluster the groups' jobs may run on different nodes)
    assert [group["provenance"] for group in merged["groups"]] == [
        json.loads(files[0][0].read_text())["provenance"], changed["provenance"]]
    assert merged["provenance"] == merged["groups"][0]["provenance"]


def test_a_change_on_the_machine_makes_only_its_groups_comparisons_not_measurable(compared, tmp_path):
    record, _, files, planned, settings = compared
    first = json.loads(files[0][0].read_text())
    first["conditions"]["changes"] = ["the GPU throttled (hardware slowdown)"]
    (tmp_path / "1.json").write_text(json.dumps(first))
    verdicts.merge_groups([(tmp_path / "1.json", files[0][1]), files[1]], planned, settings,
                          tmp_path / "comparison.json", tmp_path / "rounds.csv")
    merged = json.loads((tmp_path / "comparison.json").read_text())
    for phase in ("train", "sample"):
        after = {c["variant"]: c for c in merged["phases"][phase]["comparisons"]}
        assert after["channels_last"]["verdict"] == pairing.UNMEASURABLE
        assert after["channels_last"]["why"] == "the GPU throttled (hardware slowdown)"
        before = {c["variant"]: c for c in record["phases"][phase]["comparisons"]}
        assert after["tf32"] == before["tf32"]  # group 2


def test_the_records_conditions_are_the_machines_before_the_first_group_that_ran_and_after_the_last(compared,
                                                                                                      tmp_path):
    """The scheduler runs the groups in any order: here the second group's job ran first (its conditions an hour
    earlier), so the record's `before` is that group's and its `after` the first group's."""
    _, _, files, planned, settings = compared
    first, second = (json.loads(path.read_text()) for path, _ in files)
    second["conditions"]["before"]["at"] = "2026-12-06T07:00:00+00:00"
    second["conditions"]["after"]["at"] = "2026-12-06T07:05:00+00:00"
    first["conditions"]["before"]["at"] = "2026-12-06T08:00:00+00:00"
    first["conditions"]["after"]["at"] = "2026-12-06T08:05:00+00:00"
    for number, record in ((1, first), (2, second)):
        (tmp_path / f"{number}.json").write_text(json.dumps(record))
    verdicts.merge_groups([(tmp_path / "1.json", files[0][1]), (tmp_path / "2.json", files[1][1])], planned,
                          settings, tmp_path / "comparison.json", tmp_path / "rounds.csv")
    conditions = json.loads((tmp_path / "comparison.json").read_text())["conditions"]
    assert conditions["before"] == second["conditions"]["before"]
    assert conditions["after"] == first["conditions"]["after"]


def test_a_group_timed_for_other_variants_is_refused_in_one_line(compared, tmp_path):
    """A group's file kept from a configuration that planned other groups is not judged as this one's."""
    from jobio.errors import ExpectedError

    _, _, files, planned, settings = compared
    with pytest.raises(ExpectedError, match=r"^\S+/2\.json: timed group 1 of \['baseline', 'tf32'\], but the "
                                            r"configuration plans group 1 of \['baseline', 'bf16'\]; fix: delete it "
                                            r"and run the workflow again$"):
        verdicts.merge_groups(files, [planned[0], ["baseline", "bf16"]], settings, tmp_path / "c.json",
                              tmp_path / "c.csv")
    assert not list(tmp_path.iterdir())


def test_a_group_file_that_is_not_json_is_refused_in_one_line(compared, tmp_path):
    from jobio.errors import ExpectedError

    _, _, files, planned, settings = compared
    (tmp_path / "1.json").write_text(files[0][0].read_text()[:50])  # cut short
    with pytest.raises(ExpectedError, match=r"1\.json: not a comparison group's record \(JSONDecodeError"):
        verdicts.merge_groups([(tmp_path / "1.json", files[0][1]), files[1]], planned, settings,
                              tmp_path / "c.json", tmp_path / "c.csv")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["1.json"]


@pytest.mark.parametrize("variants, at_once, expected", [
    (list("RTabcde"), None, [list("RTabcde")]),
    (list("RTabcde"), 7, [list("RTabcde")]),
    (list("RTabcde"), 4, [list("RTab"), list("RTcd"), list("RTe")]),
    (list("RTabcde"), 5, [list("RTabc"), list("RTde")]),  # even: 3 + 2, not 3 + 3 - 1
    (list("aRbcTde"), 6, [list("RTabc"), list("RTde")]),  # references first, the others in their order
    (list("abcde"), 3, [list("abc"), list("de")]),  # no reference among the variants
])
def test_processes_at_once_splits_the_variants_into_even_groups_each_with_every_reference(variants, at_once,
                                                                                          expected):
    assert comparison_groups.groups(variants, ("R", "T", "X"), at_once) == expected


def test_each_comparison_is_decided_in_one_group_and_references_against_each_other_in_the_first():
    assert comparison_groups.group_pairs(list("RTab"), ("R", "T"), True) == [("R", "T"), ("R", "a"), ("R", "b"),
                                                                      ("T", "R"), ("T", "a"), ("T", "b")]
    assert comparison_groups.group_pairs(list("RTc"), ("R", "T"), False) == [("R", "c"), ("T", "c")]


def test_processes_at_once_without_room_beside_the_references_is_refused_in_one_line():
    from jobio.errors import ExpectedError

    with pytest.raises(ExpectedError, match=r"^comparison: processes_at_once 2 leaves no room beside the 2 "
                                            r"reference\(s\) \['R', 'T'\]; fix: set it above 2, or null$"):
        comparison_groups.groups(list("RTab"), ("R", "T"), 2)


def test_a_variant_whose_process_fails_ends_the_job_in_one_line_and_writes_nothing(tmp_path):
    """A dataset folder that is not there: the variant's process fails building its side, the job says which
    variant and why in one line, and neither output exists."""
    from config_settings import config_section
    from jobio.errors import ExpectedError
    from medddpm.build import ModelSpec
    from medddpm.runs import start_run
    from medddpm.settings import DeviceSpec, SampleSettings, TrainSettings, from_mapping
    from medddpm.switches import Variant
    from conftest import REPO

    config = {name: config_section(name, "tests/tiny.yaml") for name in ("model", "diffusion", "train", "sample",
                                                                          "variants")}
    spec = DeviceSpec("cpu", "cpu", None, False)
    runs = {name: start_run(spec, Variant.from_config(name, config["variants"][name]), REPO, {})
            for name in ("baseline", "channels_last")}
    with pytest.raises(ExpectedError) as failed:
        comparison.time_group(0, list(runs), ModelSpec.from_params(config["model"], config["diffusion"]),
                              from_mapping(TrainSettings, config["train"], "train"),
                              from_mapping(SampleSettings, config["sample"], "sample"),
                              ComparisonSettings(**SETTINGS), runs, tmp_path / "no-dataset",
                              tmp_path / "1.json", tmp_path / "1.csv")
    message = str(failed.value)
    assert message.startswith("comparison: baseline's process failed: ") and "no-dataset" in message
    assert "\n" not in message and not list(tmp_path.iterdir())


def test_the_variants_processes_start_together_and_each_side_is_its_own(tmp_path):
    """The processes connect in any order: each side answers for the process it names (its build gives its process
    id), and they are handed back in the order of the variants."""
    import socket
    import struct

    def peer_pid(connection) -> int:  # the kernel's word for who is at the other end of a Unix socket
        with socket.socket(fileno=os.dup(connection.fileno())) as sock:
            return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]

    workers = comparison_workers.Workers(["a", "b", "c"])
    with workers as sides:
        assert list(sides) == ["a", "b", "c"]
        started = {process.pid: name for process, name in zip(workers.processes, ["a", "b", "c"])}
        assert {name: started[peer_pid(side.connection)] for name, side in sides.items()} == {n: n for n in "abc"}


def test_a_process_that_ends_before_it_connects_ends_the_job_in_one_line(monkeypatch):
    """A worker that cannot start (here an interpreter that exits at once with status 1) ends the job with its
    variant's name instead of leaving it waiting for a connection that never comes."""
    from jobio.errors import ExpectedError

    monkeypatch.setattr(comparison_workers.sys, "executable", "false")
    with pytest.raises(ExpectedError, match=r"^comparison: a's process ended \(exit status 1\) before it connected; "
                                            r"its error is above in this log$"):
        with comparison_workers.Workers(["a", "b"]):
            pass


def test_separately_timed_jobs_under_different_load_are_said_to_be_not_comparable():
    from reporting.derived import load_notes

    runs = pd.DataFrame([
        {"gpu": "cpu", "variant": "baseline", "train_other_load_cores": 0.1, "sample_other_load_cores": 1.0,
         "train_condition_changes": None, "sample_condition_changes": None},
        {"gpu": "cpu", "variant": "channels_last", "train_other_load_cores": 1.6, "sample_other_load_cores": 1.4,
         "train_condition_changes": None, "sample_condition_changes": None},
        {"gpu": "h200", "variant": "tf32", "train_other_load_cores": 0.0, "sample_other_load_cores": None,
         "train_condition_changes": "the GPU throttled (hardware slowdown)", "sample_condition_changes": None},
    ])
    assert load_notes(runs, load_difference_cores=0.5) == [
        "cpu: the train jobs ran under different load (other processes kept 0.1 cores busy during baseline's, 1.6 "
        "during channels_last's): their times are not comparable with each other.",
        "h200 tf32: the machine changed during its train job (the GPU throttled (hardware slowdown)).",
    ]  # the sample jobs' 1.0 and 1.4 cores lie within 0.5 of each other
    assert load_notes(runs, load_difference_cores=0.3)[2].startswith("cpu: the sample jobs ran under different load")


def test_the_workers_stop_without_a_word_in_the_jobs_log(capfd):
    """Leaving the comparison stops each variant's process, which ends without writing anything: the job's log of a
    comparison that went well holds no traceback (the processes write to the job's stderr, its log)."""
    with comparison_workers.Workers(["baseline", "channels_last"]) as sides:
        assert set(sides) == {"baseline", "channels_last"}
    assert capfd.readouterr().err == ""
