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


def test_the_timing_job_times_every_sampler_at_every_step_count_and_batch(trained):
    from medddpm.fast_sampling import run_fast_sampling

    spec, run, dataset, folder = trained
    # sample.batch_sizes ([1] here) is the throughput sweep's; the fast samplers' chains take their own.
    sample = from_mapping(SampleSettings, config_section("sample", TINY) | {"batch_sizes": [1]}, "sample")
    run_fast_sampling(spec, sample, {"ddim": [2, 3], "deis_ipndm": [3]}, 1, [1, 2], run, folder / "checkpoint.pt",
                      dataset, folder / "samplers.json")
    record = json.loads((folder / "samplers.json").read_text())
    assert [(r["sampler"], r["steps"]) for r in record["samplers"]] == [("ddim", 2), ("ddim", 3), ("deis_ipndm", 3)]
    for r in record["samplers"]:
        assert r["evaluations"] == r["steps"] and [b["batch"] for b in r["batches"]] == [1, 2]
        for b in r["batches"]:
            chain = b["chain_seconds"]
            assert b["fits"] and chain["n"] == 1 and chain["median_ms"] > 0
            assert b["seconds_per_volume"] == pytest.approx(chain["median_ms"] / 1e3 / b["batch"])
            assert b["volumes_per_hour"] == pytest.approx(3600 * b["batch"] / (chain["median_ms"] / 1e3))
        rates = {b["batch"]: b["volumes_per_hour"] for b in r["batches"]}
        assert r["best_batch"] == max(rates, key=rates.get) and r["volumes_per_hour_b1"] == rates[1]
    assert record["timesteps"] == 4 and record["volume_shape"] == [8, 8, 8]
    assert record["settings"]["samplers"] == {"ddim": [2, 3], "deis_ipndm": [3]}
    assert record["settings"]["batch_sizes"] == [1, 2]


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
    samplers = pd.DataFrame([{"gpu": "g", "variant": "fast", "sampler": "ddim", "steps": s, "evaluations": s,
                              "timesteps": 250, "volume_shape": "128x128x128", "seconds_per_volume": 0.02 * s,
                              "volumes_per_hour_b1": 3600 / (0.02 * s), "best_batch": 4,
                              "volumes_per_hour_best": 2 * 3600 / (0.02 * s), "peak_memory_gib": 3.0}
                             for s in (10, 50)])
    runs = pd.DataFrame([{"gpu": "g", "variant": "fast", "sample_timesteps": 250, "sample_volume_s": 5.0,
                          "sample_volumes_per_hour_b1": 720.0, "sample_best_batch": 4,
                          "sample_volumes_per_hour_best": 778.0, "sample_peak_memory_gib": 4.0}])
    table = sampler_table(runs, samplers, frame, CLAIM).set_index(["sampler", "steps"])
    assert table.loc[("ddpm", 250), "seconds_per_volume"] == 5.0 and table.loc[("ddpm", 250), "timed_variant"] == "fast"
    assert table.loc[("ddim", 10), "seconds_per_volume"] == pytest.approx(0.2)
    assert table.loc[("ddim", 10), "outcome"] == "different" and table.loc[("ddim", 50), "outcome"] == "equivalent"
    assert table.loc[("ddim", 50), "study_variant"] == "baseline" and table.loc[("ddim", 50), "timed_shape"] == \
        "128x128x128"
    assert list(table.index.get_level_values("sampler")) == ["ddpm", "ddim", "ddim"]
    assert smallest_notes(frame, CLAIM) == ["g, baseline's runs: fewest steps equivalent to the chain: ddim 50 steps."]


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
