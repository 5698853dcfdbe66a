"""The timed-step engine (medddpm.engine): the step a profile rule profiles is the step a timing job times.

The profiled program (profiling.target) and the timing jobs (medddpm.jobs) run on a tiny CPU workload while a spy
records every U-Net evaluation inside the profiled region and inside the timed regions: the step function it ran
under and the placement of everything the U-Net receives (layout, dtype, shape, device of the inputs; layout and
dtype of the weights; autocast and gradient mode). The two routes must record the same. A scan of the workflow's
code shows that only the engine applies a variant to a model, an input or a step.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
import torch

from conftest import REPO, SCRIPTS, memory_layout, random_prepared_dataset
from measurement.timing import DeviceTimer
from medddpm import engine
from medddpm.build import ModelSpec
from medddpm.diffusion import GaussianDiffusion
from medddpm.jobs import run_sampling, run_training
from medddpm.runs import start_job
from medddpm.settings import SampleSettings, TrainSettings, from_mapping
from medddpm.unet import UNet3D
from profiling import target

MODEL = {"in_channels": 3, "out_channels": 1, "base_width": 32, "channel_mult": [1, 2], "num_res_blocks": 1,
         "attention_downsample_rates": [2], "num_heads": 1, "dropout": 0.0}
DIFFUSION = {"timesteps": 4}
SHAPE = (8, 8, 8)
CPU = {"label": "cpu", "device": "cpu", "name_pattern": None, "emulate_gpus_on_cpu": False}
TRAIN = {"lr": 1e-5, "gradient_accumulation": 2, "ema_decay": 0.995, "ema_update_every": 10, "ema_start_step": 2000,
         "warmup_steps": 1, "measured_steps": 2, "seed": 0, "bare_loop_steps": 0}
SAMPLE = {"masks": 1, "max_steps": None, "warmup_steps": 1, "seed": 0, "batch_sizes": [1, 2],
          "throughput_warmup_steps": 2, "throughput_steps": 2}
PAPER = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False}
VARIANTS = {
    "baseline": PAPER,
    "channels_last": PAPER | {"channels_last": True},
    "bf16_channels_last": PAPER | {"channels_last": True, "autocast": "bfloat16", "fused_norm_act": True,
                                   "checkpointing": "all", "fused_adam": True, "foreach_ema": True},
}
# What each variant's placement must be, as the U-Net sees it: (layout of the weights, autocast dtype or None).
EXPECTED = {"baseline": ("contiguous", None), "channels_last": ("channels_last_3d", None),
            "bf16_channels_last": ("channels_last_3d", torch.bfloat16)}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return random_prepared_dataset(tmp_path_factory, SHAPE)


def placement(x: torch.Tensor) -> tuple:
    return memory_layout(x), x.dtype, tuple(x.shape), x.device.type


class Spy:
    """Records every U-Net evaluation while `measuring` (inside a timed or a profiled region): the step function it
    ran under (the innermost of Training.step and GaussianDiffusion.p_sample, with the type of the evaluation the
    latter was given, and its t) and the placement of what the U-Net receives."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.calls: list[tuple] = []
        self.measuring = False
        self.frames: list[str] = []
        self.denoised = None
        spy = self

        def framed(function, label):
            def wrapper(*args, **kwargs):
                spy.frames.append(label(*args, **kwargs))
                try:
                    return function(*args, **kwargs)
                finally:
                    spy.frames.pop()
            return wrapper

        def p_sample_label(self_, x, condition, step, generator=None, denoise=None):
            return f"GaussianDiffusion.p_sample(denoise={type(denoise).__name__})", step

        monkeypatch.setattr(engine.Training, "step", framed(engine.Training.step, lambda *_: ("Training.step", None)))
        monkeypatch.setattr(GaussianDiffusion, "p_sample", framed(GaussianDiffusion.p_sample, p_sample_label))
        denoise = GaussianDiffusion.denoise

        def denoise_spy(self_, *args):  # the noisy image, the condition and t, before their concatenation
            spy.denoised = tuple(placement(a) for a in args)
            return denoise(self_, *args)

        monkeypatch.setattr(GaussianDiffusion, "denoise", denoise_spy)
        start, stop = DeviceTimer.start, DeviceTimer.stop
        monkeypatch.setattr(DeviceTimer, "start", lambda timer: (setattr(spy, "measuring", True), start(timer))[1])
        monkeypatch.setattr(DeviceTimer, "stop", lambda timer, s: (stop(timer, s), setattr(spy, "measuring", False))[0])
        region = target.profiled_region

        @contextlib.contextmanager
        def profiled(*args, **kwargs):
            with region(*args, **kwargs) as session:
                spy.measuring = True
                yield session
                spy.measuring = False

        monkeypatch.setattr(target, "profiled_region", profiled)

    def __enter__(self):
        self.handle = torch.nn.modules.module.register_module_forward_pre_hook(self.record)
        return self

    def __exit__(self, *exc):
        self.handle.remove()

    def record(self, module, args) -> None:
        if not isinstance(module, UNet3D) or not self.measuring:
            return
        weight = module.input_blocks[0][0].weight
        self.calls.append((
            *(self.frames[-1] if self.frames else (None, None)),
            (self.denoised, tuple(placement(a) for a in args)),
            (memory_layout(weight), weight.dtype, weight.requires_grad),
            torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu"),
            torch.is_grad_enabled(),
        ))

    def take(self) -> list[tuple]:
        """(step function, diffusion step t or None, input placement, weight placement, autocast, grad mode) of every
        evaluation recorded since the last call."""
        calls, self.calls = self.calls, []
        return calls


