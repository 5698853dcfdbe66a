"""torch.compile of the whole U-Net: one graph (fullgraph, no break) forward and backward, with attention
checkpointing on (non-reentrant torch.utils.checkpoint), off, and on every block, computing what the eager network
computes.

Traced with the `aot_eager` backend: dynamo captures the forward graph (a graph break is an error under
fullgraph) and AOTAutograd the joint forward/backward graph, checkpoint regions included, exactly as for inductor;
only the code generation is left out (inductor's C++ code generation for this network takes minutes on a CPU).
"""

import copy

import pytest
import torch

from config_settings import configured
from medddpm.training import Trainer, TrainSettings
from medddpm.diffusion import GaussianDiffusion
from medddpm.placement import Placement
from medddpm.unet import set_checkpointing
from medddpm.variants import Variant, prepare_model
from unet_helpers import forward_backward, tiny_inputs, tiny_unet
from watched import run_watched


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("checkpointing", ["attention", "none", "all"])
def test_whole_unet_compiles_as_one_graph_forward_and_backward(checkpointing):
    model = tiny_unet()
    set_checkpointing(model, checkpointing)
    x, t = tiny_inputs()
    expected_out, expected_grads = forward_backward(model, x, t)
    compiled = copy.deepcopy(model)
    compiled.compile(fullgraph=True, dynamic=False, backend="aot_eager")
    out, grads = forward_backward(compiled, x, t)
    torch.testing.assert_close(out, expected_out)
    assert list(grads) == list(expected_grads)
    for name in grads:
        torch.testing.assert_close(grads[name], expected_grads[name], msg=name)
    assert list(compiled.state_dict()) == list(model.state_dict())  # in-place compile keeps the keys


def _batches(shape=(8, 8, 8)):
    generator = torch.Generator().manual_seed(3)
    image = torch.rand(1, 1, *shape, generator=generator) * 2 - 1
    mask = (torch.rand(1, 2, *shape, generator=generator) > 0.5).float() * 2 - 1
    while True:
        yield {"input": mask, "target": image}


def test_frontier_switches_compile_and_train_like_eager(monkeypatch):
    """The switches together (bf16 autocast, channels-last, fused norm, fused Adam, foreach EMA; upstream's attention
    recomputation) through the training loop, compiled, against the same loop in eager mode."""
    calls = []
    original = torch.nn.Module.compile

    def compile_with_aot_eager(self, **options):
        calls.append(options)
        original(self, fullgraph=options["fullgraph"], dynamic=options["dynamic"], backend="aot_eager")

    monkeypatch.setattr(torch.nn.Module, "compile", compile_with_aot_eager)
    switches = dict(cudnn_tf32=True, matmul_tf32=True, channels_last=True, autocast="bfloat16", fused_norm_act=True,
                    fused_adam=True, foreach_ema=True)
    settings = configured(TrainSettings, "train", lr=1e-3, gradient_accumulation=1, ema_update_every=1,
                          ema_start_step=0)
    losses, states = {}, {}
    for mode in (None, "default"):
        variant = Variant("frontier", compile=mode, **switches)
        diffusion = prepare_model(GaussianDiffusion(tiny_unet(), timesteps=10), variant, torch.device("cpu"))
        trainer = Trainer(diffusion, _batches(), Placement(variant, torch.device("cpu")), settings,
                          torch.Generator().manual_seed(0))
        compile_seconds = trainer.warm_up_compiled()
        assert (compile_seconds is None) == (mode is None)
        losses[mode] = [trainer.step() for _ in range(2)]
        states[mode] = trainer.checkpoint()
    assert calls == [{"fullgraph": True, "dynamic": False, "mode": "default"}]
    assert list(states["default"]["model"]) == list(states[None]["model"])  # same keys, compiled or not
    assert list(states["default"]["ema"]) == list(states[None]["model"])
    torch.testing.assert_close(losses["default"], losses[None], rtol=2e-2, atol=1e-3)


def test_compile_cache_counts_say_cold_for_a_first_compile_and_warm_for_the_same_graph_again(tmp_path):
    """medddpm.compile_cache around a real inductor compilation (forward and backward), in two processes that share
    one cache folder: the first finds nothing there, the second everything."""
    import json
    import os
    from pathlib import Path
    import sys

    from medddpm import compile_cache

    program = (
        "import json, torch\n"
        "from medddpm import compile_cache\n"
        "step = torch.compile(lambda x: (torch.sin(x) * 2 + x.exp()).sum(), fullgraph=True, dynamic=False)\n"
        "x = torch.randn(16, requires_grad=True)\n"
        "with compile_cache.counting() as counts:\n"
        "    step(x).backward()\n"
        "print(json.dumps(counts))\n"
    )
    scripts = Path(__file__).resolve().parents[1] / "workflow" / "scripts"
    # TORCHINDUCTOR_VEC_ISA_OK=0: inductor generates scalar C++ for the CPU instead of first building and loading a
    # probe program per vector instruction set into the fresh cache folder (7 of the first process's 13 s). The graphs
    # are still compiled with the C++ compiler, cached and found again as counted below; which instructions their code
    # uses is no part of what is counted (the setting is the same in both processes, so it keys both compiles alike).
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCHINDUCTOR_VEC_ISA_OK": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(scripts), os.environ.get("PYTHONPATH")]))}

    def counts() -> dict:
        done = run_watched([sys.executable, "-c", program], tmp_path, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second = counts(), counts()
    assert first["fx_graph_misses"] > 0 and first["fx_graph_hits"] == 0 and compile_cache.state(first) == "cold"
    assert second["fx_graph_misses"] == 0 and second["autograd_misses"] == 0
    assert second["autograd_hits"] + second["fx_graph_hits"] > 0 and compile_cache.state(second) == "warm"
    assert compile_cache.state({name: 0 for name in compile_cache.COUNTERS}) is None  # nothing compiled
    assert compile_cache.state({**first, **{"fx_graph_hits": 1}}) == "partly warm"
