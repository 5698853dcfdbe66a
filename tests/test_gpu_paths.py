"""The paths only a CUDA GPU exercises (skipped elsewhere): the fused norm compiled on its own, torch.compile with
inductor's GPU code, CUDA graph capture and replay for sampling, fused Adam and pinned, non-blocking batch copies,
the sampling job's throughput sweep (graphs captured and shapes compiled outside its timed steps, a batch that runs
out of device memory), and the device ceilings. Run on a GPU machine with `python3 -m pytest tests/test_gpu_paths.py` (about 2.5 minutes
on an H200 with torch 2.11, most of it compiling the whole-head U-Net).
"""

import copy
import time

import pytest
import torch

from config_settings import config_section, configured, paper_unet
from measurement.rates import RateSettings, device_rates
from medddpm.diffusion import GaussianDiffusion
from medddpm.placement import Placement
from medddpm.sampling import UNetEvaluation
from medddpm.training import Trainer, TrainSettings
from medddpm.unet import GroupNorm32, GroupNormSiLU, UNet3D, parameter_count
from medddpm.variants import Variant, apply_backend, autocast, compiled_group_norm_silu, prepare_input, prepare_model
from unet_helpers import forward_backward, tiny_inputs, tiny_unet

pytestmark = pytest.mark.cuda
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _relative(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


@pytest.mark.parametrize("dtype, layout", [(torch.float32, torch.contiguous_format),
                                           (torch.bfloat16, torch.channels_last_3d)], ids=["fp32", "bf16-cl3d"])
def test_compiled_fused_norm_matches_groupnorm32_then_silu(dtype, layout):
    torch.manual_seed(0)
    norm = GroupNorm32(32, 128).to(CUDA)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.3)
        norm.bias.normal_(0.0, 0.3)
    reference = torch.nn.Sequential(norm, torch.nn.SiLU())
    fused = GroupNormSiLU(copy.deepcopy(norm), compiled_group_norm_silu())
    base = torch.randn(2, 128, 12, 16, 10, device=CUDA) * 2 + 1
    grad = torch.randn_like(base).to(dtype).contiguous(memory_format=layout)
    results = []
    for module in (reference, fused):
        x = base.to(dtype).contiguous(memory_format=layout).requires_grad_(True)
        out = module(x)
        out.backward(grad)
        results.append((out, x.grad, *[p.grad for p in module.parameters()]))
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    for got, expected in zip(results[1], results[0]):
        assert _relative(got, expected) < tolerance
    assert results[1][0].is_contiguous(memory_format=layout)


def test_eager_unet_with_compiled_fused_norms_in_channels_last_bf16():
    """Every norm site compiles its own kernel (more sites than dynamo's default recompile limit of 8)."""
    x, t = tiny_inputs(shape=(16, 16, 16))
    x, t = x.to(CUDA), t.to(CUDA)
    outputs = {}
    for fused in (False, True):
        variant = Variant("v", True, True, True, autocast="bfloat16", fused_norm_act=fused)
        model = prepare_model(tiny_unet().to(CUDA), variant, CUDA)
        with autocast(variant, CUDA):
            outputs[fused] = forward_backward(model, prepare_input(x, variant), t)
    assert _relative(outputs[True][0], outputs[False][0]) < 2e-2
    for name, grad in outputs[True][1].items():
        assert torch.isfinite(grad).all(), name


def test_bf16_backward_through_recomputed_attention_on_cuda():
    """Upstream's checkpoint fails here ("Input type (BFloat16) and bias type (float)"); ours recomputes under
    the forward's autocast state."""
    x, t = tiny_inputs(shape=(16, 16, 16))
    x, t = x.to(CUDA), t.to(CUDA)
    grads = {}
    for mode in ("attention", "none"):
        variant = Variant("bf16", True, True, False, autocast="bfloat16", checkpointing=mode)
        model = prepare_model(tiny_unet().to(CUDA), variant, CUDA)
        grads[mode] = forward_backward(model, x, t, torch.autocast("cuda", dtype=torch.bfloat16))[1]
    for name in grads["none"]:
        assert _relative(grads["attention"][name], grads["none"][name]) < 1e-2, name


