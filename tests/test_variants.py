"""Variant switches really change the backend flags, the memory format and the execution, never the function;
labels are checked."""

import copy

import pytest
import torch

from config_settings import paper_unet, unet
from measurement.devices import DeviceMismatch, resolve_device
from medddpm.diffusion import GaussianDiffusion
from medddpm.sampling import UNetEvaluation
from medddpm.ema import EMA
from medddpm.unet import AttentionBlock, ResBlock, UNet3D, parameter_count, set_checkpointing
from medddpm.variants import (Variant, apply_backend, autocast, backend_flags, prepare_input, prepare_model,
                              restore_backend)
from unet_helpers import forward_backward, tiny_inputs, tiny_unet

HARDWARE = {"cpu": {"device": "cpu"}, "h200": {"device": "cuda", "name_pattern": "H200"}}


@pytest.mark.parametrize(
    "switches",
    [
        {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False},
        {"cudnn_tf32": True, "matmul_tf32": True, "channels_last": True},
        {"cudnn_tf32": True, "matmul_tf32": False, "channels_last": False},
        {"cudnn_tf32": False, "matmul_tf32": True, "channels_last": False, "cudnn_benchmark": True},
        {"cudnn_tf32": True, "matmul_tf32": True, "channels_last": False, "cudnn_benchmark": True,
         "cudnn_benchmark_all_engines": True},
    ],
)
def test_backend_flags_follow_the_variant(switches):
    variant = Variant.from_config("v", switches)
    apply_backend(variant)
    flags = backend_flags()
    assert flags["cudnn_tf32"] == switches["cudnn_tf32"]
    assert flags["matmul_tf32"] == switches["matmul_tf32"]
    assert flags["cudnn_benchmark"] == switches.get("cudnn_benchmark", False)
    # PyTorch's default of 10 engine configurations timed, or every one.
    assert flags["cudnn_benchmark_limit"] == (0 if switches.get("cudnn_benchmark_all_engines") else 10)
    # What inductor's max-autotune reads: it raises when the per-backend and the legacy setting disagree.
    assert torch.get_float32_matmul_precision() == ("high" if switches["matmul_tf32"] else "highest")


def test_the_backend_state_read_is_put_back_as_it_was():
    apply_backend(Variant.from_config("a", {"cudnn_tf32": True, "matmul_tf32": False, "channels_last": False,
                                           "cudnn_benchmark": True, "cudnn_benchmark_all_engines": True}))
    saved = backend_flags()
    apply_backend(Variant.from_config("b", {"cudnn_tf32": False, "matmul_tf32": True, "channels_last": False}))
    assert backend_flags() != saved
    restore_backend(saved)
    assert backend_flags() == saved


def test_channels_last_changes_weights_and_inputs_memory_format():
    model = UNet3D(unet())
    x = torch.randn(1, 3, 16, 16, 16)
    cl = Variant("cl", False, False, True)
    prepare_model(model, cl)
    weight = model.input_blocks[0][0].weight
    assert weight.is_contiguous(memory_format=torch.channels_last_3d) and not weight.is_contiguous()
    assert prepare_input(x, cl).is_contiguous(memory_format=torch.channels_last_3d)
    assert not prepare_input(x, cl).is_contiguous()
    assert prepare_input(x, Variant("b", False, False, False)).is_contiguous()


def test_unknown_switch_is_rejected_with_its_name():
    with pytest.raises(ValueError, match="fp8"):
        Variant.from_config("x", {"cudnn_tf32": True, "matmul_tf32": True, "channels_last": False, "fp8": True})


def test_tf32_switches_are_marked_without_effect_on_cpu():
    effective = Variant("tf32", True, True, False).effective_on(torch.device("cpu"))
    assert effective["cudnn_tf32"] is False and effective["channels_last"] is True


