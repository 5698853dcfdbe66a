"""The `time_embedding_in_norm` switch: each ResBlock's time embedding and its first convolution's bias added inside
its second norm, as an (N, C) offset of the NDHWC kernels' input (medddpm.ndhwc_norm), instead of to the convolution's
output. The same function: the kernels' values and gradients (the offset's among them) equal the plain function of
x + offset, and the U-Net with the switch equals upstream's in float64.

Without a GPU the kernels run in Triton's interpreter (conftest sets TRITON_INTERPRET=1), as in test_ndhwc_norm.py."""

import copy
import functools

import pytest
import torch
from torch import nn

from medddpm.ndhwc_norm import group_norm_silu_ndhwc, runs_kernels
from medddpm.unet import (GroupNorm32, GroupNormSiLU, ResBlock, fuse_norm_act, group_norm_silu, parameter_count,
                          set_dense_skip_gradients, set_edge_gemms, set_ndhwc_edges, set_time_embedding_in_norm)
from medddpm.variants import Variant, prepare_model
from unet_helpers import compiled_denoise_kernels, same_function_in_float64, tiny_unet

CL = torch.channels_last_3d
pytestmark = pytest.mark.on_gpu_when_present
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


def norm_inputs(channels: int, spatial, dtype: torch.dtype, seed: int = 0):
    """A channels-last activation of two samples far from zero, the norm's parameters, an offset of another scale for
    each sample and channel, and a gradient for the output: all needing gradients where they have one."""
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape, scale=1.0, shift=0.0):
        return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale + shift).to(dtype).to(DEVICE)

    x = draw(2, channels, *spatial, scale=2.0, shift=30.0).contiguous(memory_format=CL)
    weight, bias = draw(channels, scale=0.5, shift=1.0), draw(channels, scale=0.5)
    offset = draw(2, channels, scale=3.0)
    grad_out = draw(2, channels, *spatial).contiguous(memory_format=CL)
    return [t.requires_grad_(True) for t in (x, weight, bias, offset)], grad_out


def values_and_gradients(function, inputs, grad_out):
    out = function(*inputs[:3], 32, 1e-5, inputs[3])
    return [out.detach()] + list(torch.autograd.grad(out, inputs, grad_out))


@pytest.mark.parametrize("channels, spatial, dtype, bound", [
    (64, (5, 6, 7), torch.float64, 1e-12), (96, (4, 3, 5), torch.float64, 1e-12), (96, (4, 3, 5), torch.float32, 1e-4)],
    ids=["fp64-64", "fp64-96", "fp32-96"])
def test_the_kernels_with_an_offset_give_the_norm_of_the_sum_and_every_gradient(channels, spatial, dtype, bound):
    """Channels per group 2 and 3 (padded in the tile), several tiles with a partial last one; the two samples'
    offsets differ, so the offset's gradient is per sample and channel. Float32: the offset converted to the compute
    dtype, the sums in it."""
    inputs, grad_out = norm_inputs(channels, spatial, dtype)
    expected = values_and_gradients(group_norm_silu, inputs, grad_out)
    got = values_and_gradients(group_norm_silu_ndhwc, inputs, grad_out)
    assert got[0].is_contiguous(memory_format=CL) and got[1].is_contiguous(memory_format=CL)
    for name, value, reference in zip(("output", "input", "weight", "bias", "offset"), got, expected):
        assert value.dtype == reference.dtype and value.shape == reference.shape, name
        assert relative(value, reference) < bound, name


def test_the_plain_function_with_an_offset_is_upstreams_norm_of_the_sum():
    """The reference the kernels are held to: GroupNorm32 and SiLU, upstream's modules, of x + offset."""
    (x, weight, bias, offset), _ = norm_inputs(64, (3, 4, 5), torch.float64)
    norm = GroupNorm32(32, 64).double().to(DEVICE)
    with torch.no_grad():
        norm.weight.copy_(weight)
        norm.bias.copy_(bias)
    expected = nn.SiLU()(norm(x + offset[:, :, None, None, None]))
    assert relative(group_norm_silu(x, weight, bias, 32, norm.eps, offset), expected) < 1e-12


def test_the_kernels_without_an_offset_give_an_empty_offset_gradient_and_the_same_values():
    """Without an offset the op is the one the other rungs run: no third sums plane, nothing for the offset."""
    (x, weight, bias, offset), grad_out = norm_inputs(64, (3, 4, 5), torch.float64)
    out, mean, rstd = torch.ops.medddpm.group_norm_silu_ndhwc_forward(x, weight, bias, 32, 1e-5)
    assert relative(out, group_norm_silu(x, weight, bias, 32, 1e-5)) < 1e-12
    *_, doffset = torch.ops.medddpm.group_norm_silu_ndhwc_backward(grad_out, x, weight, bias, mean, rstd)
    assert doffset.numel() == 0


