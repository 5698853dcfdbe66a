"""The sampler axis in the workflow: the fast samplers' timing job (medddpm.fast_sampling), the quality study's runs
sampling with them (medddpm.study.fast_samples), the judgement against the T-step chain (reporting.sampler_judgements:
the quality claim's test and margin, checked against intervals computed here with scipy), tab09 and fig12, and the
configuration's checks."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import REPO, random_prepared_dataset
from scipy import stats

from config_settings import config_section
from medddpm.build import ModelSpec
from medddpm.runs import start_run
from medddpm.settings import DeviceSpec, SampleSettings, TrainSettings, from_mapping
from medddpm.switches import Variant

TINY = "tests/tiny.yaml"
CLAIM = {"distance": "wasserstein_vs_real", "alpha": 0.05, "margin_factor": 1, "min_seeds": 3}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained two steps on the CPU, its checkpoint and dataset."""
    from medddpm.jobs import run_training

    dataset = random_prepared_dataset(tmp_path_factory)
    folder = tmp_path_factory.mktemp("run") / "results" / "wholehead" / "cpu" / "baseline"
    folder.mkdir(parents=True)
    model = {**config_section("model", TINY), "base_width": 32}
    spec = ModelSpec.from_params(model, config_section("diffusion", TINY))
    run = start_run(DeviceSpec("cpu", "cpu", None, False),
                    Variant.from_config("baseline", config_section("variants")["baseline"]), REPO, {})
    train = from_mapping(TrainSettings, config_section("train", TINY), "train")
    run_training(spec, train, run, dataset, folder / "train.json", folder / "train_steps.csv",
                 folder / "checkpoint.pt")
    return spec, run, dataset, folder


def test_the_timing_job_times_every_sampler_in_rounds_beside_the_chain_and_pairs_them(trained):
    from medddpm.fast_sampling import run_fast_sampling
    from medddpm.settings import ComparisonSettings

    spec, run, dataset, folder = trained
    # sample.batch_sizes ([1] here) is the throughput sweep's; the fast samplers' chains take their own.
    sample = from_mapping(SampleSettings, config_section("sample", TINY) | {"batch_sizes": [1]}, "sample")
    comparison = ComparisonSettings.from_params(config_section("comparison", TINY))
    run_fast_sampling(spec, sample, {"ddim": [2], "deis_ipndm": [2]}, 6, 1, [1, 2], comparison, run,
                      folder / "checkpoint.pt", dataset, folder / "samplers.json")
    record = json.loads((folder / "samplers.json").read_text())
    assert [(r["sampler"], r["steps"]) for r in record["samplers"]] == [("ddpm", 4), ("ddim", 2), ("deis_ipndm", 2)]
    by_key = {(r["sampler"], r["steps"]): r for r in record["samplers"]}
    # The T-step chain only at batch 1 (its larger batches are the sampling job's throughput sweep).
    assert [b["batch"] for b in by_key[("ddpm", 4)]["batches"]] == [1] and by_key[("ddpm", 4)]["vs_chain"] is None
    chain = by_key[("ddpm", 4)]["batches"][0]["round_seconds"]
    for key in [("ddim", 2), ("deis_ipndm", 2)]:
        r = by_key[key]
        assert r["evaluations"] == r["steps"] and [b["batch"] for b in r["batches"]] == [1, 2]
        one, two = r["batches"]
        assert len(one["round_seconds"]) == 6 and len(two["round_seconds"]) == 1  # chains at batch 1, batch_chains
        for b in r["batches"]:
            assert b["fits"] and b["chain_seconds"]["median_ms"] == pytest.approx(1e3 * np.median(b["round_seconds"]))
            assert b["seconds_per_volume"] == pytest.approx(np.median(b["round_seconds"]) / b["batch"])
            assert b["volumes_per_hour"] == pytest.approx(3600 * b["batch"] / np.median(b["round_seconds"]))
        rates = {b["batch"]: b["volumes_per_hour"] for b in r["batches"]}
        assert r["best_batch"] == max(rates, key=rates.get) and r["volumes_per_hour_b1"] == rates[1]
        # Paired by round: the median of chain / sampler on the log scale (the geometric mean of the middle two of
        # six), between the lowest and highest of the six ratios (the sign test's 96.9 % interval of six rounds).
        ratios = sorted(c / f for c, f in zip(chain, one["round_seconds"]))
        paired = r["vs_chain"]
        assert paired["rounds"] == 6 and paired["speedup"] == pytest.approx(math.sqrt(ratios[2] * ratios[3]))
        assert (paired["low"], paired["high"]) == pytest.approx((ratios[0], ratios[-1]))
        assert paired["verdict"] in ("faster", "slower", "within noise", "at the band's edge",
                                     "not measurable under this load")
    # One peak per batch size for every sampler (they share the U-Net's evaluation and its memory).
    for batch in (1, 2):
        peaks = {b["peak_memory_bytes"] for r in record["samplers"] for b in r["batches"] if b["batch"] == batch}
        assert len(peaks) == 1 and peaks.pop() > 0
    assert record["timesteps"] == 4 and record["volume_shape"] == [8, 8, 8]
    assert record["settings"]["samplers"] == {"ddim": [2], "deis_ipndm": [2]}
    assert record["settings"]["batch_sizes"] == [1, 2] and record["settings"]["batch_chains"] == 1