def params(variant: str) -> dict:
    return {"device": CPU, "variant": VARIANTS[variant], "model": MODEL, "diffusion": DIFFUSION, "train": TRAIN,
            "warmup_steps": 1}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_profiled_step_is_the_timed_step(variant, dataset, tmp_path, monkeypatch):
    spy = Spy(monkeypatch)
    model_spec = ModelSpec.from_params(MODEL, DIFFUSION)
    run = start_job(params(variant), variant, REPO)
    profile = lambda phase: target.run({"params": params(variant), "variant": variant, "phase": phase,  # noqa: E731
                                        "dataset": str(dataset), "repo": str(REPO)})
    with spy:
        run_training(model_spec, from_mapping(TrainSettings, TRAIN, "train"), run, dataset, tmp_path / "train.json",
                     tmp_path / "train_steps.csv", tmp_path / "checkpoint.pt")
        timed_training = spy.take()
        profile("train")
        profiled_training = spy.take()
        run_sampling(model_spec, SampleSettings(**SAMPLE), run, tmp_path / "checkpoint.pt", dataset,
                     tmp_path / "sample.json", tmp_path / "sample_steps.csv", [tmp_path / "sample.nii.gz"])
        timed_sampling = spy.take()
        profile("sample")
        profiled_sampling = spy.take()

    placed = lambda calls: {call[:1] + call[2:] for call in calls}  # noqa: E731 (t aside)
    assert len(timed_training) == TRAIN["measured_steps"] * TRAIN["gradient_accumulation"]
    assert placed(profiled_training) == placed(timed_training)
    # The steps the sample job summarises in step_time: those after the first `warmup_steps` of each chain. The first
    # step of a chain starts from noise drawn in the condition's layout; every later one (and the profiled step) from
    # the previous step's output, whose one channel diffusion.py keeps in the contiguous layout.
    chain, sweep = timed_sampling[:DIFFUSION["timesteps"]], timed_sampling[DIFFUSION["timesteps"]:]
    summarised = [call for call in chain if call[1] < DIFFUSION["timesteps"] - SAMPLE["warmup_steps"]]
    assert len(summarised) == DIFFUSION["timesteps"] - SAMPLE["warmup_steps"]
    assert placed(profiled_sampling) == placed(summarised)
    # The throughput sweep's timed steps (after its warm-up) are the summarised step at each batch size: the same
    # step function and placement, the batch's size the only difference.
    assert [call[2][0][0][2][0] for call in sweep] == [b for b in SAMPLE["batch_sizes"]
                                                       for _ in range(SAMPLE["throughput_steps"])]
    assert unbatched(placed(sweep)) == unbatched(placed(summarised))
    # One kind of evaluation per phase, under the step function and with the placement the variant asks for.
    (train_call,), (sample_call,) = placed(timed_training), placed(summarised)
    assert train_call[0] == "Training.step" and train_call[4] is True
    assert sample_call[0] == "GaussianDiffusion.p_sample(denoise=UNetEvaluation)" and sample_call[4] is False
    weight_layout, autocast = EXPECTED[variant]
    for call, trained in ((train_call, True), (sample_call, False)):
        ((noisy, condition, _), (x, t)), weight, autocast_dtype = call[1], call[2], call[3]
        assert noisy[1:] == (torch.float32, (1, 1, *SHAPE), "cpu")
        assert condition == (weight_layout, torch.float32, (1, 2, *SHAPE), "cpu")
        assert x[1:] == (torch.float32, (1, 3, *SHAPE), "cpu") and t[1] == torch.int64
        assert weight == (weight_layout, torch.float32, trained)
        assert autocast_dtype == (autocast or False)


