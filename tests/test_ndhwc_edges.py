"""The `ndhwc_edges` switch: the U-Net's first, stride-2 and output convolutions in NDHWC too, the same function.

On the GPU the compiled U-Net ran its output convolution (one filter) in NCDHW: inductor lays out a 3-D convolution's
input and weight in its output's stride order, and a one-channel channels-last output has strides that order W before
C. Padding the filters to 8 at each call is checked here in float64 on the CPU (the function and its gradients), and
on a GPU by its kernels (fewer layout conversions). The first and the stride-2 convolutions read NCDHW operands for
another reason (their inputs' layouts were not yet fixed when inductor lowered them): the pinning of their inputs is
checked by the layouts inductor's compiled code hands them, and in float64 as the identity."""

import pytest
import torch
from torch._inductor import ir

from config_settings import paper_unet
from medddpm.diffusion import GaussianDiffusion
from medddpm.unet import (OUTPUT_CHANNEL_MULTIPLE, Downsample, NdhwcInputConv3d, OutputConv3d, UNet3D,
                          parameter_count, set_ndhwc_edges)
from medddpm.variants import Variant, autocast, prepare_model
from unet_helpers import (compiled_denoise_kernels, forward_backward, inductor_convolutions, layout, tiny_inputs,
                          tiny_unet)

CL = torch.channels_last_3d
CPU = torch.device("cpu")


def channels_last_strides_order(channels: int) -> list[int]:
    """Inductor's stride order (the one its 3-D convolution lowering imposes on the input and weight) of a
    convolution output of `channels` channels laid out channels-last."""
    return list(ir.get_stride_order(torch.empty(1, channels, 4, 4, 4).contiguous(memory_format=CL).stride()))


def test_a_one_channel_output_orders_its_input_ncdhw_and_eight_channels_do_not():
    """Why the switch exists: one channel ties C with W (both stride 1) and inductor's order puts W innermost, which
    laid the last 64-channel activation out as NCDHW-like before the output convolution; 8 channels give NDHWC."""
    assert channels_last_strides_order(1) != ir.NHWDC_STRIDE_ORDER
    assert channels_last_strides_order(1)[4] < channels_last_strides_order(1)[1]  # W before C
    assert channels_last_strides_order(OUTPUT_CHANNEL_MULTIPLE) == ir.NHWDC_STRIDE_ORDER


def float64_pair():
    plain = tiny_unet().double()
    edged = tiny_unet().double()
    set_ndhwc_edges(edged, True)
    return plain, edged


@pytest.mark.parametrize("layout", [torch.contiguous_format, CL], ids=["contiguous input", "channels-last input"])
def test_the_padded_output_convolution_is_the_same_function(layout):
    """Float64, every parameter drawn at random (the output convolution is not zero): the same output and the same
    gradient of every parameter, the output convolution's included (the zero filters' gradients are dropped)."""
    plain, edged = float64_pair()
    x, t = tiny_inputs()
    x = x.double().contiguous(memory_format=layout)
    out, grads = forward_backward(plain, x, t)
    out_edged, grads_edged = forward_backward(edged, x, t)
    assert out_edged.shape == out.shape
    torch.testing.assert_close(out_edged, out, rtol=1e-12, atol=1e-12)
    assert grads_edged.keys() == grads.keys()
    for name, grad in grads.items():
        assert grads_edged[name].shape == grad.shape, name
        torch.testing.assert_close(grads_edged[name], grad, rtol=1e-10, atol=1e-12, msg=name)
    assert grads["out.2.weight"].abs().sum() > 0  # the output convolution's gradient is compared, not two zeros


def test_with_the_switch_the_output_convolution_gets_eight_filters(monkeypatch):
    """What the switch changes in the calls of a sampling step's evaluation: the output convolution computes 8
    filters, of which the caller gets the real one; every other convolution, and everything off the switch, is
    upstream's call."""
    seen = []
    convolve = torch.nn.Conv3d._conv_forward

    def recording(self, x, weight, bias):
        seen.append((type(self), tuple(weight.shape)))
        return convolve(self, x, weight, bias)

    monkeypatch.setattr(torch.nn.Conv3d, "_conv_forward", recording)
    inputs, t = tiny_inputs()
    calls = {}
    for enabled in (False, True):
        model = tiny_unet()
        set_ndhwc_edges(model, enabled)
        seen.clear()
        with torch.no_grad():
            out = GaussianDiffusion(model, timesteps=10).denoise(inputs[:, :1], inputs[:, 1:], t)
        assert out.shape[1] == 1
        calls[enabled] = list(seen)
    assert calls[True][-1] == (OutputConv3d, (OUTPUT_CHANNEL_MULTIPLE, *calls[False][-1][1][1:]))
    assert calls[False][-1][0] is OutputConv3d and calls[False][-1][1][0] == 1
    assert calls[True][:-1] == calls[False][:-1]


class EdgeProbe(torch.nn.Module):
    """The U-Net's two pinned edges in a network small enough to compile in seconds: the first convolution on the
    NCDHW input, and a stride-2 Downsample convolution reading a residual sum."""

    def __init__(self):
        super().__init__()
        self.first = NdhwcInputConv3d(3, 8, 3, padding=1)
        self.inner = torch.nn.Conv3d(8, 8, 3, padding=1)
        self.down = Downsample(8)

    def forward(self, x):
        h = self.first(x)
        return self.down(h + self.inner(h))


