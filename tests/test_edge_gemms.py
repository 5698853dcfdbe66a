"""The `edge_gemms` switch: the U-Net's first and output convolutions as matrix products (medddpm.conv_gemm), the same
function as F.conv3d.

Checked in float64 (forward and every gradient, eager and compiled by the CPU's inductor), in bfloat16 against
float64 beside F.conv3d's own rounding, and by what inductor's compiled code runs: with the switch, no library
convolution for the two edges. Whether it is faster is a GPU's question
(data/measurements/2026-12-05-edge-conv-forms/)."""

import pytest
import torch
import torch.nn.functional as F

from config_settings import paper_unet
from medddpm.conv_gemm import conv3x3_im2col, conv3x3_shifted_sum
from medddpm.unet import NdhwcInputConv3d, OutputConv3d, UNet3D, parameter_count, set_edge_gemms, set_ndhwc_edges
from medddpm.variants import Variant, autocast, prepare_model
from unet_helpers import forward_backward, inductor_convolutions, tiny_inputs, tiny_unet

CL = torch.channels_last_3d
CPU = torch.device("cpu")
FORMS = {"im2col": conv3x3_im2col, "shifted sum": conv3x3_shifted_sum}


def conv_and_gradients(form, x, weight, bias):
    """The output of `form` and the gradients of a fixed random projection of it by input, weight and bias."""
    out = form(x, weight, bias)
    projection = torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype)
    wrt = [t for t in (x, weight, bias) if t is not None]
    return out, torch.autograd.grad((out * projection).sum(), wrt)


@pytest.mark.parametrize("name", list(FORMS))
@pytest.mark.parametrize(
    "in_channels, out_channels, bias, layout",
    [(3, 64, True, CL), (3, 8, False, torch.contiguous_format), (8, 1, True, CL),
     (64, 1, True, torch.contiguous_format), (5, 3, True, CL)],
    ids=["first conv", "3 channels no bias", "8 channels one filter", "output conv NCDHW", "no multiple of 8"],
)
def test_the_forms_are_the_convolution_in_float64(name, in_channels, out_channels, bias, layout):
    """Forward and the gradients of input, weight and bias against F.conv3d(padding=1), on an uneven volume of two
    samples: every tap's border (the zero padding) and every column's order is exercised."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, in_channels, 5, 6, 7, generator=generator, dtype=torch.float64).contiguous(memory_format=layout)
    weight = torch.randn(out_channels, in_channels, 3, 3, 3, generator=generator, dtype=torch.float64)
    b = torch.randn(out_channels, generator=generator, dtype=torch.float64) if bias else None
    tensors = [t.requires_grad_() for t in (x, weight, b) if t is not None]
    expected, expected_grads = conv_and_gradients(lambda *a: F.conv3d(*a, padding=1), x, weight, b)
    out, grads = conv_and_gradients(FORMS[name], x, weight, b)
    assert out.shape == expected.shape and out.is_contiguous(memory_format=CL)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    assert len(grads) == len(tensors)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, in_channels, out_channels", [("im2col", 3, 64), ("shifted sum", 64, 1)])
def test_in_bfloat16_the_forms_round_about_as_the_library_convolution(name, in_channels, out_channels):
    """Under bfloat16 autocast, against float64, at 16^3 with the U-Net's channel counts: the forms' relative error is
    within 1.5x F.conv3d's (which accumulates in float32 and rounds once). The shifted sum rounds each tap's partial
    sum to bfloat16 first; on this data its error is 1.15x the library's (0.0034 against 0.0029 at 32^3)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, in_channels, 16, 16, 16, generator=generator, dtype=torch.float64)
    if in_channels > 8:
        x = F.silu(x)  # the output convolution reads GroupNorm + SiLU
    weight = torch.randn(out_channels, in_channels, 3, 3, 3, generator=generator, dtype=torch.float64)
    weight /= (27 * in_channels) ** 0.5
    bias = 0.1 * torch.randn(out_channels, generator=generator, dtype=torch.float64)
    exact = F.conv3d(x, weight, bias, padding=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        library = F.conv3d(x.float(), weight.float(), bias.float(), padding=1)
        form = FORMS[name](x.float().bfloat16(), weight.float(), bias.float())
    assert form.dtype == library.dtype == torch.bfloat16

    def error(out):
        return ((out.double() - exact).norm() / exact.norm()).item()

    assert 1e-3 < error(library)  # bfloat16's rounding is there to compare with
    assert error(form) < 1.5 * error(library), (error(form), error(library))


class EdgesProbe(torch.nn.Module):
    """The U-Net's two edges around one inner convolution: small enough to compile in seconds."""

    def __init__(self):
        super().__init__()
        self.first = NdhwcInputConv3d(3, 8, 3, padding=1)
        self.inner = torch.nn.Conv3d(8, 8, 3, padding=1)
        self.out = OutputConv3d(8, 1, 3, padding=1)

    def forward(self, x):
        return self.out(F.silu(self.inner(self.first(x))))


def test_compiled_the_edges_run_as_matrix_products_and_compute_the_same():
    """Inductor's compiled code (the CPU's, float64) with the switch: of the three convolutions only the inner one is
    a library convolution (the recorder sees it, and not the edges), and the forward and the parameters' gradients
    are eager's without the switch."""
    torch.manual_seed(0)
    probe = EdgesProbe().double()
    x = torch.randn(1, 3, 6, 7, 8, dtype=torch.float64)
    expected = probe(x)
    expected_grads = torch.autograd.grad(expected.square().sum(), list(probe.parameters()))
    torch._dynamo.reset()
    set_edge_gemms(probe, True)
    compiled = torch.compile(probe, fullgraph=True, dynamic=False)
    compiled(x)  # compiles
    with inductor_convolutions() as calls:
        out = compiled(x)
    assert [tuple(c["weight"].shape) for c in calls] == [(8, 8, 3, 3, 3)]
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad(out.square().sum(), list(probe.parameters()))
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_the_unet_with_the_switch_is_the_same_function_in_float64():
    """The tiny U-Net (every parameter random, the output convolution's too), eager: the same output and the same
    gradient of every parameter with the switch as without, on top of the NDHWC edges."""
    plain, gemm = tiny_unet().double(), tiny_unet().double()
    for model in (plain, gemm):
        set_ndhwc_edges(model, True)
    set_edge_gemms(gemm, True)
    x, t = tiny_inputs()
    out, grads = forward_backward(plain, x.double(), t)
    out_gemm, grads_gemm = forward_backward(gemm, x.double(), t)
    torch.testing.assert_close(out_gemm, out, rtol=1e-12, atol=1e-12)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_gemm[name], grad, rtol=1e-10, atol=1e-12, msg=name)
    assert grads["out.2.weight"].abs().sum() > 0 and grads["input_blocks.0.0.weight"].abs().sum() > 0