def unbatched(calls: set[tuple]) -> set[tuple]:
    """Placed calls (`placed` above) with the batch dimension left out of every input's shape."""
    def strip(placement: tuple) -> tuple:
        layout, dtype, shape, device = placement
        return layout, dtype, shape[1:], device

    return {(name, tuple(tuple(map(strip, group)) for group in inputs), *rest) for name, inputs, *rest in calls}


# Calls that apply a variant (medddpm.variants), build the optimizer, the EMA or the evaluation of a sampling step, or
# run a sampling step.
PLACING = re.compile(r"(?<![\w.])(prepare_model|prepare_input|compile_model|compiles_on|autocast|memory_format|"
                     r"UNetEvaluation|EMA)\(|\.(p_sample|sample_steps)\(|torch\.optim\.\w+\(")


def test_only_the_engine_applies_a_variant():
    """Outside the modules that define the switches and the steps (variants, diffusion, samplers, sampling, training,
    the EMA), every call that places a model or an input, enters the variant's autocast, compiles, builds the optimizer
    or the EMA, or runs a sampling step is in the engine (medddpm.engine and the placement it applies,
    medddpm.placement); the scan finds the known ones there."""
    defining = {"medddpm/variants.py", "medddpm/diffusion.py", "medddpm/samplers.py", "medddpm/sampling.py",
                "medddpm/training.py", "medddpm/ema.py"}
    found = {}
    for path in sorted(SCRIPTS.rglob("*.py")):
        name = path.relative_to(SCRIPTS).as_posix()
        if name in defining:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if PLACING.search(code):
                found.setdefault(name, []).append(code.strip())
    assert set(found) == {"medddpm/engine.py", "medddpm/placement.py"}, found
    calls = {match[0] or match[1] for codes in found.values() for code in codes for match in PLACING.findall(code)}
    assert calls >= {"prepare_model", "prepare_input", "compile_model", "compiles_on", "autocast", "UNetEvaluation",
                     "EMA", "p_sample", "sample_steps"}


def test_timed_steps_time_only_the_measured_steps_and_prepare_outside():
    """Warm-up steps untimed, each measured step alone between start and stop, `prepare` before every step outside
    the timed region; every step's result is yielded with its phase; a phase of no steps makes no progress bar."""
    events: list[str] = []

    class Timer:
        def start(self):
            events.append("start")
            return len(events)

        def stop(self, started):
            events.append(f"stop {started}")

    counter = iter(range(10))
    bars = []
    count_on = lambda phase, count: bars.append((phase, count)) or range(count)  # noqa: E731
    results = list(engine.timed_steps(lambda: events.append("step") or next(counter), 2, 2, Timer(),
                                      prepare=lambda: events.append("prepare"), progress=count_on))
    assert results == [("warmup", 0), ("warmup", 1), ("measured", 2), ("measured", 3)]
    assert events == ["prepare", "step"] * 2 + ["prepare", "start", "step", "stop 6", "prepare", "start", "step",
                                                "stop 10"]
    assert bars == [("warmup", 2), ("measured", 2)]
    bars.clear()
    assert [phase for phase, _ in engine.timed_steps(lambda: None, 0, 1, Timer(), progress=count_on)] == ["measured"]
    assert bars == [("measured", 1)]


