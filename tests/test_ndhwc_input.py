"""The `ndhwc_input` switch: the U-Net's first convolution in NDHWC too, the same function.

The whole-head input has 3 channels (the noisy image and the two-channel mask). cuDNN's NHWC tensor-core kernels take
16-bit channels in multiples of 8, so it ran that convolution on pre-Hopper kernels, with padding and transposes
around them. Padding the input channels (input and weight) with zeros to 8 at each call is checked here in float64 on
the CPU (the function and its gradients), and on a GPU by its kernels (none of cuDNN's layout conversions left)."""

import pytest
import torch

from config_settings import paper_unet
from medddpm.diffusion import GaussianDiffusion
from medddpm.unet import NDHWC_CHANNEL_MULTIPLE, InputConv3d, UNet3D, parameter_count, set_ndhwc_input
from medddpm.variants import Variant, prepare_model
from unet_helpers import TINY, compiled_denoise_kernels, forward_backward, tiny_inputs, tiny_unet

CL = torch.channels_last_3d
CPU = torch.device("cpu")


def test_the_input_has_channels_the_padding_changes():
    """The switch matters only where the input channels are no multiple of 8: the whole-head network's and the tiny
    one's 3 (a network of 8 input channels would run as upstream's)."""
    assert paper_unet().in_channels % NDHWC_CHANNEL_MULTIPLE != 0
    assert TINY.in_channels == paper_unet().in_channels


@pytest.mark.parametrize("layout", [torch.contiguous_format, CL], ids=["contiguous input", "channels-last input"])
def test_the_padded_first_convolution_is_the_same_function(layout):
    """Float64, every parameter drawn at random: the same output and the same gradient of every parameter, the first
    convolution's included (the zero channels' weight gradients are dropped)."""
    plain = tiny_unet().double()
    padded = tiny_unet().double()
    set_ndhwc_input(padded, True)
    x, t = tiny_inputs()
    x = x.double().contiguous(memory_format=layout)
    out, grads = forward_backward(plain, x, t)
    out_padded, grads_padded = forward_backward(padded, x, t)
    assert out_padded.shape == out.shape
    torch.testing.assert_close(out_padded, out, rtol=1e-12, atol=1e-12)
    assert grads_padded.keys() == grads.keys()
    for name, grad in grads.items():
        assert grads_padded[name].shape == grad.shape, name
        torch.testing.assert_close(grads_padded[name], grad, rtol=1e-10, atol=1e-12, msg=name)
    assert grads["input_blocks.0.0.weight"].abs().sum() > 0  # the first convolution's gradient is compared


def test_with_the_switch_the_first_convolution_reads_eight_channels_last(monkeypatch):
    """What the switch changes in the calls of a sampling step's evaluation: the first convolution reads 8 channels,
    laid out channels-last, of which the last 5 are zeros in the input and in the weight; every other convolution,
    and everything off the switch, is upstream's call."""
    seen = []
    convolve = torch.nn.Conv3d._conv_forward

    def recording(self, x, weight, bias):
        seen.append((type(self), tuple(x.shape), tuple(weight.shape), x.is_contiguous(memory_format=CL),
                     float(x[:, 3:].abs().sum()), float(weight[:, 3:].abs().sum())))
        return convolve(self, x, weight, bias)

    monkeypatch.setattr(torch.nn.Conv3d, "_conv_forward", recording)
    inputs, t = tiny_inputs()
    calls = {}
    for enabled in (False, True):
        model = tiny_unet()
        set_ndhwc_input(model, enabled)
        seen.clear()
        with torch.no_grad():
            out = GaussianDiffusion(model, timesteps=10).denoise(inputs[:, :1], inputs[:, 1:], t)
        assert out.shape[1] == 1
        calls[enabled] = list(seen)
    kind, x_shape, w_shape, channels_last, x_pad, w_pad = calls[True][0]
    assert kind is InputConv3d and channels_last
    assert x_shape[1] == w_shape[1] == NDHWC_CHANNEL_MULTIPLE
    assert (x_pad, w_pad) == (0.0, 0.0)
    assert calls[False][0][0] is InputConv3d and calls[False][0][2][1] == TINY.in_channels
    assert calls[True][1:] == calls[False][1:]


def test_the_switch_keeps_the_parameters_and_their_names():
    """The whole-head network: the same 40,226,433 parameters under the same names (a checkpoint of any variant loads
    into this one), and switching off restores upstream's calls."""
    with torch.device("meta"):
        model = UNet3D(paper_unet())
    names = list(model.state_dict())
    variant = Variant("input", True, True, True, ndhwc=True, ndhwc_edges=True, ndhwc_input=True)
    prepare_model(model, variant, CPU)
    assert parameter_count(model) == 40_226_433
    assert list(model.state_dict()) == names
    first = model.input_blocks[0][0]
    assert isinstance(first, InputConv3d) and first.padded_to == NDHWC_CHANNEL_MULTIPLE
    set_ndhwc_input(model, False)
    assert first.padded_to == 0


def test_the_switch_needs_ndhwc_and_means_nothing_on_a_cpu():
    with pytest.raises(ValueError, match="ndhwc_input needs ndhwc: true"):
        Variant("v", True, True, True, ndhwc_input=True)
    variant = Variant("v", True, True, True, ndhwc=True, ndhwc_input=True)
    assert variant.effective_on("cpu")["ndhwc_input"] is False
    assert variant.effective_on("cuda")["ndhwc_input"] is True


@pytest.mark.cuda
def test_on_the_gpu_the_first_convolution_runs_without_cudnns_layout_conversions():
    """The tiny U-Net compiled as the frontier_edges rung at 16^3, forward and backward: with the switch, fewer of
    cuDNN's padding and transpose kernels (those of the 3-channel first convolution), and the same output to
    bfloat16 rounding."""
    results = {}
    for enabled in (False, True):
        out, names = compiled_denoise_kernels(ndhwc_edges=True, ndhwc_input=enabled)
        conversions = [k for k in names if any(s in k for s in ("nchwToNhwc", "nhwcToNchw", "nhwcAddPadding"))]
        results[enabled] = (out, conversions)
    assert len(results[True][1]) < len(results[False][1]), {k: v[1] for k, v in results.items()}
    difference = (results[True][0] - results[False][0]).norm() / results[False][0].norm()
    assert difference < 2e-2