class KernelsWhereOffset:
    """The NDHWC kernels for every norm given an offset (each ResBlock's second), counting them; the other sites by
    the plain function, to spare the interpreter. A CPU's float64 convolutions return NCDHW activations, which
    `group_norm_silu_ndhwc` would hand to the plain function: here they go to the kernels channels-last."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x, weight, bias, groups, eps, offset=None):
        if offset is None:
            return group_norm_silu(x, weight, bias, groups, eps)
        x = x.contiguous(memory_format=CL)
        assert runs_kernels(x)
        self.calls += 1
        return group_norm_silu_ndhwc(x, weight, bias, groups, eps, offset)


def float64_unets(kernels=None):
    """Upstream's tiny U-Net, and the same parameters with `kernels` (the plain function where None) fused in and the
    switch on."""
    plain = tiny_unet().double().to(DEVICE, memory_format=CL)
    switched = copy.deepcopy(plain)
    fuse_norm_act(switched, kernels or group_norm_silu)
    set_time_embedding_in_norm(switched, True)
    return plain, switched


def test_the_unet_with_the_switch_is_upstreams_function_in_float64():
    """Every ResBlock (with and without a skip convolution, 64 and 128 channels): the same output and gradients,
    the embedding's layers and each first convolution's bias among them; the same parameters and state_dict keys."""
    kernels = KernelsWhereOffset()
    plain, switched = float64_unets(kernels)
    blocks = [m for m in switched.modules() if isinstance(m, ResBlock)]
    assert blocks and all(m.time_embedding_in_norm for m in blocks)
    assert list(switched.state_dict()) == list(plain.state_dict())
    assert parameter_count(switched) == parameter_count(plain)
    grads = same_function_in_float64(plain, switched, DEVICE)
    assert kernels.calls == len(blocks)  # each ResBlock's second norm, through the kernels
    # The gradients the switch reroutes through the offset are not all zero (a test of nothing otherwise).
    embedding = [name for name in grads if "emb_layers" in name or name.endswith("in_layers.2.bias")]
    assert embedding and all(float(grads[name].abs().max()) > 0 for name in embedding)


def test_with_the_edges_as_products_and_dense_skip_gradients_too_the_unet_is_upstreams_function_in_float64():
    """The rung frontier_gemm_dense_embedding's model switches together, eager: the same output and gradients as
    upstream's tiny U-Net (the norms by the plain function with its offset; the kernels' offset is the test above's)."""
    plain, switched = float64_unets()
    set_ndhwc_edges(switched, True)
    set_edge_gemms(switched, True)
    set_dense_skip_gradients(switched, True)
    same_function_in_float64(plain, switched, DEVICE)


def test_the_switch_needs_the_fused_norms_and_the_ndhwc_path():
    with pytest.raises(ValueError, match="time_embedding_in_norm needs the norms fused with their SiLU"):
        set_time_embedding_in_norm(tiny_unet(), True)
    with pytest.raises(ValueError, match="time_embedding_in_norm needs ndhwc: true"):
        Variant("v", True, True, True, time_embedding_in_norm=True)
    variant = Variant("v", True, True, True, ndhwc=True, time_embedding_in_norm=True)
    assert variant.effective_on("cpu")["time_embedding_in_norm"] is False
    assert variant.effective_on("cuda")["time_embedding_in_norm"] is True
    # prepare_model fuses the norms first, then sets the switch (on a CPU with the plain function).
    model = prepare_model(tiny_unet(), variant, torch.device("cpu"))
    assert all(m.time_embedding_in_norm and isinstance(m.out_layers[0], GroupNormSiLU)
               for m in model.modules() if isinstance(m, ResBlock))


@functools.cache
def compiled_steps() -> dict:
    """The compiled bfloat16 step of the tiny U-Net (frontier_edges's switches) without and with the switch: the
    output and the names of the CUDA kernels that ran, once for the tests below."""
    return {enabled: compiled_denoise_kernels(ndhwc_edges=True, time_embedding_in_norm=enabled)
            for enabled in (False, True)}


def embedding_adds(names: list[str]) -> int:
    """Inductor's kernels that add a convolution's peeled-off bias and the time embedding (unsqueezed to 5-D): a pass
    over the convolution's output, named after those ops."""
    return sum(name.startswith("triton_poi") and all(op in name for op in ("add", "convolution", "unsqueeze"))
               for name in names)


@pytest.mark.cuda
def test_on_the_gpu_compiled_the_switch_computes_the_same_step():
    """The rung's own path, compiled by inductor around the kernels with their offset: the output of upstream's
    order of operations to bfloat16 rounding."""
    steps = compiled_steps()
    assert relative(steps[True][0], steps[False][0]) < 2e-2


@pytest.mark.cuda
def test_on_the_gpu_compiled_the_embeddings_add_is_no_pass_of_its_own():
    """Without the switch each ResBlock's forward has its pass that adds the bias and the embedding; with it none."""
    steps = compiled_steps()
    blocks = sum(isinstance(m, ResBlock) for m in tiny_unet().modules())
    assert embedding_adds(steps[False][1]) >= blocks, sorted(set(steps[False][1]))
    assert embedding_adds(steps[True][1]) == 0, sorted(set(steps[True][1]))
