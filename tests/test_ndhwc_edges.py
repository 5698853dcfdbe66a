"""The `ndhwc_edges` switch: the U-Net's output convolution in NDHWC too, the same function.

On the GPU the compiled U-Net ran its output convolution (one filter) in NCDHW: inductor lays out a 3-D convolution's
input and weight in its output's stride order, and a one-channel channels-last output has strides that order W before
C. Padding the filters to 8 at each call is checked here in float64 on the CPU (the function and its gradients), and
on a GPU by its kernels (fewer layout conversions)."""

import pytest
import torch
from torch._inductor import ir

from config_settings import paper_unet
from medddpm.diffusion import GaussianDiffusion
from medddpm.unet import OUTPUT_CHANNEL_MULTIPLE, OutputConv3d, UNet3D, parameter_count, set_ndhwc_edges
from medddpm.variants import Variant, prepare_model
from unet_helpers import compiled_denoise_kernels, forward_backward, tiny_inputs, tiny_unet

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
    set_ndhwc_edges(model, False)
    assert out_conv.padded_to == 0


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
