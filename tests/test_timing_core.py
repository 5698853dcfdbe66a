"""The numbers behind the headline tables, checked by another route than the code that produced them.

- Small real training and sampling jobs on the CPU (8^3 volumes, gradient accumulation 3, so that a wrong per-sample
  divisor shows): every number of train.json and sample.json recomputed from the job's own per-step records
  (train_steps.csv, sample_steps.csv), and the steps counted against the configured steps and warm-up; the sampling
  job's throughput sweep (volumes per hour at each batch size) recomputed from its recorded step times and T, its
  batches checked step by step, a batch that does not fit in memory simulated.
- The timers and the summary on clocks and values chosen by hand.
- The trainer's data path on a stand-in model whose gradient is known: accumulation, zero_grad, the EMA schedule.
- What the U-Net receives under each variant (a forward hook): layout and dtype of every input, layout of the
  weights, the dtype its convolutions compute in, gradient mode.
- The variant's backend flags as start_run sets and records them.
- Which statistic each table and figure takes (tab04, tab07, fig08), from hand-made result files whose mean, median
  and quartiles all differ.
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import resource
import statistics
import weakref
from types import SimpleNamespace

import matplotlib.pyplot as plt
import nibabel as nib
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import REPO, memory_layout, random_prepared_dataset
from matplotlib.collections import LineCollection
from matplotlib.patches import Rectangle
from measurement import timing
from measurement.timing import DeviceTimer, summary
from medddpm import engine
from medddpm.build import ModelSpec
from medddpm.checkpoints import workload_record
from medddpm.flops import step_flops
from medddpm.dataset import HeldOut
from medddpm.jobs import run_sampling, run_training
from medddpm.prepare import heldout_images
from medddpm.runs import start_job
from medddpm.settings import SampleSettings, TrainSettings, as_dict, from_mapping
from medddpm.switches import Variant
from medddpm.ema import EMA
from medddpm import placement as placement_module
from medddpm.placement import Placement
from medddpm.training import NonFiniteLoss, Trainer
from medddpm.unet import UNet3D, parameter_count
from medddpm.variants import backend_flags
from config_settings import output_settings

MODEL = {"in_channels": 3, "out_channels": 1, "base_width": 32, "channel_mult": [1, 2], "num_res_blocks": 1,
         "attention_downsample_rates": [2], "num_heads": 1, "dropout": 0.0}
SHAPE = (8, 8, 8)
TIMESTEPS = 5
CPU = {"label": "cpu", "device": "cpu", "name_pattern": None, "emulate_gpus_on_cpu": False}
ACCUMULATION = 3
TRAIN = {"lr": 1e-4, "gradient_accumulation": ACCUMULATION, "ema_decay": 0.9, "ema_update_every": 1,
         "ema_start_step": 1, "warmup_steps": 2, "measured_steps": 4, "seed": 0, "bare_loop_steps": 3}
# Batch sizes out of order (the job sorts them); batch 3 repeats the first of the two held-out masks.
SAMPLE = {"masks": 2, "max_steps": None, "warmup_steps": 2, "seed": 0, "batch_sizes": [1, 3, 2],
          "throughput_warmup_steps": 2, "throughput_steps": 3}
PAPER = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False}
VARIANTS = {
    "baseline": PAPER,
    "tf32": {"cudnn_tf32": True, "matmul_tf32": True, "channels_last": False},
    "channels_last": PAPER | {"channels_last": True},
    "bf16": PAPER | {"autocast": "bfloat16"},
    "bf16_channels_last": PAPER | {"channels_last": True, "autocast": "bfloat16", "fused_adam": True,
                                   "foreach_ema": True},
}


@pytest.fixture(autouse=True)
def backend_restored():
    """start_run sets process-wide backend flags: put them back after each test."""
    from medddpm.variants import _set_tf32

    flags = backend_flags()
    yield
    _set_tf32(flags["cudnn_tf32"], flags["matmul_tf32"])
    torch.backends.cudnn.benchmark = flags["cudnn_benchmark"]


def params(variant: str, train: dict = TRAIN) -> dict:
    return {"device": CPU, "variant": VARIANTS[variant], "model": MODEL, "diffusion": {"timesteps": TIMESTEPS},
            "train": train}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A prepared dataset of four random 8^3 cases, two held out."""
    return random_prepared_dataset(tmp_path_factory, SHAPE, cases=4, heldout=2, seed=1, tumour_start=2)


def model_spec() -> ModelSpec:
    return ModelSpec.from_params(MODEL, {"timesteps": TIMESTEPS})


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory):
    """A baseline training job with accumulation 3: its folder, train.json, train_steps.csv, the peak RSS before
    and after it (KiB) and its run."""
    folder = tmp_path_factory.mktemp("train")
    run = start_job(params("baseline"), "baseline", REPO)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run_training(model_spec(), from_mapping(TrainSettings, TRAIN, "train"), run, dataset, folder / "train.json",
                 folder / "train_steps.csv", folder / "checkpoint.pt")
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return folder, json.loads((folder / "train.json").read_text()), pd.read_csv(folder / "train_steps.csv"), (
        before, after), run


def quartiles(values) -> tuple[float, float, float]:
    """q1, median, q3 by linear interpolation between order statistics (numpy's default), not the summary's code."""
    return tuple(float(np.percentile(np.asarray(values, float), q)) for q in (25, 50, 75))


# -- training -----------------------------------------------------------------------------------------------------
def test_train_json_is_its_step_records_divided_by_the_samples_per_step(trained):
    folder, result, steps, (rss_before, rss_after), run = trained
    # Steps counted: warm-up then measured, numbered in order; only the measured ones carry a time.
    assert list(steps["step"]) == list(range(TRAIN["warmup_steps"] + TRAIN["measured_steps"]))
    assert list(steps["phase"]) == ["warmup"] * TRAIN["warmup_steps"] + ["measured"] * TRAIN["measured_steps"]
    measured = steps[steps["phase"] == "measured"]
    assert steps.loc[steps["phase"] == "warmup", "step_ms"].isna().all()
    assert measured["step_ms"].notna().all() and (measured["step_ms"] > 0).all()
    # One loss per micro-batch, the step's loss their mean.
    micro = [f"loss_micro_{i}" for i in range(ACCUMULATION)]
    assert list(steps.columns) == ["step", "phase", "step_ms", "loss", *micro]
    assert steps["loss"].to_numpy() == pytest.approx(steps[micro].mean(axis=1).to_numpy(), rel=1e-12)
    assert result["final_loss"] == pytest.approx(steps["loss"].iloc[-1], rel=1e-12)
    # The summary of the measured steps' times, recomputed here.
    times = measured["step_ms"].to_numpy()
    q1, median, q3 = quartiles(times)
    step_time = result["step_time"]
    assert step_time["n"] == TRAIN["measured_steps"] == len(times)
    for key, value in (("median_ms", median), ("q1_ms", q1), ("q3_ms", q3), ("min_ms", times.min()),
                       ("max_ms", times.max()), ("mean_ms", times.mean())):
        assert step_time[key] == pytest.approx(value, rel=1e-9), key
    # Per sample: the step's median over the samples of a step (batch 1 x accumulation).
    assert result["train_ms_per_sample"] == pytest.approx(median / ACCUMULATION, rel=1e-9)
    assert result["micro_batch_median_ms"] == pytest.approx(median / ACCUMULATION, rel=1e-9)
    assert result["samples_per_second"] == pytest.approx(1e3 * ACCUMULATION / median, rel=1e-9)
    assert result["settings"] == as_dict(from_mapping(TrainSettings, TRAIN, "train"))
    assert result["provenance"] == json.loads(json.dumps(run.provenance, default=str))
    assert result["parameters"] == parameter_count(model_spec().build(0).denoiser)
    assert result["volume_shape"] == list(SHAPE)
    assert result["flops"] == json.loads(json.dumps(step_flops(model_spec().unet, SHAPE, run.variant.checkpointing)))
    state = torch.load(folder / "checkpoint.pt", weights_only=True)
    assert state["step"] == len(steps) and state["workload"] == workload_record(model_spec())
    assert {"model", "ema", "optimizer"} <= set(state)
    # The bare loop: its own steps, the same divisor.
    bare = result["bare_loop"]
    assert bare["step_time"]["n"] == TRAIN["bare_loop_steps"]
    assert bare["ms_per_sample"] == pytest.approx(bare["step_time"]["median_ms"] / ACCUMULATION, rel=1e-9)
    assert result["bare_loop_ms_per_sample"] == bare["ms_per_sample"]
    assert result["compile_seconds"] is None  # nothing compiles in the baseline
    # Peak memory on the CPU: the process's peak RSS (KiB on Linux) in bytes, read while the job ran.
    assert result["peak_memory_kind"] == "process_max_rss"
    assert result["peak_memory_bytes"] % 1024 == 0
    assert rss_before * 1024 <= result["peak_memory_bytes"] <= rss_after * 1024


