"""The profiled program: one post-warm-up training step or sampling step of one (hardware label, variant).

Run as `python -m profiling.target SPEC.json` under ncu, nsys or on its own (torch.profiler). The profiled region is
marked three ways at once, so every tool sees the same step:
- a process-wide NVTX range (`range_start`/`range_end`, not the thread-local push/pop: autograd launches the
  backward kernels from its own thread, and a thread-local range would silently drop them), for `ncu --nvtx`;
- `cudaProfilerStart/Stop`, for `nsys --capture-range=cudaProfilerApi`;
- a torch.profiler session, when the spec asks for one.
Everything that must not be profiled (model set-up, data loading, cuDNN autotuning) happens in the warm-up before it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import torch

RANGE = "medddpm_profiled"


@contextlib.contextmanager
def profiled_region(device: torch.device, torch_trace: Path | None):
    """Mark the region for every profiler; yields the torch.profiler session (or None)."""
    cuda = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    session = torch.profiler.profile(activities=activities) if torch_trace else contextlib.nullcontext()
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.profiler.start()
        range_id = torch.cuda.nvtx.range_start(RANGE)
    with session as prof:
        yield prof
        if cuda:
            torch.cuda.synchronize(device)
    if cuda:
        torch.cuda.nvtx.range_end(range_id)
        torch.cuda.profiler.stop()
    if torch_trace:
        prof.export_chrome_trace(str(torch_trace))


def run(spec: dict) -> None:
    from medddpm.jobs import make_trainer
    from medddpm.runs import start_run
    from medddpm.variants import autocast, prepare_input

    config = spec["config"]
    run_ = start_run(config, spec["gpu"], spec["variant"], Path(spec["repo"]))
    trainer = make_trainer(config, run_, Path(spec["dataset"]))
    warmup = config["profiling"]["warmup_steps"]
    trace = Path(spec["torch_trace"]) if spec.get("torch_trace") else None
    if spec["phase"] == "train":
        for _ in range(warmup):
            trainer.step()
        # Profile a steady-state step: one that updates the EMA average (every `ema_update_every` steps once past
        # `ema_start_step`), so the profile holds forward, backward of every micro-batch, Adam and the EMA update.
        settings = trainer.settings
        trainer.step_index = -(-settings.ema_start_step // settings.ema_update_every) * settings.ema_update_every
        with profiled_region(run_.device, trace):
            trainer.step()
    else:
        diffusion = trainer.ema_model.eval()
        batch = next(trainer.batches)
        condition = prepare_input(batch["input"].to(run_.device), run_.variant)
        x = prepare_input(torch.randn_like(batch["target"]).to(run_.device), run_.variant)
        step = diffusion.num_timesteps // 2
        with torch.no_grad(), autocast(run_.variant, run_.device):
            for _ in range(warmup):
                diffusion.p_sample(x, condition, step)
            with profiled_region(run_.device, trace):
                diffusion.p_sample(x, condition, step)
    print(json.dumps({"profiled": spec["phase"], "variant": spec["variant"], "device": str(run_.device)}))


if __name__ == "__main__":
    run(json.loads(Path(sys.argv[1]).read_text()))