def test_the_switch_turns_exactly_the_two_edges_and_keeps_the_parameters():
    """The whole-head network: the first and the output convolution switch (not the stride-2 ones, which have 64+
    channels for cuDNN), the same 40,226,433 parameters under the same names; off restores upstream's calls."""
    with torch.device("meta"):
        model = UNet3D(paper_unet())
    names = list(model.state_dict())
    variant = Variant("gemm", True, True, True, compile="default", ndhwc=True, ndhwc_edges=True, edge_gemms=True)
    prepare_model(model, variant, CPU)
    assert parameter_count(model) == 40_226_433
    assert list(model.state_dict()) == names
    switched = [m for m in model.modules() if getattr(m, "as_gemm", False)]
    assert switched == [model.input_blocks[0][0], model.out[-1]]
    set_edge_gemms(model, False)
    assert not any(getattr(m, "as_gemm", False) for m in model.modules())


def test_a_convolution_of_another_geometry_is_refused_in_one_line():
    probe = torch.nn.Sequential(OutputConv3d(8, 1, 3, padding=2, dilation=2))
    with pytest.raises(ValueError, match=r"edge_gemms: .* is not a 3x3x3 convolution of stride 1 and zero padding 1"):
        set_edge_gemms(probe, True)
    assert not probe[0].as_gemm


def test_the_switch_needs_the_edges_and_compile_and_means_nothing_on_a_cpu():
    with pytest.raises(ValueError, match="edge_gemms needs ndhwc_edges: true and compile"):
        Variant("v", True, True, True, ndhwc=True, ndhwc_edges=True, edge_gemms=True)
    variant = Variant("v", True, True, True, compile="default", ndhwc=True, ndhwc_edges=True, edge_gemms=True)
    assert variant.effective_on("cpu")["edge_gemms"] is False
    assert variant.effective_on("cuda")["edge_gemms"] is True


@pytest.mark.cuda
def test_on_the_gpu_the_compiled_unet_with_the_switch_runs_fewer_library_convolutions():
    """The tiny U-Net compiled in bfloat16 channels-last with the NDHWC edges (the frontier's switches), forward and
    backward through GaussianDiffusion.denoise at 16^3: with the switch, fewer cuDNN convolution kernels (the two
    edges' forward and gradient kernels), and the same output to bfloat16 rounding."""
    from unet_helpers import compiled_denoise_kernels

    results = {}
    for enabled in (False, True):
        out, names = compiled_denoise_kernels(ndhwc_edges=True, edge_gemms=enabled)
        cudnn = sum(any(k in name for k in ("fprop", "dgrad", "wgrad", "convolve")) for name in names)
        results[enabled] = (out, cudnn)
    assert results[True][1] < results[False][1], {k: v[1] for k, v in results.items()}
    difference = (results[True][0] - results[False][0]).norm() / results[False][0].norm()
    assert difference < 2e-2