@pytest.mark.parametrize("bare_steps", [1, 0])
def test_the_timer_holds_the_optimizer_step_and_nothing_else(dataset, tmp_path, monkeypatch, bare_steps):
    """On a clock that only the step (1 s), the batch assembly (100 s, due before the step) and the bare loop's step
    (2 s) advance, each measured time is exactly one whole step and the bare loop's exactly one bare step, after one
    untimed bare step. The compile seconds written are those of the warm-up."""
    clock = {"now": 0.0}
    calls = {"bare": 0}
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: clock["now"]))

    def advancing(function, seconds, count=None):
        def wrapper(*args, **kwargs):
            clock["now"] += seconds
            if count:
                calls[count] += 1
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(engine.Training, "step", advancing(engine.Training.step, 1.0))
    monkeypatch.setattr(Trainer, "prefetch", advancing(Trainer.prefetch, 100.0))
    monkeypatch.setattr(Trainer, "bare_step", advancing(Trainer.bare_step, 2.0, "bare"))
    monkeypatch.setattr(engine.Training, "warm_up", lambda self: 12.5)
    train = TRAIN | {"warmup_steps": 1, "measured_steps": 3, "bare_loop_steps": bare_steps}
    run = start_job(params("baseline", train), "baseline", REPO)
    run_training(model_spec(), from_mapping(TrainSettings, train, "train"), run, dataset, tmp_path / "train.json",
                 tmp_path / "train_steps.csv", tmp_path / "checkpoint.pt")
    steps = pd.read_csv(tmp_path / "train_steps.csv")
    assert list(steps["step_ms"].fillna(-1)) == [-1, 1000.0, 1000.0, 1000.0]
    result = json.loads((tmp_path / "train.json").read_text())
    assert result["step_time"] | {"mean_ms": 1000.0} == {"n": 3, "median_ms": 1000.0, "q1_ms": 1000.0,
                                                         "q3_ms": 1000.0, "min_ms": 1000.0, "max_ms": 1000.0,
                                                         "mean_ms": 1000.0}
    assert result["train_ms_per_sample"] == pytest.approx(1000.0 / ACCUMULATION)
    assert result["compile_seconds"] == 12.5
    if not bare_steps:
        assert result["bare_loop"] is None and result["bare_loop_ms_per_sample"] is None and calls["bare"] == 0
        return
    assert result["bare_loop"]["step_time"]["median_ms"] == 2000.0 and result["bare_loop"]["step_time"]["n"] == 1
    assert result["bare_loop_ms_per_sample"] == pytest.approx(2000.0 / ACCUMULATION)
    assert calls["bare"] == 2  # one untimed, one timed


# -- sampling -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_steps", [None, 3])
def test_sample_json_is_its_step_records(trained, dataset, tmp_path, max_steps):
    folder = trained[0]
    run = start_job(params("baseline"), "baseline", REPO)
    settings = SampleSettings(**(SAMPLE | {"max_steps": max_steps}))
    volumes = [tmp_path / f"volume_{i}.nii.gz" for i in range(SAMPLE["masks"])]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run_sampling(model_spec(), settings, run, folder / "checkpoint.pt", dataset, tmp_path / "sample.json",
                 tmp_path / "sample_steps.csv", volumes)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = json.loads((tmp_path / "sample.json").read_text())
    steps = pd.read_csv(tmp_path / "sample_steps.csv")
    chain = TIMESTEPS if max_steps is None else max_steps
    # Every step of every chain, in order, t counting down from T - 1.
    assert list(steps["volume"]) == [v for v in range(len(volumes)) for _ in range(chain)]
    assert list(steps["position"]) == list(range(chain)) * len(volumes)
    assert list(steps["t"]) == [TIMESTEPS - 1 - p for p in range(chain)] * len(volumes)
    assert list(steps.columns) == ["volume", "position", "t", "step_ms"] and (steps["step_ms"] > 0).all()
    # Each volume: the chain from its own mask and seed (sample.seed + its index), as the same engine samples it
    # untimed, with the affine of the real image of its mask.
    sampling = engine.Sampling.from_checkpoint(model_spec(), run, folder / "checkpoint.pt", "ema")
    images = heldout_images(dataset)
    for index, (condition, path) in enumerate(zip(HeldOut(dataset).conditions(sampling.placement), volumes)):
        with sampling.running():
            *_, (_, last) = sampling.chain(condition, torch.Generator().manual_seed(SAMPLE["seed"] + index), max_steps)
        written = nib.load(path)
        assert written.shape == SHAPE
        np.testing.assert_allclose(np.asarray(written.dataobj), last[0, 0].permute(2, 1, 0).numpy(), rtol=1e-6)
        np.testing.assert_array_equal(written.affine, nib.load(images[index]).affine)
    assert result["provenance"] == json.loads(json.dumps(run.provenance, default=str))
    assert result["settings"] == as_dict(settings)
    # The summary: the steps after each chain's warm-up steps, of every volume.
    timed = steps.loc[steps["position"] >= SAMPLE["warmup_steps"], "step_ms"].to_numpy()
    assert result["step_time"]["n"] == len(volumes) * (chain - SAMPLE["warmup_steps"]) == len(timed)
    q1, median, q3 = quartiles(timed)
    for key, value in (("median_ms", median), ("q1_ms", q1), ("q3_ms", q3), ("min_ms", timed.min()),
                       ("max_ms", timed.max()), ("mean_ms", timed.mean())):
        assert result["step_time"][key] == pytest.approx(value, rel=1e-9), key
    # Per volume: the measured chains in seconds (every step), and the full chain's estimate (median step x T).
    sums = steps.groupby("volume")["step_ms"].sum().to_numpy() / 1e3
    assert result["volume_seconds_measured"] == pytest.approx(list(sums), rel=1e-9)
    assert result["volume_seconds_estimate"] == pytest.approx(median * TIMESTEPS / 1e3, rel=1e-9)
    assert result["volumes"] == len(volumes) and result["timesteps"] == TIMESTEPS
    assert result["chain_steps_run"] == chain and result["chain_complete"] == (max_steps is None)
    assert result["compile_seconds"] is None and result["cuda_graph_captures"] == 0
    assert result["volume_shape"] == list(SHAPE)
    assert result["peak_memory_kind"] == "process_max_rss" and result["peak_memory_bytes"] % 1024 == 0
    assert rss_before * 1024 <= result["peak_memory_bytes"] <= rss_after * 1024


def test_sample_json_compile_seconds_are_the_warm_ups_where_something_compiles(trained, dataset, tmp_path,
                                                                             monkeypatch):
    monkeypatch.setattr(Placement, "compiles", property(lambda self: True))
    monkeypatch.setattr(engine.Sampling, "warm_up", lambda self, condition, seed: 7.5)
    run = start_job(params("baseline"), "baseline", REPO)
    run_sampling(model_spec(), SampleSettings(**(SAMPLE | {"max_steps": 1, "warmup_steps": 0})), run,
                 trained[0] / "checkpoint.pt", dataset, tmp_path / "sample.json", tmp_path / "steps.csv",
                 [tmp_path / "volume.nii.gz"])
    result = json.loads((tmp_path / "sample.json").read_text())
    assert result["compile_seconds"] == 7.5 and result["step_time"]["n"] == 1


# -- throughput: volumes per hour at each batch size ---------------------------------------------------------------
def _sample(run, settings, checkpoint, dataset, folder) -> dict:
    run_sampling(model_spec(), settings, run, checkpoint, dataset, folder / "sample.json", folder / "sample_steps.csv",
                 [folder / f"volume_{i}.nii.gz" for i in range(settings.masks)])
    return json.loads((folder / "sample.json").read_text())


def test_sample_json_throughput_is_its_timed_steps_at_each_batch_size(trained, dataset, tmp_path, monkeypatch):
    """The sweep of a real small job: per batch size, in increasing order, the summary of its timed steps, and its
    volumes per hour recomputed here from the recorded median (and quartiles) and T. Each batch runs the chain's step
    (Sampling.step) on the held-out masks' conditions in turn (two masks: batch 3 repeats the first), from noise of
    the batch's size, t counting down from T - 1 as in a chain; warm-up steps first, untimed."""
    calls = []
    step = engine.Sampling.step

    def spy(self, x, condition, t, generator=None):
        calls.append((x.shape, t, condition.clone()))
        return step(self, x, condition, t, generator)

    monkeypatch.setattr(engine.Sampling, "step", spy)
    run = start_job(params("baseline"), "baseline", REPO)
    result = _sample(run, SampleSettings(**SAMPLE), trained[0] / "checkpoint.pt", dataset, tmp_path)
    sweep = result["throughput"]
    assert sweep["timesteps"] == TIMESTEPS and sweep["masks"] == 2
    assert [(b["batch"], b["fits"]) for b in sweep["batches"]] == [(1, True), (2, True), (3, True)]
    rates = {}
    for record in sweep["batches"]:
        batch, time = record["batch"], record["step_time"]
        assert time["n"] == SAMPLE["throughput_steps"] and time["q1_ms"] <= time["median_ms"] <= time["q3_ms"]
        hours = TIMESTEPS * time["median_ms"] / 1e3 / 3600  # one full chain of the batch, in hours
        assert record["volumes_per_hour"] == pytest.approx(batch / hours, rel=1e-12)
        assert record["volume_seconds"] == pytest.approx(3600 * hours / batch, rel=1e-12)
        assert record["volumes_per_hour_iqr"] == pytest.approx(
            [3600 * batch / (TIMESTEPS * time[q] / 1e3) for q in ("q3_ms", "q1_ms")], rel=1e-12)
        assert record["cuda_graph_captures"] == 0 and record["warmup_seconds"] > 0
        assert record["peak_memory_kind"] == "process_max_rss"
        rates[batch] = record["volumes_per_hour"]
    assert sweep["best_batch"] == max(rates, key=rates.get)
    assert sweep["volumes_per_hour_best"] == max(rates.values())
    # The steps: the job's warm-up (one step at batch 1, t = T // 2), then per batch its warm-up and timed steps.
    per_batch = SAMPLE["throughput_warmup_steps"] + SAMPLE["throughput_steps"]
    assert [(shape[0], t) for shape, t, _ in calls[1:]] == [
        (batch, TIMESTEPS - 1 - k % (TIMESTEPS - 1)) for batch in (1, 2, 3) for k in range(per_batch)]
    assert all(shape[1:] == (1, *SHAPE) for shape, _, _ in calls)
    sampling = engine.Sampling.from_checkpoint(model_spec(), run, trained[0] / "checkpoint.pt", "ema")
    first, second = HeldOut(dataset).conditions(sampling.placement)
    for shape, _, condition in calls[1:]:
        expected = torch.cat([first, second, first][: shape[0]])
        assert torch.equal(condition, expected)
    # The job's other numbers are the chains' alone (the other tests of sample.json check them).
    assert result["cuda_graph_captures"] == 0 and result["step_time"]["n"] == 2 * (TIMESTEPS - SAMPLE["warmup_steps"])