def test_cpu_label_resolves_to_cpu():
    assert resolve_device("cpu", HARDWARE) == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_gpu_label_without_that_gpu_is_a_clear_error():
    with pytest.raises(DeviceMismatch, match="'h200'.*no CUDA device"):
        resolve_device("h200", HARDWARE)


def test_undefined_label_and_emulation():
    with pytest.raises(DeviceMismatch, match="not defined"):
        resolve_device("mi300", HARDWARE)
    assert resolve_device("h200", HARDWARE, emulate_gpus_on_cpu=True) == torch.device("cpu")


# The switches beyond the paper: each changes how the same function is computed, never the function.

CPU = torch.device("cpu")
PAPER = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False}


def test_defaults_are_upstream_behaviour():
    variant = Variant.from_config("baseline", PAPER)
    assert variant.switches() == {**PAPER, "cudnn_benchmark": False, "autocast": None, "compile": None,
                                  "fused_norm_act": False, "checkpointing": "attention", "fused_adam": False,
                                  "foreach_ema": False, "cuda_graphs": False,
                                  "gather_upsampling": False, "ndhwc": False, "cuda_graph_training": False,
                                  "data_parallel": 1, "stacked_micro_batches": False,
                                  "cudnn_benchmark_all_engines": False, "ndhwc_edges": False,
                                  "edge_gemms": False, "dense_skip_gradients": False, "time_embedding_in_norm": False,
                                  "recompute_edge_columns": False}
    model = prepare_model(UNet3D(paper_unet()), variant, CPU)
    assert parameter_count(model) == 40_226_433
    assert all(m.use_checkpoint for m in model.modules() if isinstance(m, AttentionBlock))
    assert not any(m.use_checkpoint for m in model.modules() if isinstance(m, ResBlock))


@pytest.mark.parametrize(
    "switches, message",
    [
        ({"compile": "fastest"}, "compile 'fastest'"),
        ({"checkpointing": "some"}, "checkpointing 'some'"),
        ({"autocast": "float8"}, "autocast 'float8'"),
        ({"cuda_graphs": True, "compile": "reduce-overhead"}, "captures CUDA graphs itself"),
        ({"cuda_graph_training": True, "compile": "max-autotune"}, "cuda_graph_training with compile mode"),
        ({"ndhwc": True}, "ndhwc needs channels_last: true"),
        ({"data_parallel": 0}, "data_parallel 0 is not a whole number of processes, 1 or more"),
        ({"data_parallel": 1.5}, "data_parallel 1.5 is not a whole number"),
        ({"data_parallel": 2, "cuda_graph_training": True}, "data_parallel with cuda_graph_training"),
        ({"data_parallel": 2, "stacked_micro_batches": True}, "stacked_micro_batches with data_parallel"),
        ({"cudnn_benchmark_all_engines": True}, "cudnn_benchmark_all_engines needs cudnn_benchmark"),
        ({"channels_last": True, "ndhwc": True, "ndhwc_edges": True, "edge_gemms": True},
         "edge_gemms needs ndhwc_edges: true and compile"),
        ({"compile": "default", "edge_gemms": True}, "edge_gemms needs ndhwc_edges: true and compile"),
    ],
)
def test_invalid_switch_values_are_named(switches, message):
    with pytest.raises(ValueError, match=message):
        Variant.from_config("x", {**PAPER, **switches})


def test_switches_without_meaning_on_a_cpu_say_so():
    everything = Variant("all", True, True, True, True, "bfloat16", None, True, "all", True, True, True, True, True,
                         True)
    effective = everything.effective_on(CPU)
    for switch in ("cudnn_tf32", "matmul_tf32", "cudnn_benchmark", "cuda_graphs", "fused_norm_act",
                   "ndhwc", "cuda_graph_training"):
        assert effective[switch] is False, switch
    for switch in ("channels_last", "autocast", "checkpointing", "fused_adam", "foreach_ema", "compile"):
        assert effective[switch] is True, switch
    assert set(effective) == set(everything.switches())
    assert Variant("c", False, False, False, compile="default", fused_norm_act=True).effective_on("cpu")[
        "fused_norm_act"] is True  # inductor fuses it on a CPU too
    assert all(Variant("g", True, True, True, cuda_graphs=True, cuda_graph_training=True).effective_on("cuda").values())