def test_the_timing_job_opens_each_batch_size_with_each_samplers_first_steps_untimed(trained, monkeypatch, tmp_path):
    """Before the timed rounds of a batch size each sampler runs its first WARM_UP_STEPS steps untimed (compilation,
    capture and each update's first steps), not a whole chain; every timed chain then runs to its end."""
    from medddpm import fast_sampling
    from medddpm.engine import Sampling
    from medddpm.settings import ComparisonSettings

    spec, run, dataset, folder = trained
    chains = []  # (sampler, batch, steps the job drew from the chain), in the order the job ran them
    fast_chain = Sampling.fast_chain

    def counted(self, sampler, condition, generator, max_steps=None):
        record = [type(sampler).__name__, condition.shape[0], 0]
        chains.append(record)
        for item in fast_chain(self, sampler, condition, generator, max_steps):
            record[2] += 1
            yield item

    monkeypatch.setattr(Sampling, "fast_chain", counted)
    sample = from_mapping(SampleSettings, config_section("sample", TINY) | {"batch_sizes": [1]}, "sample")
    comparison = ComparisonSettings.from_params(config_section("comparison", TINY))
    run_fast = fast_sampling.run_fast_sampling
    run_fast(spec, sample, {"ddim": [3]}, 6, 1, [1, 2], comparison, run, folder / "checkpoint.pt", dataset,
             tmp_path / "samplers.json")
    warm = fast_sampling.WARM_UP_STEPS
    assert 0 < warm < 3  # fewer than either chain here (ddim's 3 steps, the 4-step T chain)
    # Batch 1: the T-step chain and ddim, each warmed up, then six rounds of both; batch 2: ddim alone, one round.
    assert [c[:2] for c in chains[:2]] == [["DDPM", 1], ["DDIM", 1]] and [c[2] for c in chains[:2]] == [warm, warm]
    timed_one = chains[2:14]
    assert sorted(c[2] for c in timed_one) == [3] * 6 + [4] * 6 and {c[1] for c in timed_one} == {1}
    assert chains[14:] == [["DDIM", 2, warm], ["DDIM", 2, 3]]