def test_the_throughput_timer_holds_one_step_of_the_batch_and_nothing_else(trained, dataset, tmp_path, monkeypatch):
    """On a clock that only the sweep's steps advance (0.2 s + 0.1 s per volume of the batch), each batch's timed
    steps are exactly its configured count of one step each (the warm-up steps not among them), and its volumes per
    hour are those of that step: 3600 x b / (T x (0.2 + 0.1 b))."""
    clock = {"now": 0.0}
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: clock["now"]))
    step = engine.Sampling.step

    def advancing(self, x, condition, t, generator=None):
        clock["now"] += 0.2 + 0.1 * x.shape[0]
        return step(self, x, condition, t, generator)

    monkeypatch.setattr(engine.Sampling, "step", advancing)
    run = start_job(params("baseline"), "baseline", REPO)
    settings = SampleSettings(**(SAMPLE | {"masks": 1, "throughput_steps": 4, "throughput_warmup_steps": 3}))
    sweep = _sample(run, settings, trained[0] / "checkpoint.pt", dataset, tmp_path)["throughput"]
    for record in sweep["batches"]:
        ms = 1e3 * (0.2 + 0.1 * record["batch"])
        assert record["step_time"] | {"mean_ms": ms} == pytest.approx({
            "n": 4, "median_ms": ms, "q1_ms": ms, "q3_ms": ms, "min_ms": ms, "max_ms": ms, "mean_ms": ms})
        assert record["volumes_per_hour"] == pytest.approx(3600 * record["batch"] / (TIMESTEPS * ms / 1e3))
    assert sweep["best_batch"] == 3 and sweep["masks"] == 2  # every held-out mask, not only the sampled ones
    assert sweep["volumes_per_hour_best"] == pytest.approx(3600 * 3 / (TIMESTEPS * 0.5))


def test_a_batch_that_does_not_fit_is_recorded_freed_and_the_larger_ones_skipped(trained, dataset, tmp_path,
                                                                                  monkeypatch):
    """A stand-in step that runs out of device memory at batch 3 and above: batch 3 is recorded as not fitting with
    the error's first line and nothing of its steps, its tensors are released before the job goes on, the larger
    batches are skipped without a step, the best batch is among those that fit, and sample.json is written whole."""
    from medddpm import jobs

    seen, held, freed = [], [], []
    step = engine.Sampling.step

    def out_of_memory(self, x, condition, t, generator=None):
        seen.append(x.shape[0])
        if x.shape[0] >= 3:
            held.extend([weakref.ref(x), weakref.ref(condition)])
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 139.8 GiB "
                                              "total capacity)\nSee the documentation for memory management")
        return step(self, x, condition, t, generator)

    free = jobs.free_memory

    def checked_free(device):
        free(device)
        freed.append([ref() is None for ref in held])

    monkeypatch.setattr(engine.Sampling, "step", out_of_memory)
    monkeypatch.setattr(jobs, "free_memory", checked_free)
    run = start_job(params("baseline"), "baseline", REPO)
    settings = SampleSettings(**(SAMPLE | {"batch_sizes": [8, 1, 4, 2, 3]}))
    result = _sample(run, settings, trained[0] / "checkpoint.pt", dataset, tmp_path)
    sweep = result["throughput"]
    assert [(b["batch"], b["fits"]) for b in sweep["batches"]] == [(1, True), (2, True), (3, False), (4, None),
                                                                   (8, None)]
    assert sweep["batches"][2] == {"batch": 3, "fits": False, "error": "CUDA out of memory. Tried to allocate 20.00 "
                                                                       "GiB (GPU 0; 139.8 GiB total capacity)"}
    assert sweep["batches"][3:] == [{"batch": b, "fits": None, "skipped": "batch 3 did not fit in memory"}
                                    for b in (4, 8)]
    per_batch = SAMPLE["throughput_warmup_steps"] + SAMPLE["throughput_steps"]
    assert seen[1:] == [1] * per_batch + [2] * per_batch + [3]  # the first step of batch 3 failed; no step after
    assert len(held) == 2 and freed == [[True, True]]  # released by the time the memory was freed
    rates = {b["batch"]: b["volumes_per_hour"] for b in sweep["batches"][:2]}
    assert sweep["best_batch"] == max(rates, key=rates.get) and sweep["volumes_per_hour_best"] == max(rates.values())
    assert result["step_time"]["n"] == 2 * (TIMESTEPS - SAMPLE["warmup_steps"]) and result["volumes"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample.json", "sample_steps.csv", "volume_0.nii.gz",
                                                          "volume_1.nii.gz"]


def test_an_error_other_than_memory_in_the_sweep_fails_the_job(trained, dataset, tmp_path, monkeypatch):
    """Only running out of device memory means "does not fit": any other error stops the job before sample.json is
    written (the job's wrapper then removes its other outputs)."""
    def broken(self, x, condition, t, generator=None):
        raise RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED")

    run = start_job(params("baseline"), "baseline", REPO)
    sampling = engine.Sampling.from_checkpoint(model_spec(), run, trained[0] / "checkpoint.pt", "ema")
    monkeypatch.setattr(engine.Sampling, "step", broken)
    from medddpm.jobs import throughput_sweep

    with pytest.raises(RuntimeError, match="CUDNN_STATUS_EXECUTION_FAILED"):
        throughput_sweep(sampling, SampleSettings(**SAMPLE), dataset)


def test_volumes_per_hour_and_the_best_batch_by_hand():
    from measurement.throughput import best_batch, run_columns, single_size_sweep, volumes_per_hour

    # The H200's numbers of 2026-12-01 (T = 250): 27.95 ms at batch 1, 202.3 ms at batch 8.
    assert volumes_per_hour(1, 27.95, 250) == pytest.approx(515.2, abs=0.1)
    assert volumes_per_hour(8, 202.3, 250) == pytest.approx(569.5, abs=0.1)
    batches = [{"batch": 1, "fits": True, "volumes_per_hour": 500.0}, {"batch": 2, "fits": True,
                                                                       "volumes_per_hour": 600.0},
               {"batch": 4, "fits": True, "volumes_per_hour": 600.0}, {"batch": 8, "fits": False},
               {"batch": 16, "fits": None, "skipped": "batch 8 did not fit in memory"}]
    assert best_batch(batches) == (2, 600.0)  # a tie goes to the smaller batch
    assert best_batch(batches[3:]) == (None, None)
    sample = {"throughput": {"batches": batches, "best_batch": 2, "volumes_per_hour_best": 600.0}}
    assert run_columns(sample) == {"sample_volumes_per_hour_b1": 500.0, "sample_best_batch": 2,
                                   "sample_volumes_per_hour_best": 600.0}
    # A sweep of batch 1 alone (sample.batch_sizes: [1]) has its batch-1 rate and no best batch to choose; one of
    # several sizes where only batch 1 fits still has batch 1 as its best.
    alone = {"throughput": {"batches": batches[:1], "best_batch": 1, "volumes_per_hour_best": 500.0}}
    assert run_columns(alone) == {"sample_volumes_per_hour_b1": 500.0, "sample_best_batch": None,
                                  "sample_volumes_per_hour_best": None}
    squeezed = {"throughput": {"batches": [batches[0], batches[3]], "best_batch": 1, "volumes_per_hour_best": 500.0}}
    assert run_columns(squeezed)["sample_best_batch"] == 1
    assert single_size_sweep(500.0, float("nan")) and not single_size_sweep(500.0, 600.0)
    assert not single_size_sweep(None, None) and not single_size_sweep(float("nan"), float("nan"))
    # A sample.json of before the sweep (the shipped sets of 2026-12-01): not measured, nothing derived.
    old = {"step_time": {"median_ms": 27.95}, "timesteps": 250, "volume_seconds_estimate": 6.99}
    assert run_columns(old) == {"sample_volumes_per_hour_b1": None, "sample_best_batch": None,
                                "sample_volumes_per_hour_best": None}


# -- timers and the summary ---------------------------------------------------------------------------------------
def test_cpu_timer_reads_the_clock_around_each_region(monkeypatch):
    clock = iter([10.0, 10.5, 20.0, 20.25, 30.0, 31.0])
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    timer = DeviceTimer(torch.device("cpu"))
    for _ in range(3):
        started = timer.start()
        assert timer.stop(started) is None
    assert timer.elapsed_ms() == pytest.approx([500.0, 250.0, 1000.0])


def test_gpu_timer_records_events_around_each_region_and_synchronises_once(monkeypatch):
    """The CUDA branch on stand-in events: two timing events per region, read after one synchronisation."""
    clock, synchronised = iter([1.0, 3.5, 10.0, 10.25]), []

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing is True
            self.at = None

        def record(self):
            self.at = next(clock)

        def elapsed_time(self, end):
            assert synchronised, "read before the device was synchronised"
            return end.at - self.at

    cuda = SimpleNamespace(Event=Event, synchronize=lambda device: synchronised.append(device))
    monkeypatch.setattr(timing, "torch", SimpleNamespace(cuda=cuda))
    device = torch.device("cuda", 0)
    timer = DeviceTimer(device)
    for _ in range(2):
        started = timer.start()
        assert isinstance(started, Event) and started.at is not None
        timer.stop(started)
    assert not synchronised  # no synchronisation per step
    assert timer.elapsed_ms() == [2.5, 0.25] and synchronised == [device]