@pytest.mark.parametrize("mode", ["none", "all"])
def test_checkpointing_modes_give_the_same_gradients_under_bf16_autocast(mode):
    """Recomputation runs under the forward's autocast state (upstream's own checkpoint fails in bf16 there)."""
    x, t = tiny_inputs()
    context = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    reference = tiny_unet()
    out_ref, grads_ref = forward_backward(reference, x, t, context())  # upstream: attention recomputed
    model = tiny_unet()
    set_checkpointing(model, mode)
    assert all(m.use_checkpoint == (mode == "all") for m in model.modules() if isinstance(m, ResBlock))
    out, grads = forward_backward(model, x, t, context())
    torch.testing.assert_close(out, out_ref, rtol=0, atol=0)
    for name in grads:
        torch.testing.assert_close(grads[name], grads_ref[name], msg=name)
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_foreach_ema_gives_the_same_numbers_as_the_per_parameter_loop():
    average, current = tiny_unet(1), tiny_unet(2)
    average = average.to(memory_format=torch.channels_last_3d)
    looped, multi = copy.deepcopy(average), copy.deepcopy(average)
    for _ in range(3):
        EMA(0.995).update_model_average(looped, current)
        EMA(0.995, foreach=True).update_model_average(multi, current)
    for a, b in zip(looped.parameters(), multi.parameters()):
        assert torch.equal(a, b)
    assert not torch.equal(next(looped.parameters()), next(average.parameters()))


def test_fused_adam_takes_the_same_steps():
    """The same gradients (computed once, so that noise-level gradients cannot diverge between the runs) give the
    same Adam steps, up to float32 rounding of the update."""
    x, t = tiny_inputs()
    _, grads = forward_backward(tiny_unet(), x, t)
    states = []
    for fused in (False, True):
        model = tiny_unet()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, **({"fused": True} if fused else {}))
        for scale in (1.0, -0.5):
            for name, parameter in model.named_parameters():
                parameter.grad = grads[name] * scale
            optimizer.step()
        states.append(model.state_dict())
    for name in states[0]:
        torch.testing.assert_close(states[1][name], states[0][name], rtol=1e-5, atol=1e-7, msg=name)


def test_sampling_evaluation_without_cuda_graphs_is_the_plain_u_net():
    torch.manual_seed(0)
    diffusion = GaussianDiffusion(tiny_unet(), timesteps=4).eval()
    evaluate = UNetEvaluation(diffusion, Variant("g", False, False, False, cuda_graphs=True), CPU)
    assert evaluate.graphs is False  # CUDA graphs need CUDA: never pretended on a CPU
    x = torch.randn(1, 1, 8, 8, 8)
    condition = torch.ones(1, 2, 8, 8, 8)
    t = torch.tensor([2])
    with torch.no_grad():
        assert torch.equal(evaluate(x, condition, t), diffusion.denoise(x, condition, t))
        chain = [v for _, v in diffusion.sample_steps(condition, torch.Generator().manual_seed(0), 2, evaluate)]
        plain = [v for _, v in diffusion.sample_steps(condition, torch.Generator().manual_seed(0), 2)]
    assert all(torch.equal(a, b) for a, b in zip(chain, plain)) and evaluate.captures == 0


def test_bf16_variant_trains_with_checkpointed_attention_on_cpu():
    variant = Variant("bf16", False, False, True, autocast="bfloat16", fused_norm_act=True)
    model = prepare_model(tiny_unet(), variant, CPU)
    x, t = tiny_inputs()
    with autocast(variant, CPU):
        out = model(prepare_input(x, variant), t)
    out.float().abs().mean().backward()  # backward outside autocast, through the recomputed attention
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