def test_a_chain_the_timing_job_times_is_the_samplers_trajectory(trained):
    """The job's chains through the engine are the sampler's trajectory with the plain U-Net: the same x_T from the
    same seed, the same final state."""
    from medddpm.dataset import HeldOut
    from medddpm.engine import Sampling
    from medddpm.samplers import build_sampler, sample_steps

    spec, run, dataset, folder = trained
    sampling = Sampling.from_checkpoint(spec, run, folder / "checkpoint.pt", "ema")
    condition = HeldOut(dataset).conditions(sampling.placement)[0]
    sampler = build_sampler("dpm_solver_pp_2m", sampling.diffusion, 3)
    with sampling.running():
        *_, (_, engine) = sampling.fast_chain(sampler, condition, torch.Generator().manual_seed(5))
        *_, (_, plain) = sample_steps(sampler, sampling.diffusion, condition, torch.Generator().manual_seed(5))
    assert torch.equal(engine, plain)


def study_frame(distances: dict[tuple[str, int, int], list[float]]) -> pd.DataFrame:
    """The study_samplers table of one label and the baseline variant: (sampler, steps, evaluations) -> distance per
    seed 0, 1, 2, ..."""
    rows = [{"gpu": "g", "variant": "baseline", "seed": seed, "sampler": sampler, "steps": steps,
             "evaluations": evaluations, "seconds_per_volume": 1.0, "wasserstein_vs_real": value}
            for (sampler, steps, evaluations), values in distances.items() for seed, value in enumerate(values)]
    return pd.DataFrame(rows)