def test_summary_of_known_values():
    values = [7.0, 1.0, 4.0, 10.0, 2.0]  # unsorted; sorted: 1 2 4 7 10
    assert summary(values) == {"n": 5, "median_ms": 4.0, "q1_ms": 2.0, "q3_ms": 7.0, "min_ms": 1.0, "max_ms": 10.0,
                               "mean_ms": pytest.approx(4.8)}
    even = summary([4.0, 1.0, 3.0, 2.0])  # inclusive quartiles: 1.75 and 3.25
    assert (even["median_ms"], even["q1_ms"], even["q3_ms"]) == (2.5, 1.75, 3.25)
    assert summary([6.0]) == {"n": 1, "median_ms": 6.0, "q1_ms": 6.0, "q3_ms": 6.0, "min_ms": 6.0, "max_ms": 6.0,
                              "mean_ms": 6.0}
    assert summary([]) == {"n": 0}
    rng = np.random.default_rng(3)
    for n in (2, 3, 8, 11):
        values = list(rng.uniform(1, 100, n))
        result = summary(values)
        assert (result["q1_ms"], result["median_ms"], result["q3_ms"]) == pytest.approx(quartiles(values))
        assert result["mean_ms"] == pytest.approx(statistics.fmean(values))


# -- the trainer's data path on a stand-in model -----------------------------------------------------------------
class Scalar(torch.nn.Module):
    """A model of one weight w whose loss is w * mean(target) - mean(condition): its gradient is mean(target)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(1.0))
        self.seen: list[tuple] = []

    def loss(self, target, condition, generator):
        self.seen.append((float(target.mean()), float(condition.mean()), target.shape, torch.is_autocast_enabled("cpu"),
                          generator and generator.initial_seed()))
        return self.w * target.mean(dim=(1, 2, 3, 4)) - condition.mean(dim=(1, 2, 3, 4))  # one loss per sample


def _batches(values):
    for value in values:
        yield {"input": torch.full((1, 2, 2, 2, 2), -value), "target": torch.full((1, 1, 2, 2, 2), value)}


def _trainer(values, variant="baseline", **settings) -> tuple[Trainer, list]:
    train = from_mapping(TrainSettings, TRAIN | {"ema_start_step": 0} | settings, "train")
    placement = Placement(Variant.from_config(variant, VARIANTS[variant]), torch.device("cpu"))
    trainer = Trainer(Scalar(), _batches(values), placement, train, torch.Generator().manual_seed(41))
    trainer.optimizer = torch.optim.SGD(trainer.diffusion.parameters(), lr=1.0)
    grads = []
    step = trainer.optimizer.step
    trainer.optimizer.step = lambda: (grads.append(float(trainer.diffusion.w.grad)), step())[1]
    return trainer, grads


def test_an_optimizer_step_is_the_mean_gradient_of_its_micro_batches_in_order():
    values = [1.0, 2.0, 6.0, 10.0, 20.0, 60.0]
    trainer, grads = _trainer(values)
    losses = trainer.step()
    assert losses == pytest.approx([1.0 + 1.0, 2.0 + 2.0, 6.0 + 6.0])  # w = 1: mean(target) - mean(condition)
    assert grads == pytest.approx([3.0])  # (1 + 2 + 6) / 3: the loss divided by the accumulation
    assert trainer.step_index == 1 and trainer.diffusion.w.item() == pytest.approx(-2.0)
    trainer.step()
    assert grads == pytest.approx([3.0, 30.0])  # gradients zeroed between optimizer steps
    assert [seen[0] for seen in trainer.diffusion.seen] == values  # every batch once, in order
    assert all(seen[2] == (1, 1, 2, 2, 2) and not seen[3] and seen[4] == 41 for seen in trainer.diffusion.seen)


def test_the_loss_of_a_batch_is_the_mean_of_its_samples():
    trainer, _ = _trainer([1.0])
    target = torch.cat([torch.full((1, 1, 2, 2, 2), 1.0), torch.full((1, 1, 2, 2, 2), 3.0)])
    loss = trainer.loss(target, torch.zeros(2, 2, 2, 2, 2), trainer.generator)
    assert loss.item() == pytest.approx(2.0)  # (1 + 3) / 2 samples


def test_batches_go_to_the_device_asynchronously_and_the_model_is_compiled(monkeypatch):
    copies, compiled = [], []
    place = Placement.input
    monkeypatch.setattr(Placement, "input",
                        lambda self, x, non_blocking=False: copies.append(non_blocking) or place(self, x, non_blocking))
    monkeypatch.setattr(Placement, "compile", lambda self, model: compiled.append(model))
    trainer, _ = _trainer([1.0, 2.0, 6.0])
    assert compiled == [trainer.diffusion] and trainer.pin_memory is False
    trainer.step()
    assert copies == [True, True] * ACCUMULATION


def test_compiled_trainers_warm_up_on_the_resident_batch_with_a_generator_of_their_own(monkeypatch):
    """warm_up_compiled: one loss and backward on the next batch (not consumed), with its own generator (seed +
    7919, the loop's left alone), the gradients dropped after it, its wall-clock seconds returned."""
    monkeypatch.setattr(Placement, "compiles", property(lambda self: True))
    trainer, grads = _trainer([5.0, 2.0, 6.0, 10.0, 20.0, 60.0])
    assert trainer.compiled is True
    seconds = trainer.warm_up_compiled()
    assert 0 <= seconds < 60
    assert trainer.diffusion.seen == [(5.0, -5.0, (1, 1, 2, 2, 2), False, TRAIN["seed"] + 7919)]
    assert trainer.diffusion.w.grad is None and trainer.generator.initial_seed() == 41
    trainer.step()
    assert grads == pytest.approx([13 / 3])  # the warm-up's batch is the first step's
    monkeypatch.setattr(Placement, "compiles", property(lambda self: False))
    assert _trainer([1.0])[0].warm_up_compiled() is None


def test_data_batches_are_shuffled_batches_of_one_in_an_order_fixed_by_the_seed():
    from medddpm.training import data_batches

    items = [{"input": torch.tensor([float(i)])} for i in range(8)]

    def order(seed, count=16):
        batches = data_batches(items, seed)
        return [int(next(batches)["input"].flatten()[0]) for _ in range(count)]

    first = order(0)
    assert sorted(first[:8]) == sorted(first[8:]) == list(range(8))  # every case once per pass, cycling
    assert first == order(0) and first[:8] != list(range(8))
    assert len({tuple(order(seed, 8)) for seed in range(4)}) > 1
    assert next(data_batches(items, 0))["input"].shape == (1, 1)  # batches of one


def test_training_batches_and_noise_are_fixed_by_the_seed(dataset):
    """Two trainings of one seed take the same batches and noise (the same losses); another seed other ones."""
    run = start_job(params("baseline"), "baseline", REPO)

    def losses(seed):
        training = engine.Training(model_spec(), from_mapping(TrainSettings, TRAIN | {"seed": seed}, "train"), run,
                                   dataset)
        assert training.trainer.pin_memory is False  # pinning is for copies to a GPU
        assert training.trainer.generator.initial_seed() == seed  # the loop's noise: its own generator
        return training.step() + training.step()

    assert losses(0) == losses(0) != losses(1)


def test_batches_are_assembled_before_the_step_and_consumed_by_it():
    trainer, grads = _trainer([1.0, 2.0, 6.0, 10.0, 20.0, 60.0])
    trainer.prefetch()
    assert len(trainer._ready) == ACCUMULATION
    trainer.prefetch()
    assert len(trainer._ready) == ACCUMULATION  # never more than one step's batches
    condition, target = trainer.resident_batch()
    assert float(target.mean()) == 1.0 and float(condition.mean()) == -1.0 and len(trainer._ready) == ACCUMULATION
    trainer.step()
    assert len(trainer._ready) == 0 and grads == pytest.approx([3.0])


def test_bare_step_accumulates_the_resident_batch():
    trainer, grads = _trainer([5.0] * 6)
    condition, target = trainer.resident_batch()
    trainer.bare_step(condition, target * 2, None)
    assert grads == pytest.approx([10.0])  # accumulation x (mean / accumulation)
    assert trainer.step_index == 0 and trainer.diffusion.w.grad is None or float(trainer.diffusion.w.grad) == 0


def test_ema_copies_the_model_until_its_start_then_averages_every_n_steps():
    values = [1.0] * 30
    trainer, _ = _trainer(values, ema_start_step=2, ema_update_every=2, ema_decay=0.5)
    w = lambda module: module.w.item()
    history = []
    for _ in range(6):
        trainer.step()
        history.append((w(trainer.diffusion), w(trainer.ema_model)))
    # SGD with lr 1 on gradient 1: w = 1 - k after k steps. Step 0 copies (step index 0 < start 2), steps 2 and 4
    # average: ema = 0.5 ema + 0.5 w; steps 1, 3 and 5 leave it.
    assert [m for m, _ in history] == pytest.approx([0, -1, -2, -3, -4, -5])
    assert [e for _, e in history] == pytest.approx([0, 0, -1, -1, -2.5, -2.5])


@pytest.mark.parametrize("foreach", [False, True])
def test_ema_rule_numbers(foreach):
    average, current = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    old = [p.detach().clone() for p in average.parameters()]
    EMA(0.75, foreach=foreach).update_model_average(average, current)
    for p, o, c in zip(average.parameters(), old, current.parameters()):
        torch.testing.assert_close(p.detach(), o * 0.75 + 0.25 * c.detach(), rtol=0, atol=0)


def test_a_non_finite_loss_stops_training_naming_the_step_and_micro_batch():
    trainer, _ = _trainer([1.0, 2.0, 3.0, 4.0, float("nan"), 6.0])
    trainer.step()
    with pytest.raises(NonFiniteLoss, match=r"loss is nan at optimizer step 1, micro-batch 1 of 3") as error:
        trainer.step()
    assert (error.value.step, error.value.micro_batch) == (1, 1)


# -- the placement of a variant -----------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_placement_applies_each_switch(variant):
    switches = Variant.from_config(variant, VARIANTS[variant])
    placement = Placement(switches, torch.device("cpu"))
    layout = torch.channels_last_3d if switches.channels_last else torch.contiguous_format
    x = placement.input(torch.randn(1, 2, 4, 4, 4))
    assert x.is_contiguous(memory_format=layout) and x.device.type == "cpu"
    parameters = [torch.nn.Parameter(torch.ones(2))]
    optimizer = placement.optimizer(parameters, 0.125)
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.param_groups[0]["lr"] == 0.125
    assert bool(optimizer.defaults.get("fused")) == switches.fused_adam
    ema = placement.ema(0.5)
    assert ema.beta == 0.5 and ema.foreach == switches.foreach_ema
    with placement.autocast():
        enabled = torch.is_autocast_enabled("cpu")
        dtype = torch.get_autocast_dtype("cpu")
    assert enabled == (switches.autocast is not None)
    assert not enabled or dtype == torch.bfloat16
    diffusion = placement.model(model_spec().build(0))
    weight = diffusion.denoiser.input_blocks[0][0].weight if hasattr(diffusion, "denoiser") else None
    if weight is not None:
        assert weight.is_contiguous(memory_format=layout)


def test_placement_copies_with_the_callers_non_blocking_and_places_everything_on_its_device(monkeypatch):
    device = torch.device("cpu")
    placement = Placement(Variant.from_config("graphs", PAPER | {"cuda_graphs": True}), device)
    copies, compiled = [], []

    class Copied:
        def to(self, *args, **kwargs):
            copies.append((args, kwargs))
            return torch.zeros(1, 1, 2, 2, 2)

    placement.input(Copied(), non_blocking=True)
    placement.input(Copied())
    assert copies == [((device,), {"non_blocking": True}), ((device,), {"non_blocking": False})]
    monkeypatch.setattr(placement_module, "compile_model", lambda model, variant: compiled.append((model, variant)) or True)
    diffusion = model_spec().build(0)
    assert placement.compile(diffusion) is True and compiled == [(diffusion, placement.variant)]
    assert placement.evaluation(diffusion).graphs is False  # CUDA graphs are for a GPU


def test_start_run_records_the_label_the_configuration_and_the_emulation():
    from measurement.provenance import config_digest, workflow_commit

    job = params("baseline")
    run = start_job(job, "baseline", REPO)
    assert run.provenance["hardware_label"] == "cpu" and run.provenance["emulated_on_cpu"] is False
    assert run.provenance["config_digest"] == config_digest(job)
    assert run.provenance["workflow_commit"] == workflow_commit(REPO)
    emulated = start_job(job | {"device": {"label": "h200", "device": "cuda", "name_pattern": "H200",
                                           "emulate_gpus_on_cpu": True}}, "baseline", REPO)
    assert emulated.device.type == "cpu" and emulated.label == "h200"
    assert emulated.provenance["emulated_on_cpu"] is True and emulated.provenance["hardware_label"] == "h200"


def test_peak_memory_of_a_cpu_run_and_of_a_gpu_run(monkeypatch):
    from medddpm import runs

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cpu = runs.peak_memory(torch.device("cpu"))
    assert cpu["peak_memory_kind"] == "process_max_rss" and set(cpu) == {"peak_memory_bytes", "peak_memory_kind"}
    assert before * 1024 <= cpu["peak_memory_bytes"] <= resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    runs.reset_peak_memory(torch.device("cpu"))  # nothing to reset on a CPU
    asked = []
    cuda = SimpleNamespace(max_memory_allocated=lambda d: asked.append(("allocated", d)) or 3.0 * 2**30,
                           max_memory_reserved=lambda d: asked.append(("reserved", d)) or 4 * 2**30,
                           reset_peak_memory_stats=lambda d: asked.append(("reset", d)))
    monkeypatch.setattr(runs, "torch", SimpleNamespace(cuda=cuda))
    gpu = torch.device("cuda", 1)
    runs.reset_peak_memory(gpu)
    assert runs.peak_memory(gpu) == {"peak_memory_bytes": 3 * 2**30, "peak_memory_reserved_bytes": 4 * 2**30,
                                     "peak_memory_kind": "cuda_max_allocated"}
    assert asked == [("reset", gpu), ("allocated", gpu), ("reserved", gpu)]
    assert isinstance(runs.peak_memory(gpu)["peak_memory_bytes"], int)
    asked.clear()
    runs.reset_peak_memory(torch.device("cpu"))
    assert asked == []




@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_what_the_unet_receives_under_each_variant(variant, dataset):
    """Forward hooks on the U-Net and its first convolution, in a training step and in a sampling step: the input
    (the noisy image and the condition, concatenated) float32 of the right shape, the timestep an integer, the
    weights float32 in the variant's layout, gradients on only in training, and the first convolution computing in
    the autocast dtype.

    The concatenated input arrives in the contiguous layout under every variant: torch.cat takes its first tensor's
    layout, and the one-channel noisy image's is the contiguous one (its strides are those of either layout), so
    under channels-last the first convolution converts its input (the condition reaches the concatenation in the
    variant's layout: tests/test_engine.py)."""
    switches = Variant.from_config(variant, VARIANTS[variant])
    run = start_job(params(variant, TRAIN | {"gradient_accumulation": 2}), variant, REPO)
    layout = "channels_last_3d" if switches.channels_last else "contiguous"
    computes = torch.bfloat16 if switches.autocast else torch.float32
    calls = []

    def record(module, args, output):
        if isinstance(module, UNet3D):
            weight = module.input_blocks[0][0].weight
            calls.append(([(memory_layout(a), a.dtype, tuple(a.shape)) for a in args], memory_layout(weight), weight.dtype,
                          torch.is_grad_enabled()))
        elif getattr(module, "_first_conv", False):
            convolved.append(output.dtype)

    convolved = []
    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        training = engine.Training(model_spec(), from_mapping(TrainSettings, TRAIN | {"gradient_accumulation": 2},
                                                            "train"), run, dataset)
        training.diffusion.denoiser.input_blocks[0][0]._first_conv = True
        training.prepare()
        training.step()
        trained = list(calls)
        calls.clear()
        sampling = engine.Sampling(copy.deepcopy(model_spec().build(0)), Placement.of(run))
        sampling.diffusion.denoiser.input_blocks[0][0]._first_conv = True
        condition = training.placement.input(torch.zeros(1, 2, *SHAPE))
        x = sampling.placement.input(torch.randn(1, 1, *SHAPE))
        with sampling.running():
            sampling.step(x, condition, TIMESTEPS - 1)
        sampled = list(calls)
    finally:
        handle.remove()
    assert len(trained) == 2 and len(sampled) == 1  # one evaluation per micro-batch, one per sampling step
    for records, grad in ((trained, True), (sampled, False)):
        for inputs, weight_layout, weight_dtype, grad_enabled in records:
            (image, image_dtype, image_shape), (_, t_dtype, _) = inputs
            assert (image, image_dtype, image_shape) == ("contiguous", torch.float32, (1, 3, *SHAPE))
            assert t_dtype == torch.int64
            assert (weight_layout, weight_dtype, grad_enabled) == (layout, torch.float32, grad)
    assert convolved == [computes] * 3


def test_start_run_sets_and_records_the_backend_flags():
    for name, tf32 in (("tf32", True), ("baseline", False)):
        run = start_job(params(name), name, REPO)
        flags = backend_flags()
        assert flags["cudnn_tf32"] is tf32 and flags["matmul_tf32"] is tf32
        assert torch.get_float32_matmul_precision() == ("high" if tf32 else "highest")
        assert run.provenance["backend_flags"] == flags
        assert run.provenance["variant"] == name and run.variant.name == name
        assert run.provenance["switches"]["cudnn_tf32"] is tf32
        assert run.provenance["switches_effective"]["cudnn_tf32"] is False  # TF32 has no effect on a CPU
        assert run.label == "cpu" and run.device.type == "cpu"


# -- which statistic each table takes -----------------------------------------------------------------------------
# Step times whose median, mean and quartiles all differ, and whose per-sample numbers differ from the per-step ones.
STEP = {"baseline": {"n": 9, "median_ms": 100.0, "mean_ms": 130.0, "q1_ms": 90.0, "q3_ms": 120.0, "min_ms": 80.0,
                     "max_ms": 300.0},
        "tf32": {"n": 9, "median_ms": 40.0, "mean_ms": 47.0, "q1_ms": 37.0, "q3_ms": 44.0, "min_ms": 35.0,
                 "max_ms": 90.0}}
SAMPLE_STEP = {"baseline": {"n": 8, "median_ms": 10.0, "mean_ms": 13.0, "q1_ms": 9.0, "q3_ms": 12.0},
               "tf32": {"n": 8, "median_ms": 5.0, "mean_ms": 6.5, "q1_ms": 4.5, "q3_ms": 6.0}}
SAMPLES_PER_STEP, SAMPLE_T = 4, 250
# tf32's sampling job ran the throughput sweep (batch 2 the best, batch 4 out of memory, 8 skipped); baseline's is a
# sample.json of before the sweep (no `throughput`): its volumes per hour are not measured.
SWEEP = {"tf32": [(1, 5.0), (2, 8.0), (4, None), (8, None)]}
# tf32's training job found every compiled graph in inductor's cache, its sampling job some (medddpm.compile_cache);
# baseline compiled nothing.
COMPILE_CACHE = {"tf32": ({"fx_graph_hits": 2, "fx_graph_misses": 0, "autograd_hits": 1, "autograd_misses": 0},
                          {"fx_graph_hits": 1, "fx_graph_misses": 1, "autograd_hits": 0, "autograd_misses": 0})}


def _sweep(batches) -> dict:
    records = []
    for batch, median in batches:
        if median is None:
            records.append({"batch": batch, "fits": False, "error": "CUDA out of memory."} if batch == 4 else
                           {"batch": batch, "fits": None, "skipped": "batch 4 did not fit in memory"})
            continue
        records.append({"batch": batch, "fits": True, "step_time": {"n": 10, "median_ms": median, "q1_ms": median - 1,
                                                                    "q3_ms": median + 1, "mean_ms": median + 0.5},
                        "volumes_per_hour": 3600 * batch / (SAMPLE_T * median / 1e3)})
    best = max((r for r in records if r["fits"]), key=lambda r: r["volumes_per_hour"])
    return {"timesteps": SAMPLE_T, "masks": 2, "batches": records, "best_batch": best["batch"],
            "volumes_per_hour_best": best["volumes_per_hour"]}


def _result_files(root, steps=STEP, sample_steps=SAMPLE_STEP, origin_note="") -> list:
    """train.json and sample.json of every variant of `steps` under root/<variant>/ (variants written last first)."""
    files = []
    for variant in reversed(list(steps)):
        step = steps[variant]
        folder = root / variant
        folder.mkdir(parents=True)
        # Switches written out of name order: the runs table keeps them sorted.
        switches = dict(reversed(list(Variant.from_config(variant, VARIANTS[variant]).switches().items())))
        effective = {name: name != "cudnn_tf32" for name in switches}
        provenance = {"switches": switches, "switches_effective": effective, "device_name": "NVIDIA H200" + origin_note,
                      "device_type": "cuda", "measured_at": "2026-12-01T00:00:00+00:00", "variant": variant}
        flops = {"forward": {"total": 5e12}, "train_micro_batch": {"total": 16e12}, "shape": [8, 8, 8]}
        train = {"provenance": provenance, "parameters": 1000, "volume_shape": [8, 8, 8],
                 "settings": {"gradient_accumulation": SAMPLES_PER_STEP}, "step_time": step,
                 "train_ms_per_sample": step["median_ms"] / SAMPLES_PER_STEP,
                 "flops": {"model": flops, "executed": flops},
                 "peak_memory_bytes": 3 * 2**30, "peak_memory_kind": "cuda_max_allocated",
                 "bare_loop_ms_per_sample": step["median_ms"] / SAMPLES_PER_STEP * 0.8,
                 "compile_seconds": None if variant == "baseline" else 12.5,
                 "compile_cache": COMPILE_CACHE.get(variant, (None, None))[0]}
        sample_step = sample_steps[variant]
        sample = {"provenance": provenance, "volume_shape": [8, 8, 8], "timesteps": SAMPLE_T, "chain_complete": True,
                  "step_time": sample_step, "volume_seconds_estimate": sample_step["median_ms"] * SAMPLE_T / 1e3,
                  "volume_seconds_measured": [sample_step["mean_ms"] * SAMPLE_T / 1e3], "peak_memory_bytes": 2**30,
                  "peak_memory_kind": "cuda_max_allocated", "compile_seconds": None if variant == "baseline" else 3.5,
                  "compile_cache": COMPILE_CACHE.get(variant, (None, None))[1]}
        if variant in SWEEP:
            sample["throughput"] = _sweep(SWEEP[variant])
        (folder / "train.json").write_text(json.dumps(train))
        (folder / "sample.json").write_text(json.dumps(sample))
        files += [folder / "train.json", folder / "sample.json"]
    return files


@pytest.fixture
def statistics_results(tmp_path):
    """Per test (not per module), so that every test that reads it counts as reaching the reader's code."""
    from reporting.results import Results, collect

    root = tmp_path / "results" / "wholehead" / "g1"
    files = _result_files(root)
    (root / "device_rates.json").write_text(json.dumps({"bf16_matmul_tflops": 800.0}))
    return Results.from_tables(collect(files + [root / "device_rates.json"], measured_labels=["g1"]))


def test_runs_table_rows_in_label_and_variant_order_with_their_tags_and_measured_winning(tmp_path):
    """Measured labels first in the order given, then shipped ones alphabetically, variants in the paper's order;
    a shipped set of a label measured here is left out of the runs (measured wins), a sampling run without its
    training run still gets a row."""
    from planning.set_manifest import seal
    from reporting.results import MEASURED, SHIPPED, TAGS, collect

    slower = {v: step | {"median_ms": 2 * step["median_ms"]} for v, step in STEP.items()}
    measured = _result_files(tmp_path / "results" / "wholehead" / "g2") + _result_files(
        tmp_path / "results" / "wholehead" / "g1")
    shipped = (_result_files(tmp_path / "data" / "reference" / "wholehead" / "g1", slower, origin_note=" shipped")
               + _result_files(tmp_path / "data" / "reference" / "wholehead" / "a0", slower, origin_note=" shipped"))
    shipped += _result_files(tmp_path / "data" / "reference" / "wholehead" / "zz", slower, origin_note=" shipped")
    only_sample = tmp_path / "results" / "wholehead" / "g2" / "tf32" / "train.json"
    only_sample.unlink()
    a0 = tmp_path / "data" / "reference" / "wholehead" / "a0" / "baseline" / "train.json"
    record = json.loads(a0.read_text())
    # A run written before the switches and the volume were recorded.
    for key in ("switches", "switches_effective"):
        del record["provenance"][key]
    del record["volume_shape"]
    a0.write_text(json.dumps(record))
    for label in ("g1", "a0", "zz"):  # every shipped set carries its manifest.sha256
        seal(tmp_path / "data" / "reference" / "wholehead" / label)
    summary = tmp_path / "results" / "wholehead" / "g1" / "baseline" / "profile" / "train" / "torch_summary.csv"
    summary.parent.mkdir(parents=True)
    summary.write_text("kernel_class,kernels,time_ns\nother,1,1.0\nall,1,1.0\n")
    # "zz" is measured here (the configuration names it) though none of its files is: its shipped set is left out.
    tables = collect([p for p in measured if p != only_sample] + [summary], shipped, measured_labels=["g2", "zz"])
    runs = tables["runs"]
    assert list(runs.columns[:5]) == TAGS and "index" not in runs
    assert list(tables["quality"].columns) == TAGS  # no quality run: the tags' columns, no rows
    assert list(tables["summaries"]["tool"]) == ["torch"] * 2 and list(tables["summaries"]["gpu"]) == ["g1"] * 2
    assert list(zip(runs["gpu"], runs["variant"])) == [("g2", "baseline"), ("g2", "tf32"), ("g1", "baseline"),
                                                       ("g1", "tf32"), ("a0", "baseline"), ("a0", "tf32")]
    assert list(runs.index) == list(range(6))
    assert list(runs["origin"]) == [MEASURED] * 4 + [SHIPPED] * 2
    assert list(runs["device"]) == ["NVIDIA H200"] * 4 + ["NVIDIA H200 shipped"] * 2
    assert set(runs["date"]) == {"2026-12-01"}
    g1 = runs[runs["gpu"] == "g1"].set_index("variant")
    assert g1.loc["tf32", "train_step_median_ms"] == STEP["tf32"]["median_ms"]  # measured, not the shipped set's
    assert runs[runs["gpu"] == "a0"].set_index("variant").loc["tf32", "train_step_median_ms"] == 80.0
    lone = runs[(runs["gpu"] == "g2") & (runs["variant"] == "tf32")].iloc[0]
    assert math.isnan(lone["train_ms_per_sample"]) and lone["sample_step_median_ms"] == SAMPLE_STEP["tf32"]["median_ms"]
    for _, row in runs.dropna(subset=["train_ms_per_sample"]).iterrows():
        old = (row["gpu"], row["variant"]) == ("a0", "baseline")
        switches = {} if old else Variant.from_config(row["variant"], VARIANTS[row["variant"]]).switches()
        assert row["switches"] == json.dumps(switches, sort_keys=True)
        assert row["volume_shape"] == ("" if old else "8x8x8")
        effective = {n: n != "cudnn_tf32" for n in switches}
        assert row["switches_effective"] == json.dumps(effective, sort_keys=True)
        assert row["memory_kind"] == "cuda_max_allocated"


def _build(results, output_id: str):
    from reporting.registry import BY_ID
    from reporting.render import Job

    output = BY_ID[output_id]
    return importlib.import_module(output.module).build(Job(output, results, {}, output_settings(output)))


def test_runs_table_takes_the_median_and_quartiles(statistics_results):
    runs = statistics_results.table("runs").set_index("variant")
    for variant, step in STEP.items():
        row = runs.loc[variant]
        assert row["train_ms_per_sample"] == step["median_ms"] / SAMPLES_PER_STEP
        assert (row["train_step_median_ms"], row["train_step_q1_ms"], row["train_step_q3_ms"]) == (
            step["median_ms"], step["q1_ms"], step["q3_ms"])
        assert row["train_steps_measured"] == step["n"] and row["samples_per_step"] == SAMPLES_PER_STEP
        sample = SAMPLE_STEP[variant]
        assert (row["sample_step_median_ms"], row["sample_step_q1_ms"], row["sample_step_q3_ms"]) == (
            sample["median_ms"], sample["q1_ms"], sample["q3_ms"])
        assert row["sample_volume_s"] == sample["median_ms"] * SAMPLE_T / 1e3  # the estimate, not the measured chain
        assert row["sample_timesteps"] == SAMPLE_T and bool(row["sample_chain_complete"])
        assert row["train_peak_memory_gib"] == 3.0 and row["sample_peak_memory_gib"] == 1.0
        assert row["volume_shape"] == "8x8x8" and row["parameters"] == 1000
    # Volumes per hour: the recorded ones at batch 1 and at the best batch; a sample.json without the sweep: none.
    assert runs.loc["tf32", "sample_volumes_per_hour_b1"] == 3600 / (SAMPLE_T * 5.0 / 1e3)
    assert runs.loc["tf32", "sample_best_batch"] == 2
    assert runs.loc["tf32", "sample_volumes_per_hour_best"] == 3600 * 2 / (SAMPLE_T * 8.0 / 1e3)
    for column in ("sample_volumes_per_hour_b1", "sample_best_batch", "sample_volumes_per_hour_best"):
        assert pd.isna(runs.loc["baseline", column]), column


def test_tab04_takes_the_median_per_sample_and_the_quartile_range(statistics_results):
    frame = _build(statistics_results, "tab04_optimization").frame.set_index("variant")
    tf32 = frame.loc["tf32"]
    assert tf32["train_ms_per_sample"] == 40.0 / SAMPLES_PER_STEP
    assert tf32["train_speedup_vs_baseline"] == pytest.approx(100.0 / 40.0)
    assert tf32["train_speedup_low"] == pytest.approx(90.0 / 44.0)
    assert tf32["train_speedup_high"] == pytest.approx(120.0 / 37.0)
    assert tf32["train_verdict"] == "faster"
    assert tf32["sample_step_median_ms"] == 5.0
    assert tf32["sample_speedup_vs_baseline"] == pytest.approx(2.0) and tf32["sample_verdict"] == "faster"
    assert tf32["train_peak_memory_gib"] == 3.0
    assert frame.loc["baseline", "train_verdict"] == "reference"


def test_tab07_takes_the_median_per_sample_and_the_quartiles_per_sample(statistics_results):
    frame = _build(statistics_results, "tab07_frontier").frame.set_index("variant")
    for variant, step in STEP.items():
        row = frame.loc[variant]
        assert row["train_ms_per_sample"] == step["median_ms"] / SAMPLES_PER_STEP
        assert row["train_ms_per_sample_q1"] == step["q1_ms"] / SAMPLES_PER_STEP
        assert row["train_ms_per_sample_q3"] == step["q3_ms"] / SAMPLES_PER_STEP
        assert row["train_model_tflops"] == pytest.approx(16e12 / (step["median_ms"] / SAMPLES_PER_STEP) / 1e9)
        assert row["sample_step_ms"] == SAMPLE_STEP[variant]["median_ms"]
        assert row["sample_volume_s"] == SAMPLE_STEP[variant]["median_ms"] * SAMPLE_T / 1e3
        assert row["train_peak_gib"] == 3.0 and row["sample_peak_gib"] == 1.0
    assert frame.loc["tf32", "train_speedup_low"] == pytest.approx(90.0 / 44.0)
    assert frame.loc["tf32", "train_speedup_vs_baseline"] == pytest.approx(2.5)


def test_tab07_shows_volumes_per_hour_and_says_where_they_were_not_measured(statistics_results):
    table = _build(statistics_results, "tab07_frontier")
    frame = table.frame.set_index("variant")
    columns = list(table.frame.columns)
    assert columns[columns.index("sample_volume_s") + 1:][:3] == [
        "sample_volumes_per_hour_b1", "sample_best_batch", "sample_volumes_per_hour_best"]
    assert frame.loc["tf32", "sample_volumes_per_hour_b1"] == pytest.approx(3600 / (SAMPLE_T * 5.0e-3))
    assert frame.loc["tf32", "sample_best_batch"] == 2
    assert frame.loc["tf32", "sample_volumes_per_hour_best"] == pytest.approx(2 * 3600 / (SAMPLE_T * 8.0e-3))
    # baseline's sample.json has no sweep: empty cells (nothing derived from its s/volume) and a note saying so.
    assert frame.loc["baseline", ["sample_volumes_per_hour_b1", "sample_best_batch",
                                  "sample_volumes_per_hour_best"]].isna().all()
    assert frame.loc["baseline", "sample_volume_s"] == SAMPLE_STEP["baseline"]["median_ms"] * SAMPLE_T / 1e3
    assert [n for n in table.notes if "volumes per hour" in n] == [
        "g1: volumes per hour not measured for baseline: no throughput sweep in the sample.json (written before "
        "sample.batch_sizes existed); running the sample jobs again measures them."]


def test_tab07_names_the_variants_sampled_at_batch_1_alone():
    """A sweep of batch 1 alone has no best batch; the note names those variants, or the swept ones where that list
    is shorter and every row is one or the other."""
    from reporting.outputs.tab07_frontier import single_size_notes

    nan = float("nan")
    ladder = pd.DataFrame({"gpu": "g", "variant": ["a", "b", "c", "d"], "sample_volumes_per_hour_b1": [1.0, 2, 3, 4],
                           "sample_volumes_per_hour_best": [nan, nan, nan, 5.0]})
    assert single_size_notes(ladder) == [
        "g: every variant but d sampled at batch 1 alone (sample.batch_sizes), so no best batch."]
    unmeasured = ladder.assign(sample_volumes_per_hour_b1=[1.0, 2, nan, 4])  # c: no sweep at all
    assert single_size_notes(unmeasured) == ["g: a, b sampled at batch 1 alone (sample.batch_sizes), so no best batch."]
    assert single_size_notes(ladder.assign(sample_volumes_per_hour_best=[2.0, 3, 4, 5])) == []


def test_tab07_says_which_compile_times_came_out_of_a_warm_cache(statistics_results):
    table = _build(statistics_results, "tab07_frontier")
    frame = table.frame.set_index("variant")
    assert frame.loc["tf32", "train_compile_s"] == 12.5 and frame.loc["tf32", "sample_compile_s"] == 3.5
    assert [n for n in table.notes if "cache" in n] == [
        "g1: compile seconds out of a warm inductor cache for tf32 (train, warm), tf32 (sample, partly warm); a cold "
        "compile of the same graphs takes longer."]


def test_fig11_draws_volumes_per_hour_at_the_best_batch_and_at_batch_1(statistics_results):
    """The throughput panel: a bar at the best batch's volumes per hour labelled with its size, a line at batch 1,
    the FLOP ceiling (3600 / the volume's FLOP floor) only where it is one, and "not measured" for a run without the
    sweep."""
    fig = _build(statistics_results, "fig11_optimization_ladder")
    try:
        [ax] = [ax for ax in fig.get_axes() if ax.get_title(loc="left") == "volumes per hour"]
        widths = [r.get_width() for r in ax.patches if isinstance(r, Rectangle) and r.get_width() > 0]
        assert widths == pytest.approx([2 * 3600 / (SAMPLE_T * 8.0e-3)])  # tf32 only: baseline not measured
        [ticks] = [c for c in ax.collections if isinstance(c, LineCollection)]
        assert [segment[0][0] for segment in ticks.get_segments()] == pytest.approx([3600 / (SAMPLE_T * 5.0e-3)])
        # The FLOP ceiling, every evaluation at the bf16 rate: 3600 / (T x forward FLOPs / rate) volumes per hour;
        # these made-up steps beat it (2,880 and 3,600 against 2,304), so it is no ceiling: not drawn, and said so.
        floor_s = 5e12 / 800e12 * SAMPLE_T
        assert 3600 / floor_s < 3600 / (SAMPLE_T * 5.0e-3) and not ax.get_lines()
        assert ax.get_xlabel().endswith("no FLOP ceiling")
        labels = [t.get_text() for t in ax.texts]
        assert "3,600 (b2)" in labels and "not measured" in labels
    finally:
        plt.close(fig)


def test_fig08_draws_the_median_per_sample_with_the_quartiles_per_sample(statistics_results):
    fig = _build(statistics_results, "fig08_end_to_end")
    try:
        train_ax, volume_ax, memory_ax = fig.get_axes()[:3]
        bars = sorted(r.get_width() for r in train_ax.patches if isinstance(r, Rectangle) and r.get_width() > 0)
        assert bars == pytest.approx(sorted(s["median_ms"] / SAMPLES_PER_STEP for s in STEP.values()))
        whiskers = sorted(tuple(sorted((a[0], b[0]))) for c in train_ax.collections if isinstance(c, LineCollection)
                          for a, b in c.get_segments() if abs(a[1] - b[1]) < 1e-9)
        expected = sorted((s["q1_ms"] / SAMPLES_PER_STEP, s["q3_ms"] / SAMPLES_PER_STEP) for s in STEP.values())
        assert len(whiskers) == len(expected)
        for drawn, quartiles in zip(whiskers, expected):  # pytest.approx compares flat sequences only
            assert drawn == pytest.approx(quartiles)
        volume = sorted(r.get_width() for r in volume_ax.patches if isinstance(r, Rectangle) and r.get_width() > 0)
        assert volume == pytest.approx(sorted(s["median_ms"] * SAMPLE_T / 1e3 for s in SAMPLE_STEP.values()))
        memory = [r.get_width() for r in memory_ax.patches if isinstance(r, Rectangle) and r.get_width() > 0]
        assert memory == pytest.approx([3.0, 3.0])
    finally:
        plt.close(fig)


def _bench(files: list) -> pd.DataFrame:
    """The bench of one label's result files through the reader (reporting.results.collect) at 800 TFLOP/s."""
    from reporting.results import collect

    rates = files[0].parents[1] / "device_rates.json"
    rates.write_text(json.dumps({"bf16_matmul_tflops": 800.0}))
    return collect([*files, rates], measured_labels=["g1"])["bench"]


def test_bench_takes_every_column_from_its_run(tmp_path):
    files = _result_files(tmp_path / "results" / "wholehead" / "g1")
    frame = _bench(files)
    assert list(frame["variant"]) == ["baseline", "tf32"]  # the runs table's order
    frame = frame.set_index("variant")
    for variant, step in STEP.items():
        row, sample = frame.loc[variant], SAMPLE_STEP[variant]
        per_sample = step["median_ms"] / SAMPLES_PER_STEP
        assert row["train_ms_per_sample"] == per_sample
        assert row["train_ms_per_sample_q1"] == step["q1_ms"] / SAMPLES_PER_STEP
        assert row["train_ms_per_sample_q3"] == step["q3_ms"] / SAMPLES_PER_STEP
        assert row["train_model_tflops"] == pytest.approx(16e12 / per_sample / 1e9, rel=1e-12)
        assert row["train_fraction_of_bf16_rate"] == pytest.approx(16e12 / per_sample / 1e9 / 800, rel=1e-12)
        assert row["train_executed_tflop_per_sample"] == pytest.approx(16.0, rel=1e-12)
        assert row["train_peak_gib"] == 3.0 and row["sample_peak_gib"] == 1.0
        assert row["bare_loop_ms_per_sample"] == pytest.approx(per_sample * 0.8)
        assert row["bare_loop_gap_pct"] == pytest.approx(25.0)
        assert (row["sample_step_ms"], row["sample_step_q1_ms"], row["sample_step_q3_ms"]) == (
            sample["median_ms"], sample["q1_ms"], sample["q3_ms"])
        assert row["sample_model_tflops"] == pytest.approx(5e12 / sample["median_ms"] / 1e9, rel=1e-12)
        assert row["sample_fraction_of_bf16_rate"] == pytest.approx(5e12 / sample["median_ms"] / 1e9 / 800,
                                                                     rel=1e-12)
        assert row["sample_volume_s"] == sample["median_ms"] * SAMPLE_T / 1e3 and row["timesteps"] == SAMPLE_T
        assert row["memory_kind"] == "cuda_max_allocated"
    assert frame.loc["tf32", "train_compile_s"] == 12.5 and frame.loc["tf32", "sample_compile_s"] == 3.5
    assert frame.loc["tf32", "switches"] == "tf32" and frame.loc["baseline", "switches"] == "fp32"
    assert frame.loc["tf32", "sample_volumes_per_hour_b1"] == pytest.approx(3600 / (SAMPLE_T * 5.0e-3))
    assert frame.loc["tf32", "sample_best_batch"] == 2
    assert frame.loc["tf32", "sample_volumes_per_hour_best"] == pytest.approx(2 * 3600 / (SAMPLE_T * 8.0e-3))
    assert all(pd.isna(frame.loc["baseline", column]) for column in (
        "sample_volumes_per_hour_b1", "sample_best_batch", "sample_volumes_per_hour_best"))
    assert frame.loc["tf32", "train_speedup_vs_baseline"] == pytest.approx(2.5)
    assert frame.loc["tf32", "sample_speedup_vs_baseline"] == pytest.approx(2.0)
    assert frame.loc["baseline", "train_speedup_vs_tf32"] == pytest.approx(0.4)
    assert frame.loc["baseline", "sample_speedup_vs_tf32"] == pytest.approx(0.5)
    # A training run without its sampling run, without switches recorded, and one whose switch had no effect.
    train = json.loads(files[0].read_text())
    del train["provenance"]["switches"]
    files[0].write_text(json.dumps(train))
    alone = _bench([files[0]]).iloc[0]
    assert alone["switches"] == "fp32"
    for column in ("sample_step_ms", "sample_step_q1_ms", "sample_step_q3_ms", "sample_model_tflops",
                   "sample_fraction_of_bf16_rate", "sample_volume_s", "timesteps", "sample_peak_gib",
                   "sample_compile_s", "sample_volumes_per_hour_b1", "sample_best_batch",
                   "sample_volumes_per_hour_best"):
        assert alone[column] is None or math.isnan(alone[column]), column
    train["provenance"] |= {"switches": {"autocast": "bfloat16", "fused_adam": True},
                            "switches_effective": {"fused_adam": False}}
    files[0].write_text(json.dumps(train))
    marked = _bench([files[0]]).iloc[0]
    assert marked["switches"] == "bfloat16 autocast, fused adam (no effect here)"


def test_speedup_verdict_at_its_boundaries():
    """A quartile range touching the reference's (low or high exactly 1) is within noise; times below 1 ms are
    times; a zero time and a missing quartile claim no direction."""
    from reporting import derived

    rows = [("g", "baseline", 10.0, 8.0, 12.0), ("g", "touch_low", 8.0, 6.0, 8.0),
            ("g", "touch_high", 14.0, 12.0, 16.0),
            ("g", "tiny", 0.8, 0.6, 0.9), ("g", "zero", 0.0, 0.0, 0.0), ("g", "half", 5.0, float("nan"), 6.0),
            ("g", "baseline", 20.0, 19.0, 21.0), ("g", "q1_zero", 5.0, 0.0, 6.0), ("g", "q3_zero", 5.0, 0.0, 0.0),
            ("g", "bit_faster", 7.0, 6.5, 7.5)]
    runs = pd.DataFrame(rows, columns=["gpu", "variant", "train_step_median_ms", "train_step_q1_ms",
                                       "train_step_q3_ms"], index=[5, 4, 3, 2, 1, 0, 9, 8, 11, 10])
    runs["train_ms_per_sample"] = runs["train_step_median_ms"] / 2
    verdict = derived.speedup_verdict(runs)
    assert list(verdict.index) == list(range(10)) and list(verdict.columns) == derived.VERDICT_COLUMNS
    by = verdict.drop_duplicates("variant").set_index("variant")
    assert (by.loc["baseline", "low"], by.loc["baseline", "high"], by.loc["baseline", "verdict"]) == (
        1.0, 1.0, "reference")
    assert by.loc["touch_low", "low"] == 1.0 and by.loc["touch_low", "verdict"] == "within noise"
    assert by.loc["touch_high", "high"] == 1.0 and by.loc["touch_high", "verdict"] == "within noise"
    assert bool(by.loc["touch_low", "within_noise"]) and bool(by.loc["touch_high", "within_noise"])
    assert by.loc["tiny", "speedup"] == pytest.approx(12.5) and by.loc["tiny", "verdict"] == "faster"
    assert by.loc["tiny", "low"] == pytest.approx(8 / 0.9) and by.loc["tiny", "high"] == pytest.approx(12 / 0.6)
    assert math.isnan(by.loc["zero", "speedup"]) and by.loc["zero", "verdict"] == "not measured"
    assert math.isnan(by.loc["zero", "low"]) and math.isnan(by.loc["zero", "high"])
    assert by.loc["half", "verdict"] == "no spread measured" and bool(by.loc["half", "within_noise"])
    assert by.loc["q1_zero", "verdict"] == "no spread measured" and math.isnan(by.loc["q1_zero", "high"])
    assert math.isnan(by.loc["q3_zero", "low"]) and math.isnan(by.loc["q3_zero", "high"])
    assert by.loc["bit_faster", "low"] == pytest.approx(8 / 7.5) and by.loc["bit_faster", "high"] < 2
    assert by.loc["bit_faster", "verdict"] == "faster"
    assert verdict.loc[6, "verdict"] == "reference" and verdict.loc[6, "speedup"] == pytest.approx(0.5)
    assert not bool(by.loc["tiny", "within_noise"])
    slow = derived.speedup_verdict(pd.DataFrame(
        [("g", "baseline", 10.0, 9.0, 11.0), ("g", "slow", 11.0, 11.0, 12.0)],
        columns=["gpu", "variant", "train_ms_per_sample", "train_step_q1_ms", "train_step_q3_ms"]).assign(
        train_step_median_ms=lambda f: f["train_ms_per_sample"])).set_index("variant")
    assert slow.loc["slow", "high"] == 1.0 and slow.loc["slow", "verdict"] == "within noise"
    for empty in (derived.speedup_verdict(runs, "sample"), derived.speedup_verdict(runs.iloc[:0])):
        assert empty.empty and list(empty.columns) == derived.VERDICT_COLUMNS  # no sampling times, no runs
    with pytest.raises(ValueError, match=r"phase 'profile': one of \['sample', 'train'\]"):
        derived.speedup_verdict(runs, "profile")


def test_derived_ratio_to_a_zero_or_missing_reference_is_nan():
    from reporting import derived

    frame = pd.DataFrame({"gpu": ["a", "a", "b", "b", "c"], "variant": ["baseline", "x", "baseline", "x", "x"],
                          "t": [0.0, 5.0, 4.0, 2.0, 1.0]})
    out = derived.relative_to(frame, ["t"])
    assert math.isnan(out.loc[1, "t"]) and out.loc[3, "t"] == 0.5 and math.isnan(out.loc[4, "t"])
    assert list(derived.speedup(frame, "t").fillna(-1)) == [-1, -1, 1.0, 2.0, -1]