def test_compiled_the_switch_pins_the_first_and_the_stride_2_convolutions_to_ndhwc():
    """The pinning reaches the operands inductor's compiled code hands cuDNN (here the CPU's library, in the frontier's
    bfloat16 autocast): without the switch the first and the stride-2 convolutions receive NCDHW input and weight, with
    it NDHWC, and the compiled output is eager's. Why they were NCDHW on a GPU, where the other convolutions read
    NDHWC (the CPU's inductor lays most 3-D convolutions out NCDHW): data/measurements/2026-12-05-conv-layouts/."""
    torch.manual_seed(0)
    probe = EdgeProbe()
    x = torch.randn(1, 3, 8, 8, 8)
    variant = Variant("v", True, True, True, autocast="bfloat16", compile="default", ndhwc=True, ndhwc_edges=True)
    with torch.no_grad(), autocast(variant, CPU):
        eager = probe(x).float()
    edges = {}
    for enabled in (False, True):
        torch._dynamo.reset()
        set_ndhwc_edges(probe, enabled)
        compiled = torch.compile(probe, fullgraph=True, dynamic=False)
        with torch.no_grad(), autocast(variant, CPU):
            compiled(x)  # compiles
            with inductor_convolutions() as calls:
                out = compiled(x).float()
        assert (out - eager).norm() / eager.norm() < 2e-2, enabled  # bfloat16 rounding, in another order
        assert len(calls) == 3
        edges[enabled] = [(layout(c["input"]), layout(c["weight"])) for c in (calls[0], calls[2])]
    assert edges[False] == [("NCDHW", "NCDHW")] * 2
    assert edges[True] == [("NDHWC", "NDHWC")] * 2


def test_the_input_pinning_is_the_identity_in_float64_eager_and_under_compile():
    """The pinned convolution's function and gradients, eager (a channels-last copy where the strides differ) and
    compiled (inductor's prim and the identity's backward), against nn.Conv3d's in float64."""
    torch.manual_seed(0)
    plain = torch.nn.Conv3d(3, 8, 3, stride=2, padding=1).double()
    pinned = NdhwcInputConv3d(3, 8, 3, stride=2, padding=1).double()
    pinned.load_state_dict(plain.state_dict())
    set_ndhwc_edges(pinned, True)
    assert pinned.ndhwc_input
    x = torch.randn(1, 3, 6, 6, 6, dtype=torch.float64)
    expected_grad = torch.autograd.grad(plain(x.requires_grad_()).square().sum(), x)[0]
    for run in (pinned, torch.compile(pinned, fullgraph=True, dynamic=False)):
        torch._dynamo.reset()
        out = run(x)
        torch.testing.assert_close(out, plain(x), rtol=1e-12, atol=1e-12)
        grad = torch.autograd.grad(out.square().sum(), x)[0]
        torch.testing.assert_close(grad, expected_grad, rtol=1e-12, atol=1e-12)


def test_the_switch_keeps_the_parameters_and_their_names():
    """The whole-head network: the same 40,226,433 parameters under the same names (a checkpoint of any variant loads
    into this one), and switching off restores upstream's calls."""
    with torch.device("meta"):
        model = UNet3D(paper_unet())
    names = list(model.state_dict())
    variant = Variant("edges", True, True, True, ndhwc=True, ndhwc_edges=True)
    prepare_model(model, variant, CPU)
    assert parameter_count(model) == 40_226_433
    assert list(model.state_dict()) == names
    out_conv = model.out[-1]
    assert isinstance(out_conv, OutputConv3d) and out_conv.padded_to == OUTPUT_CHANNEL_MULTIPLE
    pinned = [m for m in model.modules() if isinstance(m, NdhwcInputConv3d)]
    downsamples = [m.op for m in model.modules() if isinstance(m, Downsample)]
    assert pinned == [model.input_blocks[0][0], *downsamples] and len(downsamples) == 4
    assert all(m.ndhwc_input for m in pinned)
    set_ndhwc_edges(model, False)
    assert out_conv.padded_to == 0
    assert not any(m.ndhwc_input for m in pinned)


def test_the_switch_needs_ndhwc_and_means_nothing_on_a_cpu():
    with pytest.raises(ValueError, match="ndhwc_edges needs ndhwc: true"):
        Variant("v", True, True, True, ndhwc_edges=True)
    variant = Variant("v", True, True, True, ndhwc=True, ndhwc_edges=True)
    assert variant.effective_on("cpu")["ndhwc_edges"] is False
    assert variant.effective_on("cuda")["ndhwc_edges"] is True


@pytest.mark.cuda
def test_on_the_gpu_the_compiled_unet_with_the_switch_converts_fewer_layouts():
    """The tiny U-Net compiled in bfloat16 channels-last (the frontier's switches) at 16^3, evaluated forward and
    backward through GaussianDiffusion.denoise: with the switch, fewer copy and transpose kernels (those around the
    output convolution), and the same output to bfloat16 rounding."""
    results = {}
    for enabled in (False, True):
        out, names = compiled_denoise_kernels(ndhwc_edges=enabled)
        conversions = sum("copy" in k or "nchwToNhwc" in k or "nhwcToNchw" in k for k in names)
        results[enabled] = (out, conversions)
    assert results[True][1] < results[False][1], {k: v[1] for k, v in results.items()}
    difference = (results[True][0] - results[False][0]).norm() / results[False][0].norm()
    assert difference < 2e-2