def test_cuda_graph_sampling_replays_the_same_evaluation():
    variant = Variant("g", True, True, False, cuda_graphs=True)
    apply_backend(variant)
    diffusion = GaussianDiffusion(tiny_unet(), timesteps=8).to(CUDA).requires_grad_(False).eval()
    condition = torch.ones(1, 2, 16, 16, 16, device=CUDA)
    evaluate = UNetEvaluation(diffusion, variant, CUDA)
    assert evaluate.graphs
    with torch.no_grad():
        graphed = [v.clone() for _, v in diffusion.sample_steps(
            condition, torch.Generator(CUDA).manual_seed(0), 4, evaluate)]
        plain = [v for _, v in diffusion.sample_steps(condition, torch.Generator(CUDA).manual_seed(0), 4)]
    assert evaluate.captures == 1
    for a, b in zip(graphed, plain):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _batches(shape, seed=3):
    generator = torch.Generator().manual_seed(seed)
    image = torch.rand(1, 1, *shape, generator=generator) * 2 - 1
    mask = (torch.rand(1, 2, *shape, generator=generator) > 0.5).float() * 2 - 1
    while True:
        yield {"input": mask, "target": image}


def test_frontier_rung_trains_and_samples_the_whole_head_network():
    """The ladder's top rung on the faithful network (64^3 to keep it short): compiled bf16 training with fused
    Adam, foreach EMA, cuDNN autotuning, pinned non-blocking copies; then sampling with the compiled U-Net replayed
    from a CUDA graph, against the same compiled U-Net without the graph."""
    shape = (64, 64, 64)
    variant = Variant("frontier", True, True, False, cudnn_benchmark=True, autocast="bfloat16", compile="default",
                      checkpointing="none", fused_adam=True, foreach_ema=True, cuda_graphs=True)
    apply_backend(variant)
    torch.manual_seed(0)
    diffusion = prepare_model(GaussianDiffusion(UNet3D(paper_unet()), timesteps=250).to(CUDA), variant, CUDA)
    keys = list(diffusion.state_dict())
    settings = configured(TrainSettings, "train", ema_update_every=1, ema_start_step=1)
    trainer = Trainer(diffusion, _batches(shape), Placement(variant, CUDA), settings,
                      torch.Generator(CUDA).manual_seed(0), pin_memory=True)
    compile_seconds = trainer.warm_up_compiled()
    times = []
    for _ in range(3):
        trainer.prefetch()
        assert all(b["input"].is_pinned() for b in trainer._ready)
        torch.cuda.synchronize()
        started = time.perf_counter()
        losses = trainer.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
        assert all(0 < loss < 2 for loss in losses)
    condition, target = trainer.resident_batch()
    generator = torch.Generator(CUDA).manual_seed(1)
    trainer.bare_step(condition, target, generator)
    state = trainer.checkpoint()
    assert list(state["model"]) == keys and list(state["ema"]) == keys
    print(f"\nfrontier 64^3: compile {compile_seconds:.1f} s, steps {[round(t * 1e3, 1) for t in times]} ms")

    sampler = GaussianDiffusion(UNet3D(paper_unet()), timesteps=250)
    sampler.load_state_dict(state["ema"])
    sampler = prepare_model(sampler.to(CUDA), variant, CUDA).requires_grad_(False).eval()
    assert parameter_count(sampler.denoiser) == 40_226_433
    sampler.denoiser.compile(fullgraph=True, dynamic=False, mode=variant.compile)
    evaluate = UNetEvaluation(sampler, variant, CUDA)
    x = torch.randn(1, 1, *shape, device=CUDA)
    t = torch.tensor([125], device=CUDA)
    with torch.no_grad(), autocast(variant, CUDA):
        replayed = evaluate(x, condition, t).clone()
        direct = sampler.denoise(x, condition, t)
        chain = [v for _, v in sampler.sample_steps(condition, torch.Generator(CUDA).manual_seed(0), 3, evaluate)]
    assert evaluate.captures == 1 and len(chain) == 3 and all(torch.isfinite(v).all() for v in chain)
    torch.testing.assert_close(replayed, direct, rtol=1e-2, atol=1e-3)


