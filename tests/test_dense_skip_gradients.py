"""The `dense_skip_gradients` switch: the gradients of the U-Net decoder's concatenations reach the activation and
the skip as dense NDHWC tensors, not as channel slices of the concatenation's gradient, the same function.

A channel slice of an NDHWC tensor is not dense, and the library copies such a gradient before the gradient
convolution that takes it. Checked by what the gradient convolutions receive (eager, and from inductor's compiled
code on the CPU) and in float64 as the identity. Whether the copies it saves show on a GPU is the paired timing's
question (data/measurements/2026-12-05-next-rungs/)."""

import pytest
import torch
import torch.nn.functional as F

from config_settings import paper_unet
from medddpm.unet import DenseNdhwcGradient, UNet3D, parameter_count, set_dense_skip_gradients
from medddpm.variants import Variant, prepare_model
from unet_helpers import forward_backward, gradient_convolutions, layout, tiny_inputs, tiny_unet

CL = torch.channels_last_3d
CPU = torch.device("cpu")


class SkipProbe(torch.nn.Module):
    """A decoder step small enough to compile in seconds: two convolutions' outputs concatenated along channels and
    read, as a decoder ResBlock reads its input, by GroupNorm + SiLU + a convolution and by a 1x1 skip convolution.
    Each of the two parts receives its gradient as a slice of the concatenation's (with `dense`, as a dense tensor)."""

    def __init__(self, dense: bool):
        super().__init__()
        self.dense = dense
        self.h = torch.nn.Conv3d(8, 8, 3, padding=1)
        self.skip = torch.nn.Conv3d(8, 8, 3, padding=1)
        self.norm = torch.nn.GroupNorm(4, 16)
        self.after = torch.nn.Conv3d(16, 8, 3, padding=1)
        self.projection = torch.nn.Conv3d(16, 8, 1)

    def forward(self, x):
        h, skip = self.h(x), self.skip(x)
        if self.dense:
            h, skip = DenseNdhwcGradient.apply(h), DenseNdhwcGradient.apply(skip)
        joined = torch.cat([h, skip], dim=1)
        return self.after(F.silu(self.norm(joined))) + self.projection(joined)


def probes():
    torch.manual_seed(0)
    plain = SkipProbe(dense=False).to(memory_format=CL)
    dense = SkipProbe(dense=True).to(memory_format=CL)
    dense.load_state_dict(plain.state_dict())
    return plain, dense


def backward_gradient_layouts(run, x) -> tuple[list[str], list[torch.Tensor]]:
    """In the frontier's bfloat16 autocast, channels-last: the layout of each gradient the gradient convolutions
    receive in one backward, and the parameters' gradients (float32)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = run(x).float().square().mean()
    with gradient_convolutions() as calls:
        loss.backward()
    return [layout(c["gradient"]) for c in calls], [p.grad for p in run.parameters()]


X = torch.randn(1, 8, 6, 6, 6, generator=torch.Generator().manual_seed(1)).contiguous(memory_format=CL)


def test_eager_the_concatenated_parts_receive_slices_and_with_the_switch_dense_gradients():
    plain, dense = probes()
    slices, expected = backward_gradient_layouts(plain, X)
    layouts, grads = backward_gradient_layouts(dense, X)
    # The last two gradient convolutions are the two parts': slices of the concatenation's gradient, or dense.
    assert slices[2:] == ["other", "other"] and layouts[2:] == ["NDHWC", "NDHWC"]
    assert layouts[:2] == slices[:2]
    for got, want in zip(grads, expected):  # the same sums, in another order where the layouts differ
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_compiled_too_the_switch_hands_the_gradient_convolutions_dense_ndhwc_gradients():
    """Inductor's compiled backward (the CPU's) hands the two parts' gradient convolutions channel slices as eager
    does; with the switch's function dense NDHWC gradients, the copy fused into the kernels that compute them. The
    parameters' gradients are eager's to bfloat16 rounding."""
    plain, dense = probes()
    _, expected = backward_gradient_layouts(plain, X)
    expected = [g.clone() for g in expected]
    layouts = {}
    for probe in (plain, dense):
        torch._dynamo.reset()
        compiled = torch.compile(probe, fullgraph=True, dynamic=False)
        backward_gradient_layouts(compiled, X)  # compiles
        probe.zero_grad(set_to_none=True)
        layouts[probe.dense], grads = backward_gradient_layouts(compiled, X)
    assert layouts[False][2:] == ["other", "other"]
    assert layouts[True] == ["NDHWC"] * 4
    for got, want in zip(grads, expected):
        assert (got - want).norm() <= 2e-2 * want.norm()


def test_the_unet_with_the_switch_is_the_same_function_in_float64():
    plain, dense = tiny_unet().double(), tiny_unet().double()
    set_dense_skip_gradients(dense, True)
    x, t = tiny_inputs()
    x = x.double().contiguous(memory_format=CL)
    out, grads = forward_backward(plain.to(memory_format=CL), x, t)
    out_dense, grads_dense = forward_backward(dense.to(memory_format=CL), x, t)
    torch.testing.assert_close(out_dense, out, rtol=0, atol=0)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_dense[name], grad, rtol=1e-12, atol=1e-14, msg=name)


def test_the_switch_keeps_the_parameters_and_needs_ndhwc():
    with torch.device("meta"):
        model = UNet3D(paper_unet())
    names = list(model.state_dict())
    variant = Variant("dense", True, True, True, ndhwc=True, dense_skip_gradients=True)
    prepare_model(model, variant, CPU)
    assert model.dense_skip_gradients
    assert parameter_count(model) == 40_226_433 and list(model.state_dict()) == names
    set_dense_skip_gradients(model, False)
    assert not model.dense_skip_gradients
    with pytest.raises(ValueError, match="dense_skip_gradients needs ndhwc: true"):
        Variant("v", True, True, True, dense_skip_gradients=True)