def test_a_sampler_is_judged_against_the_chain_of_the_same_runs_by_the_quality_claims_test():
    from reporting.sampler_judgements import fewest_equivalent, judgements

    chain = [0.50, 0.52, 0.47, 0.51]
    near = [0.505, 0.518, 0.474, 0.512]  # within the margin
    far = [0.70, 0.71, 0.69, 0.72]
    frame = study_frame({("ddpm", 250, 250): chain, ("ddim", 10, 10): far, ("ddim", 50, 50): near,
                         ("dpm_solver_pp_2m", 10, 10): near[:2]})
    judged = judgements(frame, CLAIM).set_index(["sampler", "steps"])
    margin = float(np.std(chain, ddof=1))
    for key, values in ((("ddim", 50), near), (("ddim", 10), far)):
        d = np.array(values) - np.array(chain)
        half = stats.t.ppf(0.95, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
        row = judged.loc[key]
        assert row["margin"] == pytest.approx(margin)
        assert (row["mean_difference"], row["interval_low"], row["interval_high"]) == pytest.approx(
            (d.mean(), d.mean() - half, d.mean() + half))
        assert row["chain_distance_mean"] == pytest.approx(np.mean(chain)) and row["seeds"] == 4
    assert judged.loc[("ddim", 50), "outcome"] == "equivalent" and judged.loc[("ddim", 10), "outcome"] == "different"
    assert pd.isna(judged.loc[("dpm_solver_pp_2m", 10), "outcome"])  # two seeds: fewer than the claim's three
    fewest = fewest_equivalent(judgements(frame, CLAIM)).set_index("sampler")
    assert fewest.loc["ddim", "steps"] == 50 and math.isnan(fewest.loc["dpm_solver_pp_2m", "steps"])
    assert not fewest.loc["dpm_solver_pp_2m", "judged"]


def test_tab09_joins_the_timing_and_the_judgement_and_says_the_fewest_equivalent_steps():
    from reporting.outputs.tab09_samplers import sampler_table, smallest_notes

    frame = study_frame({("ddpm", 250, 250): [0.50, 0.52, 0.47], ("ddim", 10, 10): [0.70, 0.71, 0.69],
                         ("ddim", 50, 50): [0.50, 0.52, 0.47]})
    samplers = pd.DataFrame([{"gpu": "g", "variant": "fast", "sampler": name, "steps": s, "evaluations": s,
                              "timesteps": 250, "volume_shape": "128x128x128", "seconds_per_volume": 0.02 * s,
                              "volumes_per_hour_b1": 3600 / (0.02 * s), "best_batch": None if name == "ddpm" else 4,
                              "volumes_per_hour_best": None if name == "ddpm" else 2 * 3600 / (0.02 * s),
                              "peak_memory_gib": 3.0, "chain_speedup": 250 / s if s < 250 else None}
                             for name, s in (("ddpm", 250), ("ddim", 10), ("ddim", 50))])
    runs = pd.DataFrame([{"gpu": "g", "variant": "fast", "sample_timesteps": 250, "sample_volume_s": 5.0,
                          "sample_volumes_per_hour_b1": 720.0, "sample_best_batch": 4,
                          "sample_volumes_per_hour_best": 778.0, "sample_peak_memory_gib": 4.0}])
    table = sampler_table(runs, samplers, frame, CLAIM).set_index(["sampler", "steps"])
    # The chain's row is the timing job's (the same rounds), its best batch the sampling job's throughput sweep.
    assert table.loc[("ddpm", 250), "seconds_per_volume"] == 5.0 and table.loc[("ddpm", 250), "timed_variant"] == "fast"
    assert table.loc[("ddpm", 250), "best_batch"] == 4 and table.loc[("ddpm", 250), "volumes_per_hour_best"] == 778.0
    assert table.loc[("ddim", 10), "chain_speedup"] == 25.0
    assert table.loc[("ddim", 10), "seconds_per_volume"] == pytest.approx(0.2)
    assert table.loc[("ddim", 10), "outcome"] == "different" and table.loc[("ddim", 50), "outcome"] == "equivalent"
    assert table.loc[("ddim", 50), "study_variant"] == "baseline" and table.loc[("ddim", 50), "timed_shape"] == \
        "128x128x128"
    assert list(table.index.get_level_values("sampler")) == ["ddpm", "ddim", "ddim"]
    assert smallest_notes(frame, CLAIM) == ["g, baseline's runs: fewest steps equivalent to the chain: ddim 50 steps."]


def test_fig12_lifts_a_step_count_onto_the_next_line_where_it_would_lie_on_its_neighbours():
    """Two step counts whose times lie closer than their labels are wide (2 and 3 steps of a small volume beside a
    250-step chain on one log axis) are drawn on two lines; one far from them stays on the first line."""
    import matplotlib.pyplot as plt

    from reporting.outputs.fig12_fast_sampling import _stagger, _step_counts
    from reporting.style import apply_style, lay_out

    apply_style()  # the figures' fonts and resolution
    fig, ax = plt.subplots(figsize=(4, 3), layout="constrained")
    ax.set_xscale("log")
    ax.set_xlim(0.01, 10)
    labels = _step_counts(ax, [(0.040, 0.7, 2), (0.042, 0.7, 2), (0.045, 0.6, 3), (5.0, 0.5, 250)])
    lay_out(fig)
    _stagger(fig, labels)
    fig.canvas.draw()
    boxes = [label.get_window_extent() for label in labels]
    assert [label.get_text() for label in labels] == ["2 steps", "3 steps", "250 steps"]
    assert [label.xyann[1] for label in labels] == [3, 3 + labels[1].get_fontsize() + 2, 3]
    assert boxes[1].y0 >= boxes[0].y1 and not boxes[1].overlaps(boxes[0])  # lifted clear of "2 steps"
    assert boxes[2].y0 == boxes[0].y0  # far to the right: on the first line
    plt.close(fig)


def test_the_configuration_refuses_sampler_settings_it_cannot_run():
    from planning.configcheck import consistency_problem

    import yaml

    config = yaml.safe_load((REPO / "config.yaml").read_text()) | {"reference_results": []}
    assert consistency_problem(config, REPO) is None
    beyond = {**config, "fast_sampling": {**config["fast_sampling"], "samplers": {"ddim": [5, 20]}}}
    assert "fast_sampling.samplers.ddim runs [20] steps, more than diffusion.timesteps (10)" in consistency_problem(
        beyond, REPO)
    unknown = {**config, "fast_sampling": {**config["fast_sampling"], "variants": ["frontier_graphed"]}}
    assert "fast_sampling.variants lists ['frontier_graphed'], which run_variants does not" in consistency_problem(
        unknown, REPO)