def test_the_ndhwc_sampling_evaluation_runs_at_batch_8_of_128_cubed():
    """The whole-head U-Net under frontier_graphed's switches, compiled, one sampling evaluation of 8 volumes of 128^3
    (the throughput sweep's largest batch; 2.1e9 elements in the widest activation). With the small norm sites left to
    inductor, its fused upsampling-concatenation kernel faulted here (misaligned address, 2026-12-02); with the NDHWC
    kernels at every site it runs."""
    variant = Variant.from_config("frontier_graphed", config_section("variants")["frontier_graphed"])
    apply_backend(variant)
    diffusion = GaussianDiffusion(UNet3D(paper_unet()), timesteps=250).to(CUDA)
    diffusion = prepare_model(diffusion, variant, CUDA).requires_grad_(False).eval()
    diffusion.denoiser.compile(fullgraph=True, dynamic=False, mode=variant.compile)
    generator = torch.Generator(CUDA).manual_seed(0)
    x, condition = (prepare_input(torch.randn(8, channels, 128, 128, 128, device=CUDA, generator=generator), variant)
                    for channels in (1, 2))
    with torch.no_grad(), autocast(variant, CUDA):
        out = diffusion.denoise(x, condition, torch.full((8,), 125, device=CUDA))
    torch.cuda.synchronize()
    assert out.shape == x.shape and bool(torch.isfinite(out).all())


SWEEP_VARIANTS = {"graphs": {"cuda_graphs": True},
                  "compiled-graphs-cl3d": {"autocast": "bfloat16", "compile": "default", "cuda_graphs": True,
                                           "cudnn_benchmark": True, "fused_norm_act": True}}


def _sweep_settings(batch_sizes):
    from medddpm.settings import SampleSettings

    return SampleSettings(masks=1, max_steps=None, warmup_steps=1, seed=0, batch_sizes=tuple(batch_sizes),
                          throughput_warmup_steps=2, throughput_steps=5)


def _sampling(variant):
    from medddpm.engine import Sampling

    apply_backend(variant)
    return Sampling(GaussianDiffusion(tiny_unet(), timesteps=8), Placement(variant, CUDA))


@pytest.mark.parametrize("name", SWEEP_VARIANTS)
def test_throughput_sweep_captures_and_compiles_outside_its_timed_steps(name, tmp_path_factory):
    """Each batch size gets its CUDA graph (and its compiled graph) in its warm-up steps: the sweep fails if a graph
    is captured in a timed step, and a compile or capture in one would show as an outlier among the timed steps."""
    from conftest import random_prepared_dataset
    from medddpm.jobs import throughput_sweep

    dataset = random_prepared_dataset(tmp_path_factory, (16, 16, 16))
    variant = Variant(name, True, True, name.endswith("cl3d"), **SWEEP_VARIANTS[name])
    sweep = throughput_sweep(_sampling(variant), _sweep_settings((1, 2, 4)), dataset)
    assert [(b["batch"], b["fits"]) for b in sweep["batches"]] == [(1, True), (2, True), (4, True)]
    for record in sweep["batches"]:
        assert record["cuda_graph_captures"] >= 1 and record["peak_memory_kind"] == "cuda_max_allocated"
        time = record["step_time"]
        assert time["n"] == 5 and time["max_ms"] < 20 * time["median_ms"], record
        assert record["volumes_per_hour"] == pytest.approx(3600 * record["batch"] / (8 * time["median_ms"] / 1e3))
    print(f"\n{name}: " + ", ".join(f"batch {b['batch']} {b['step_time']['median_ms']:.2f} ms "
                                    f"({b['volumes_per_hour']:.0f}/h, warm-up {b['warmup_seconds']:.1f} s)"
                                    for b in sweep["batches"]))


