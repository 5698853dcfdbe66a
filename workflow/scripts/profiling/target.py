"""The profiled program: one post-warm-up training step or sampling step of one (hardware label, variant).

Run as `python -m profiling.target SPEC.json` under ncu, nsys or on its own (torch.profiler). The profiled region is
marked three ways at once, so every tool sees the same step:
- a process-wide NVTX range (`range_start`/`range_end`, not the thread-local push/pop: autograd launches the
  backward kernels from its own thread, and a thread-local range would silently drop them), for `ncu --nvtx`;
- `cudaProfilerStart/Stop`, for `nsys --capture-range=cudaProfilerApi`;
- a torch.profiler session, when the spec asks for one.
Under ncu every operator call inside it is marked as well (profiling.operators), so that ncu can profile each repeated
operator once.
On its own (torch.profiler, in the profile job's process), the machine's conditions around the step
(measurement.conditions: the load beside it, the speed probe, the GPU's state) and its wall time by a synchronised
clock go to the spec's `conditions` file, so that a profile made under load says so (tab08 judges no kernel-class share
of such a profile); under ncu or nsys the profile job records them around the tool's run (profiling.runner).
Everything that must not be profiled (model set-up, data loading, cuDNN autotuning) happens in the warm-up before it.
The step is the timing jobs' step: `Training.step` or `Sampling.step` of medddpm.engine, placed by the same code.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import torch

from measurement import conditions
from measurement.timing import synchronize
from profiling import operators

RANGE = "medddpm_profiled"


@contextlib.contextmanager
def profiled_region(device: torch.device, torch_trace: Path | None, conditions_file: Path | None = None):
    """Mark the region for every profiler; yields the torch.profiler session (or None). Writes the region's
    conditions and wall time to `conditions_file` (module docstring) where one is given."""
    if conditions_file is None:  # under ncu or nsys: nothing here to read (nvidia-smi would run under the tool)
        with _marked(device, torch_trace) as prof:
            yield prof
            synchronize(device)
        return
    before, load = conditions.snapshot(device), conditions.OtherLoad()
    with _marked(device, torch_trace) as prof:
        load.start()
        started = time.perf_counter()
        yield prof
        synchronize(device)
        wall_ms = 1000 * (time.perf_counter() - started)
    record = {**conditions.measured(before, load, device), "wall_ms": wall_ms}
    conditions_file.write_text(json.dumps(record, indent=1))


@contextlib.contextmanager
def _marked(device: torch.device, torch_trace: Path | None):
    cuda = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    # Input shapes in the trace: a copy kernel launched inside an operator (convolution_backward converting one of
    # its operands' memory format, say) can then be traced to the operand. Kernel durations are the GPU's either way.
    session = (torch.profiler.profile(activities=activities, record_shapes=True) if torch_trace
               else contextlib.nullcontext())
    synchronize(device)
    if cuda:
        torch.cuda.profiler.start()
        range_id = torch.cuda.nvtx.range_start(RANGE)
    with session as prof:
        yield prof
    if cuda:
        torch.cuda.nvtx.range_end(range_id)
        torch.cuda.profiler.stop()
    if torch_trace:
        prof.export_chrome_trace(str(torch_trace))


@contextlib.contextmanager
def marked_operators(calls_file: Path | None, run_):
    """Under ncu (a spec with `operators`): every operator call of the step in its NVTX ranges, and the calls written
    to `calls_file` (profiling.operators); where the variant launches kernels outside the dispatcher, nothing is
    marked and the file says so."""
    if calls_file is None:
        yield
        return
    from medddpm.placement import Placement

    if not operators.markable(Placement.of(run_)):  # kernels launched outside the dispatcher: every one profiled
        operators.write_calls(calls_file, None)
        yield
        return
    with operators.operator_marks() as marks:
        yield
    operators.write_calls(calls_file, marks.calls)


def run(spec: dict) -> None:
    """Build the variant's training or sampling step from the spec's params with the engine the timing jobs use,
    warm it up (compilation, CUDA graph capture, cuDNN autotuning happen there), then profile one step."""
    from medddpm.build import ModelSpec
    from medddpm.dataset import PreparedPairs
    from medddpm.engine import Sampling, Training, timed_steps
    from medddpm.placement import Placement
    from medddpm.runs import start_job
    from medddpm.settings import TrainSettings, from_mapping

    params = spec["params"]
    run_ = start_job(params, spec["variant"], Path(spec["repo"]), spec.get("preflight"))
    model_spec = ModelSpec.from_params(params["model"], params["diffusion"])
    train = from_mapping(TrainSettings, params["train"], "train")
    warmup = params["warmup_steps"]
    trace = Path(spec["torch_trace"]) if spec.get("torch_trace") else None
    recorded = Path(spec["conditions"]) if spec.get("conditions") else None
    region = {"torch_trace": trace, "conditions_file": recorded}
    calls_file = Path(spec["operators"]) if spec.get("operators") else None
    if spec["phase"] == "train":
        training = Training(model_spec, train, run_, Path(spec["dataset"]))
        training.warm_up()
        for _ in timed_steps(training.step, warmup, 0, timer=None, prepare=training.prepare):
            pass
        # Profile a steady-state step: one that updates the EMA average (every `ema_update_every` steps once past
        # `ema_start_step`), so the profile holds forward, backward of every micro-batch, Adam and the EMA update.
        training.trainer.step_index = -(-train.ema_start_step // train.ema_update_every) * train.ema_update_every
        training.prepare()  # batch assembly and pinning stay outside, as in the timed training step
        with profiled_region(run_.device, **region), marked_operators(calls_file, run_):
            training.step()
    else:
        # The sampling step of the sample job (initial weights: the kernels do not depend on the values).
        sampling = Sampling(model_spec.build(train.seed), Placement.of(run_))
        batch = PreparedPairs(Path(spec["dataset"]), "train")[0]
        condition = sampling.placement.input(batch["input"].unsqueeze(0))
        x = sampling.placement.input(torch.randn_like(batch["target"].unsqueeze(0)))
        sampling.warm_up(condition, train.seed, steps=warmup)
        with sampling.running(), profiled_region(run_.device, **region), marked_operators(calls_file, run_):
            sampling.step(x, condition, sampling.middle_step)
    print(json.dumps({"profiled": spec["phase"], "variant": spec["variant"], "device": str(run_.device)}))


if __name__ == "__main__":
    run(json.loads(Path(sys.argv[1]).read_text()))
