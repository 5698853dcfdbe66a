"""GroupNorm + SiLU as one layout-preserving function: the same values and gradients as GroupNorm32 followed by SiLU,
the same parameters and state_dict keys, float32 statistics under autocast."""

import copy

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from medddpm.unet import GroupNorm32, GroupNormSiLU, UNet3D, fuse_norm_act
from medddpm.variants import Variant, autocast, prepare_model
from unet_helpers import TINY, tiny_inputs, tiny_unet

# float32: the two differ only in how the statistics are reduced. bfloat16: the output is rounded to bfloat16
# (a relative step of 2^-8 = 0.4 %), so they may differ by one rounding step.
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.bfloat16: {"rtol": 1.6e-2, "atol": 1.6e-2}}
GRAD_RELATIVE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def _pair(channels=64, seed=0):
    torch.manual_seed(seed)
    norm = GroupNorm32(32, channels)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.3)
        norm.bias.normal_(0.0, 0.3)
    reference = nn.Sequential(norm, nn.SiLU())
    fused = GroupNormSiLU(copy.deepcopy(norm))
    return reference, fused


def _relative(a, b):
    return float(torch.linalg.vector_norm((a - b).double()) / torch.linalg.vector_norm(b.double()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last_3d], ids=["contiguous", "cl3d"])
def test_fused_norm_act_matches_groupnorm32_then_silu(dtype, layout):
    reference, fused = _pair()
    # An uneven shape, so that any axis mix-up shows; an offset and scale, so that the statistics matter.
    base = torch.randn(2, 64, 4, 6, 5) * 3 + 1.5
    grad_out = torch.randn(2, 64, 4, 6, 5).to(dtype)
    outputs, grads = [], []
    for module in (reference, fused):
        x = base.to(dtype).contiguous(memory_format=layout).requires_grad_(True)
        out = module(x)
        out.backward(grad_out.contiguous(memory_format=layout))
        outputs.append(out)
        grads.append([x.grad] + [p.grad for p in module.parameters()])
    ref_out, fused_out = outputs
    assert fused_out.dtype == ref_out.dtype == dtype
    torch.testing.assert_close(fused_out, ref_out, **TOLERANCE[dtype])
    # The point of the fused function: a channels-last activation stays channels-last.
    assert fused_out.is_contiguous(memory_format=layout)
    for fused_grad, ref_grad in zip(grads[1], grads[0]):
        assert fused_grad.dtype == ref_grad.dtype
        assert _relative(fused_grad, ref_grad) < GRAD_RELATIVE[dtype]


def test_fusing_keeps_parameters_and_state_dict_keys_and_checkpoints_load_across():
    plain = UNet3D(TINY)
    fused = copy.deepcopy(plain)
    pairs = fuse_norm_act(fused)
    # Two per ResBlock (5 encoder/middle, 4 decoder in this network) and the output's: every GroupNorm but attention's.
    norms = sum(type(m) is GroupNorm32 for m in plain.modules())
    attention_norms = sum(type(m) is GroupNorm32 for m in fused.modules())
    assert pairs == norms - attention_norms and pairs > 0
    assert list(fused.state_dict()) == list(plain.state_dict())
    assert sum(p.numel() for p in fused.parameters()) == sum(p.numel() for p in plain.parameters())
    fused.load_state_dict(plain.state_dict())  # a checkpoint of one variant loads into another
    plain.load_state_dict(fused.state_dict())
    assert fuse_norm_act(fused) == 0  # idempotent


def test_fused_unet_computes_the_same_function_in_channels_last():
    plain = tiny_unet()
    x, t = tiny_inputs()
    expected = plain(x, t)
    variant = Variant("v", False, False, True, fused_norm_act=True)
    fused = prepare_model(copy.deepcopy(plain), variant, torch.device("cpu"))
    assert any(isinstance(m, GroupNormSiLU) for m in fused.modules())
    got = fused(x.contiguous(memory_format=torch.channels_last_3d), t)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


class _InputDtypes(TorchDispatchMode):
    """Records the dtypes of the first argument of each operation named, as the kernels see them (below autocast)."""

    def __init__(self, names):
        super().__init__()
        self.seen = {name: set() for name in names}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in self.seen:
            self.seen[name].add(args[0].dtype)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("fused", [False, True], ids=["groupnorm32", "fused"])
def test_groupnorm_statistics_stay_float32_under_bf16_autocast(fused):
    model = tiny_unet()
    variant = Variant("bf16", False, False, False, autocast="bfloat16", fused_norm_act=fused)
    prepare_model(model, variant, torch.device("cpu"))
    x, t = tiny_inputs()
    statistics = "var_mean" if fused else "native_group_norm"
    recorder = _InputDtypes({statistics, "convolution"})
    with torch.no_grad(), autocast(variant, torch.device("cpu")), recorder:
        model(x, t)
    assert recorder.seen["convolution"] == {torch.bfloat16}
    assert recorder.seen[statistics] == {torch.float32}