def test_throughput_sweep_records_a_batch_that_runs_out_of_memory_and_frees_it(tmp_path_factory):
    """With the allocator capped at what batch 1 needs plus 512 MiB, batch 4096 (2 GiB in its first convolution)
    raises torch.cuda.OutOfMemoryError: recorded as not fitting, its memory released, batch 8192 skipped."""
    from conftest import random_prepared_dataset
    from medddpm.jobs import throughput_sweep

    dataset = random_prepared_dataset(tmp_path_factory, (16, 16, 16))
    sampling = _sampling(Variant("graphs", True, True, False, cuda_graphs=True))
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    total = torch.cuda.get_device_properties(CUDA).total_memory
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + 512 * 2**20) / total)
    try:
        sweep = throughput_sweep(sampling, _sweep_settings((1, 2, 4096, 8192)), dataset)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    assert [(b["batch"], b["fits"]) for b in sweep["batches"]] == [(1, True), (2, True), (4096, False), (8192, None)]
    assert "out of memory" in sweep["batches"][2]["error"].lower()
    assert sweep["best_batch"] in (1, 2)
    assert torch.cuda.memory_allocated() < before + 64 * 2**20  # the batch that did not fit holds nothing now


def test_device_rates_on_the_gpu():
    settings = configured(RateSettings, "bench", gpu_matmul_size=4096, gpu_copy_mib=256, warmup=2, repeats=5)
    rates = device_rates(CUDA, settings)
    assert rates["device_kind"] == "cuda" and rates["note"] is None and len(rates["matmul"]) == 1
    assert rates["bf16_matmul_tflops"] > 10 and rates["copy_gb_per_s"] > 100
    print(f"\nbf16 4096^3: {rates['bf16_matmul_tflops']:.0f} TFLOP/s, copy {rates['copy_gb_per_s']:.0f} GB/s")


def test_the_preflight_on_the_gpu_checks_every_precision_and_finds_the_fallback():
    """On a CUDA GPU every combination of precision, layout and autotuner is checked at a large volume (128^3, 64
    channels: the paper's widest convolution), each with a cuDNN kernel among those that ran; with cuDNN turned off,
    PyTorch's fallback runs and the preflight says so in its line."""
    from measurement.conv_checks import checks_for, problem_line
    from profiling import preflight

    checks = checks_for({"baseline": {}})
    records = [preflight.run_check(check, 64, (128, 128, 128), CUDA) for check in checks]
    for record in records:
        assert record["passed"] is True, record["state"]
        assert record["cudnn"] is True and record["max_error"] <= record["tolerance"], record
    contiguous = {record["precision"]: record for record in records
                  if not record["channels_last"] and not record["cudnn_benchmark"]}
    assert contiguous["fp32"]["max_error"] < contiguous["tf32"]["max_error"] < contiguous["bf16"]["max_error"]
    torch.backends.cudnn.enabled = False
    try:
        fallback = preflight.run_check(checks[0], 32, (64, 64, 64), CUDA)
    finally:
        torch.backends.cudnn.enabled = True
    assert fallback["cudnn"] is False and fallback["passed"] is False, fallback
    assert "ran no cuDNN convolution" in fallback["state"]
    line = problem_line({"stack": {"device_name": "NVIDIA H200", "torch": torch.__version__}, "checks": [fallback]})
    assert line.startswith("preflight on NVIDIA H200 (torch ") and "ran no cuDNN convolution" in line