def test_the_torch_trace_records_each_operators_input_shapes(tmp_path):
    """The profiled region's torch.profiler trace names each operator's input shapes, so that a kernel launched
    inside an operator (a copy inside convolution_backward, say) can be traced to the operand it worked on."""
    import json

    trace = tmp_path / "trace.json"
    with target.profiled_region(torch.device("cpu"), trace):
        torch.ones(2, 3) @ torch.ones(3, 5)
    events = json.loads(trace.read_text())["traceEvents"]
    products = [e for e in events if e.get("name") == "aten::mm"]
    assert products and products[0]["args"]["Input Dims"] == [[2, 3], [3, 5]]


def test_the_profiled_region_records_its_conditions_and_wall_time(tmp_path, monkeypatch):
    """The conditions file of a profiled step (tab08 judges no share of a profile made under load): the snapshots
    before and after it, what changed, the cores other processes kept busy, and its wall time by the clock (on a CPU
    no GPU state)."""
    import json
    import time

    from measurement import conditions

    # The machine's busy CPU seconds at the region's start and end (this process used none): 1.5 cores of others.
    busy, load_clock = iter([100.0, 101.5]), iter([10.0, 11.0])
    scripted = conditions.OtherLoad(busy=lambda: next(busy), own=lambda: 0.0, clock=lambda: next(load_clock))
    monkeypatch.setattr(conditions, "OtherLoad", lambda: scripted)
    clock = iter([20.0, 21.0])  # the region's start and end
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(conditions, "speed_probe", lambda: 9.5)
    recorded = tmp_path / "conditions.json"
    with target.profiled_region(torch.device("cpu"), None, recorded):
        pass
    record = json.loads(recorded.read_text())
    assert record["wall_ms"] == 1000.0
    assert record["other_load_cores"] == 1.5
    assert record["changes"] == []
    assert record["before"]["speed_probe_ms"] == record["after"]["speed_probe_ms"] == 9.5
    assert "gpu" not in record["before"]


def test_a_profilers_run_is_the_jobs_own_work_not_other_load(tmp_path, monkeypatch):
    """The conditions around ncu's or nsys's run count the CPU time of the tool and of the program it profiled (the
    job's waited-for descendants) as the job's own: os.times' children fields, here scripted."""
    import json
    import os

    from measurement import conditions
    from profiling import runner

    times = iter([os.times_result((1.0, 0.5, 2.0, 0.5, 0.0)), os.times_result((1.0, 0.5, 4.0, 1.0, 0.0))])
    monkeypatch.setattr(conditions.os, "times", lambda: next(times))
    assert conditions.own_and_childrens_cpu_seconds() == 4.0  # 1.0 + 0.5 of its own, 2.5 of its descendants
    assert conditions.own_and_childrens_cpu_seconds() == 6.5
    made = []
    monkeypatch.setattr(conditions, "OtherLoad", lambda **kwargs: made.append(kwargs) or _FixedLoad())
    monkeypatch.setattr(conditions, "speed_probe", lambda: 9.0)
    recorded = tmp_path / "ncu_conditions.json"
    with runner.tool_run_conditions(recorded):
        pass
    assert made == [{"own": conditions.own_and_childrens_cpu_seconds}]
    assert json.loads(recorded.read_text())["scope"] == "the profiler's whole run"


class _FixedLoad:
    def start(self) -> None:
        pass

    def stop(self) -> float:
        return 0.0
