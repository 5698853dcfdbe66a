"""GroupNorm32 + SiLU by the NDHWC Triton kernels (medddpm.ndhwc_norm): the same values and gradients as the
reference modules, in the activation's channels-last layout, through the custom op and its autograd.

On a machine with a CUDA GPU every test runs the compiled kernels there (DEVICE). Without one the kernels run in
Triton's interpreter (conftest sets TRITON_INTERPRET=1 there) on CPU tensors: the same kernel code, program by
program. The interpreter rounds float32 to bfloat16 by truncation where the GPU rounds to nearest, so bfloat16 is
checked tightly only on the GPU (the `on_gpu` tests below); float64 and float32 are exact checks on both."""

import copy
import math

import pytest
import torch
import triton
import triton.language as tl
from torch import nn

from medddpm import ndhwc_norm
from medddpm.ndhwc_norm import _plan, group_norm_silu_ndhwc, runs_kernels
from medddpm.unet import GroupNorm32, GroupNormSiLU, fuse_norm_act, group_norm_silu
from medddpm.variants import Variant, prepare_model
from unet_helpers import same_function_in_float64, tiny_inputs, tiny_unet

CL = torch.channels_last_3d
# Where the kernels run: the GPU where there is one, else Triton's interpreter on the CPU (the same tests on both).
# Every test here runs on the GPU where there is one (DEVICE): the GPU tests take the whole file.
pytestmark = pytest.mark.on_gpu_when_present
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm((a - b).double()) / torch.linalg.vector_norm(b.double()))


def reference_and_kernel(channels: int, dtype: torch.dtype, seed: int = 0):
    """GroupNorm32 + SiLU as upstream's modules, and the same parameters in a GroupNormSiLU running the kernels."""
    torch.manual_seed(seed)
    norm = GroupNorm32(32, channels).to(torch.float64 if dtype == torch.float64 else torch.float32)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.5)
        norm.bias.normal_(0.0, 0.5)
    return nn.Sequential(norm, nn.SiLU()).to(DEVICE), GroupNormSiLU(copy.deepcopy(norm), group_norm_silu_ndhwc).to(DEVICE)


def values_and_gradients(module, x, grad_out):
    x = x.detach().clone().requires_grad_(True)
    out = module(x)
    out.backward(grad_out)
    return out.detach(), [x.grad] + [p.grad for p in module.parameters()]


def offset_activation(channels: int, spatial, dtype: torch.dtype, device=DEVICE):
    """A channels-last activation of 2 samples with an offset large against its spread (statistics from sums of
    squares would lose the variance to cancellation), and a gradient for it."""
    x = (torch.randn(2, channels, *spatial, dtype=torch.float64, device=device) * 2 + 30).to(dtype)
    x = x.contiguous(memory_format=CL)
    return x, torch.randn(x.shape, dtype=dtype, device=device).contiguous(memory_format=CL)


# (channels, spatial shape): channels per group 2, 3 and 6 (three not a power of two, padded in the tile); more
# than one tile per sample with a partial last one (210 rows in tiles of 64; 60 in tiles of 16), and a single
# partial tile (24 rows in a tile of 32).
SHAPES = [(64, (5, 6, 7)), (96, (4, 3, 5)), (192, (3, 4, 5)), (64, (2, 3, 4))]


@pytest.mark.parametrize("channels, spatial", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype, bound", [(torch.float64, 1e-12), (torch.float32, 1e-4)], ids=["fp64", "fp32"])
def test_values_and_gradients_equal_groupnorm32_then_silu(channels, spatial, dtype, bound):
    reference, kernel = reference_and_kernel(channels, dtype)
    x, grad_out = offset_activation(channels, spatial, dtype)
    assert runs_kernels(x)
    expected, expected_grads = values_and_gradients(reference, x, grad_out)
    out, grads = values_and_gradients(kernel, x, grad_out)
    assert out.dtype == dtype and out.is_contiguous(memory_format=CL)
    assert grads[0].is_contiguous(memory_format=CL)
    assert relative(out, expected) < bound
    for name, grad, expected_grad in zip(("input", "weight", "bias"), grads, expected_grads):
        assert grad.dtype == expected_grad.dtype, name
        assert relative(grad, expected_grad) < bound, name
    # In float32, against the float64 function: the kernels' error is of the order of the reference modules'.
    if dtype == torch.float32:
        exact, exact_grads = values_and_gradients(copy.deepcopy(reference).double(), x.double(), grad_out.double())
        assert relative(out, exact) < 2 * relative(expected, exact) + 1e-7
        for grad, expected_grad, exact_grad in zip(grads, expected_grads, exact_grads):
            assert relative(grad, exact_grad) < 2 * relative(expected_grad, exact_grad) + 1e-7


@pytest.mark.parametrize("with_offset", [False, True], ids=["plain", "offset"])
def test_the_passes_store_nothing_past_their_buffers(with_offset, monkeypatch):
    """The (2, N, PARTS, C) buffer of partial sums (the backward's with an offset: 3 planes), y and dx, each with guard
    elements after it: the sums passes store each program's C channels and the apply passes each row's C channels,
    nothing beyond (96 channels in 128 lanes: the lanes past C are masked at every store, also in the last program,
    whose last row ends the buffer; on a GPU a row's lane C would race with the next row's channel 0), so every guard
    keeps its sentinel."""
    passes, buffers, planes = ndhwc_norm._passes, [], []

    def guard(numel, dtype, device):
        buffers.append(torch.full((numel + 256,), -7.0, dtype=dtype, device=device))
        return buffers[-1][:numel]

    def guarded_passes(x, groups, compute, direction, offset=None):
        run = passes(x, groups, compute, direction, offset)
        planes.append((direction, run.sums.shape[0]))
        return run._replace(sums=guard(run.sums.numel(), compute, x.device).view(run.sums.shape))

    class GuardedTorch:
        """torch, but empty_like in channels-last (y and dx) gives a tensor with a guard after it."""

        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def empty_like(t, memory_format=None, **kwargs):
            if memory_format is not CL:
                return torch.empty_like(t, memory_format=memory_format, **kwargs)
            n, c, *spatial = t.shape
            return guard(t.numel(), t.dtype, t.device).view(n, *spatial, c).permute(0, 4, 1, 2, 3)

    monkeypatch.setattr(ndhwc_norm, "_passes", guarded_passes)
    monkeypatch.setattr(ndhwc_norm, "torch", GuardedTorch())
    x, grad_out = offset_activation(96, (4, 3, 5), torch.float64)
    weight, bias = (torch.randn(96, dtype=torch.float64, device=DEVICE) for _ in range(2))
    offset = torch.randn(x.shape[:2], dtype=torch.float64, device=DEVICE) if with_offset else None
    inputs = [t.requires_grad_(True) for t in (x, weight, bias, offset) if t is not None]

    def values_and_gradients_of(function):
        out = function(x, weight, bias, 32, 1e-5, offset)
        return [out.detach()] + list(torch.autograd.grad(out, inputs, grad_out))

    expected = values_and_gradients_of(group_norm_silu)
    got = values_and_gradients_of(group_norm_silu_ndhwc)
    assert len(buffers) == 4  # sums and y, sums and dx
    for buffer in buffers:
        assert bool((buffer[-256:] == -7.0).all())
    # The backward's sums have a third plane with an offset (the sums of xhat).
    assert planes == [("forward", 2), ("backward", 3 if with_offset else 2)]
    for value, reference in zip(got, expected):
        assert relative(value, reference) < 1e-12


class TwoPassGroupNormSiLU(nn.Module):
    """GroupNorm + SiLU with the group's variance from the values less their mean (two passes), written out in
    float64 torch operations (autograd gives the gradients): exact to rounding where PyTorch's own GroupNorm is not.
    On an input whose mean is 30 times its spread PyTorch's float64 GroupNorm lies 1.3e-13 from a long-double
    two-pass computation on the CPU, the kernels 2.7e-15. On an H200 PyTorch's CUDA GroupNorm lay 4.3e-15 from this
    module and the kernels 1.4e-11, whatever the input's mean, until eps reached them whole (ndhwc_norm._split_eps:
    Triton had passed it as float32) (2026-12-04)."""

    def __init__(self, norm: nn.GroupNorm):
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        groups = x.reshape(x.shape[0], self.norm.num_groups, -1)
        centred = groups - groups.mean(-1, keepdim=True)
        variance = (centred * centred).mean(-1, keepdim=True)
        normalised = (centred / torch.sqrt(variance + self.norm.eps)).reshape(x.shape)
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return nn.functional.silu(normalised * self.norm.weight.reshape(shape) + self.norm.bias.reshape(shape))


def test_a_variance_below_one_is_normalised_as_by_the_reference():
    """A group variance of 0.01 (the other tests' are about 4): the variance is clamped at zero, not at one. The
    mean is 30 times the spread, so the reference computes the variance in two passes (TwoPassGroupNormSiLU)."""
    reference, kernel = reference_and_kernel(64, torch.float64)
    exact = TwoPassGroupNormSiLU(copy.deepcopy(reference[0]))
    x = (torch.randn(2, 64, 2, 3, 4, dtype=torch.float64, device=DEVICE) * 0.1 + 3).contiguous(memory_format=CL)
    grad_out = torch.randn(x.shape, dtype=torch.float64, device=DEVICE).contiguous(memory_format=CL)
    expected, expected_grads = values_and_gradients(exact, x, grad_out)
    out, grads = values_and_gradients(kernel, x, grad_out)
    assert relative(out, expected) < 1e-13
    for grad, expected_grad in zip(grads, expected_grads):
        assert relative(grad, expected_grad) < 1e-12


@pytest.mark.parametrize("tile_elements, programs, spatial, parts, chunk",
                         [(4096, 4, (5, 6, 9), 2, 2), (16, 1024, (2, 2, 5), 20, 8)],
                         ids=["programs-loop-over-tiles", "statistics-loop-over-programs"])
# Float64 alone: the loops are the same code in both dtypes, and float64 makes a row added twice or left out stand
# out from rounding (float32's accumulation is the other tests' subject).
@pytest.mark.parametrize("dtype, bound", [(torch.float64, 1e-12)], ids=["fp64"])
def test_every_loop_of_the_reductions_adds_each_row_once(tile_elements, programs, spatial, parts, chunk, dtype, bound,
                                                         monkeypatch):
    """The reduction programs loop over tiles (270 rows, 5 tiles on 2 programs per sample: 3 and 2), and the
    per-group passes loop over the programs' partial sums (20 programs' in chunks of 8: 8, 8 and a partial 4; each
    program is one tile of one row here, so the interpreter runs 20 per sample)."""
    monkeypatch.setattr(ndhwc_norm, "TILING", ndhwc_norm.Tiling(
        forward_sums_elements=tile_elements, backward_sums_elements=tile_elements, programs=programs,
        apply_elements=tile_elements))
    channels = 64
    assert _plan(2, channels, math.prod(spatial), tile_elements, programs)[3] == parts
    assert ndhwc_norm._group_blocks(channels, 32, parts, tile_elements)["BLOCK_P"] == chunk
    reference, kernel = reference_and_kernel(channels, dtype)
    x, grad_out = offset_activation(channels, spatial, dtype)
    expected, expected_grads = values_and_gradients(reference, x, grad_out)
    out, grads = values_and_gradients(kernel, x, grad_out)
    assert relative(out, expected) < bound
    for grad, expected_grad in zip(grads, expected_grads):
        assert relative(grad, expected_grad) < bound


@pytest.mark.parametrize("forward_sums, backward_sums, apply", [(64, 1024, 512), (1024, 64, 64)],
                         ids=["apply-tiles-larger", "apply-tiles-smaller"])
def test_each_pass_tiles_on_its_own_and_covers_every_row_once(forward_sums, backward_sums, apply, monkeypatch):
    """The forward sums, backward sums and apply passes each tile the activation as Tiling says: with 64 channels,
    1, 16 and 8 rows per tile, or 16, 1 and 1, of 60 (partial last tiles of 12 and 4 rows), the values and gradients
    hold. (60 rows, not more: the interpreter runs a one-row tile's program per row.)"""
    monkeypatch.setattr(ndhwc_norm, "TILING", ndhwc_norm.Tiling(
        forward_sums_elements=forward_sums, backward_sums_elements=backward_sums, programs=4, apply_elements=apply))
    reference, kernel = reference_and_kernel(64, torch.float64)
    x, grad_out = offset_activation(64, (3, 4, 5), torch.float64)
    forward, backward = (ndhwc_norm._passes(x, 32, torch.float64, d) for d in ("forward", "backward"))
    assert forward.tiles != backward.tiles and forward.apply_tiles == backward.apply_tiles
    assert forward.apply_tiles != forward.tiles
    expected, expected_grads = values_and_gradients(reference, x, grad_out)
    out, grads = values_and_gradients(kernel, x, grad_out)
    assert relative(out, expected) < 1e-12
    for grad, expected_grad in zip(grads, expected_grads):
        assert relative(grad, expected_grad) < 1e-12


def test_tiles_cover_every_row_once():
    """The tile shapes the tests above rely on: several tiles with a partial last one, and a single partial one;
    each reduction program loops over every PARTS-th tile of its sample (several per program at 128^3)."""
    assert _plan(2, 64, 210, 4096, 1024) == (64, 64, 4, 4)
    assert _plan(2, 192, 60, 4096, 1024) == (256, 16, 4, 4)
    assert _plan(2, 64, 24, 4096, 1024) == (64, 32, 1, 1)
    programs = ndhwc_norm.TILING.programs
    assert _plan(1, 512, 128**3, 4096, programs) == (512, 8, 128**3 // 8, programs)
    assert _plan(2, 512, 128**3, 4096, programs)[3] == programs // 2


def test_bfloat16_keeps_dtype_and_layout_and_is_within_rounding():
    """bfloat16 under the interpreter (truncating casts): within a few rounding steps of the float64 function; the
    GPU test holds it to the plain function's rounding."""
    reference, kernel = reference_and_kernel(64, torch.float32)
    x = (torch.randn(2, 64, 5, 6, 7, device=DEVICE) * 3 + 5).to(torch.bfloat16).contiguous(memory_format=CL)
    grad_out = torch.randn(x.shape, device=DEVICE).to(torch.bfloat16).contiguous(memory_format=CL)
    out, grads = values_and_gradients(kernel, x, grad_out)
    expected, expected_grads = values_and_gradients(copy.deepcopy(reference).double(), x.double(), grad_out.double())
    assert out.dtype == torch.bfloat16 and out.is_contiguous(memory_format=CL)
    assert grads[0].dtype == torch.bfloat16 and grads[1].dtype == torch.float32
    assert relative(out, expected) < 1.5e-2
    for grad, expected_grad in zip(grads, expected_grads):
        assert relative(grad, expected_grad) < 1.5e-2


def truncated_to_bfloat16(t: torch.Tensor) -> torch.Tensor:
    """float32 values cut to bfloat16's 8 bits of mantissa, as Triton's interpreter casts them (in float32)."""
    return (t.float().contiguous().view(torch.int32) & -65536).view(torch.float32)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU rounds to nearest (the on_gpu bfloat16 test)")
def test_bfloat16_rounds_the_norms_output_before_silu_under_the_interpreter():
    """The output cast to bfloat16 before SiLU and after it, as the plain function does, with the interpreter's
    truncating casts written out by hand on the float64 GroupNorm: the same values but where float32 arithmetic in
    another order puts the norm's output across a truncation edge (2 of 26880 here); without the first cast about
    half of them differ."""
    reference, kernel = reference_and_kernel(64, torch.float32)
    torch.manual_seed(1)
    x = (torch.randn(2, 64, 5, 6, 7, device=DEVICE) * 3 + 5).to(torch.bfloat16).contiguous(memory_format=CL)
    norm = reference[0]
    with torch.no_grad():
        out = kernel(x)
        z = torch.nn.functional.group_norm(x.double(), 32, norm.weight.double(), norm.bias.double(), norm.eps)
        zr = truncated_to_bfloat16(z)
        expected = truncated_to_bfloat16(zr * torch.sigmoid(zr))
    assert out.dtype == torch.bfloat16
    assert float((out.float() != expected).float().mean()) < 1e-3


def test_other_inputs_take_the_plain_function():
    """A contiguous activation is not what the kernels read: it goes through group_norm_silu, unchanged."""
    reference, kernel = reference_and_kernel(64, torch.float32)
    x = torch.randn(1, 64, 3, 4, 5, device=DEVICE)
    assert not runs_kernels(x)
    norm = reference[0]
    torch.testing.assert_close(kernel(x), group_norm_silu(x, norm.weight, norm.bias, 32, norm.eps), rtol=0, atol=0)


def test_small_activations_take_the_kernels_too():
    """Every norm site takes the kernels, the smallest too (module docstring: leaving the small ones to inductor met
    an inductor fault at the sampling batch of 8)."""
    assert runs_kernels(torch.empty(1, 512, 8, 8, 8, device=DEVICE).contiguous(memory_format=CL))
    assert runs_kernels(torch.empty(1, 64, 1, 1, 1, device=DEVICE).contiguous(memory_format=CL))


def test_the_whole_unet_with_the_kernels_equals_the_plain_one_in_float64():
    """The U-Net's norm sites (channel counts from 32 to 128, the skip concatenations' among them): fusing with the
    kernels changes no output or gradient beyond float64 rounding, and keeps the state_dict keys. Float64
    convolutions return NCDHW activations on a CPU and on a GPU alike (cuDNN keeps channels-last for the reduced
    precisions only; measured on an H200), which `group_norm_silu_ndhwc` would hand to the plain function: here the
    first site of each shape hands its activation to the kernels channels-last (a site of a shape seen before would
    run the same launches on other values; under the interpreter each launch costs about 0.1 s), the other sites
    take the plain function (counted below)."""
    plain = tiny_unet().double().to(DEVICE, memory_format=CL)
    fused = copy.deepcopy(plain)
    through_kernels = []

    def counted(x, *args):
        if tuple(x.shape) in {shape for shape, _ in through_kernels}:
            through_kernels.append((tuple(x.shape), False))
            return group_norm_silu(x, *args)
        x = x.contiguous(memory_format=CL)
        through_kernels.append((tuple(x.shape), runs_kernels(x)))
        return group_norm_silu_ndhwc(x, *args)

    assert fuse_norm_act(fused, counted) == 17
    assert list(fused.state_dict()) == list(plain.state_dict())
    same_function_in_float64(plain, fused, DEVICE)
    # Seven shapes among the 17 sites, the first of each through the kernels.
    assert len(through_kernels) == 17 and sum(took for _, took in through_kernels) == 7


def test_torch_compile_traces_the_op_and_its_backward_in_one_graph():
    """dynamo and AOT autograd keep the custom ops (fullgraph: a graph break would be an error): each norm is one
    forward op in the forward graph and one backward op in the backward graph, and the compiled modules give the
    values and gradients of the plain function in float64. (The graphs run eagerly here, the kernels in the
    interpreter; inductor's code around them needs the GPU, where the whole U-Net compiled is a test.)"""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def keep(graph_module, example_inputs):
        graphs.append(graph_module.code)
        return make_boxed_func(graph_module.forward)

    torch._dynamo.reset()
    torch.manual_seed(0)
    # The reference is the plain function: torch 2.13's CPU GroupNorm backward crashes (SIGSEGV) on a channels-last
    # input that needs no gradient, as the first norm's here.
    plain = nn.Sequential(GroupNorm32(32, 64), nn.SiLU(), GroupNorm32(32, 64), nn.SiLU()).double().to(DEVICE)
    with torch.no_grad():
        for parameter in plain.parameters():
            parameter.normal_(0.5, 0.3)
    model = copy.deepcopy(plain)
    assert fuse_norm_act(plain, group_norm_silu) == fuse_norm_act(model, group_norm_silu_ndhwc) == 2
    compiled = torch.compile(model, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep), fullgraph=True,
                             dynamic=False)
    x = (torch.randn(2, 64, 5, 6, 7, dtype=torch.float64, device=DEVICE) * 2 + 3).contiguous(memory_format=CL)
    out = compiled(x)
    out.square().mean().backward()
    expected = plain(x)
    expected.square().mean().backward()
    torch._dynamo.reset()
    forward, backward = graphs
    assert forward.count("torch.ops.medddpm.group_norm_silu_ndhwc_forward.default(") == 2
    assert "backward.default(" not in forward
    assert backward.count("torch.ops.medddpm.group_norm_silu_ndhwc_backward.default(") == 2
    assert out.is_contiguous(memory_format=CL)
    # Float64 throughout: a step that fell to float32 would leave about 1e-7. The bound leaves room for the order of
    # the reductions (GPU: 1.3e-12 on an H200, where the two norms' group sums run in another order than ATen's).
    assert relative(out.detach(), expected.detach()) < 1e-10
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        assert relative(p.grad, q.grad) < 1e-10, name


def test_the_switch_needs_channels_last_and_has_no_effect_on_a_cpu():
    with pytest.raises(ValueError, match="ndhwc needs channels_last: true"):
        Variant("v", True, True, False, ndhwc=True)
    variant = Variant("v", True, True, True, ndhwc=True)
    assert variant.effective_on("cpu")["ndhwc"] is False
    assert variant.effective_on("cuda")["ndhwc"] is True
    # On a CPU the model takes the plain function (the kernels are for CUDA).
    model = prepare_model(tiny_unet(), variant, torch.device("cpu"))
    kernels = {m.kernel for m in model.modules() if isinstance(m, GroupNormSiLU)}
    assert kernels == {group_norm_silu}


# On the GPU: the kernels compiled for the device, bfloat16 rounded as the hardware rounds, and the op inside a
# compiled U-Net (tests/test_gpu_paths.py covers the other CUDA-only paths).
on_gpu = pytest.mark.cuda
CUDA = torch.device("cuda")


@on_gpu
@pytest.mark.parametrize("channels, spatial", SHAPES + [(128, (32, 32, 32)), (512, (16, 16, 16))], ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_on_the_gpu_values_and_gradients_equal_the_reference(channels, spatial, dtype):
    reference, kernel = (module.to(CUDA) for module in reference_and_kernel(channels, dtype))
    x, grad_out = offset_activation(channels, spatial, dtype, CUDA)
    expected, expected_grads = values_and_gradients(reference, x, grad_out)
    out, grads = values_and_gradients(kernel, x, grad_out)
    assert out.is_contiguous(memory_format=CL) and grads[0].is_contiguous(memory_format=CL)
    if dtype == torch.float64:
        assert relative(out, expected) < 1e-12
        for grad, expected_grad in zip(grads, expected_grads):
            assert relative(grad, expected_grad) < 1e-12
    else:
        exact, exact_grads = values_and_gradients(copy.deepcopy(reference).double(), x.double(), grad_out.double())
        assert relative(out, exact) < 2 * relative(expected, exact) + 1e-7
        for grad, expected_grad, exact_grad in zip(grads, expected_grads, exact_grads):
            assert relative(grad, exact_grad) < 2 * relative(expected_grad, exact_grad) + 1e-7


@on_gpu
def test_on_the_gpu_bfloat16_rounds_as_the_plain_function():
    """The norm's float32 output is cast to bfloat16 before SiLU and the SiLU's result again, as the plain function
    does. Where float32 arithmetic in another order puts the norm's output on the other side of a bfloat16 rounding
    edge, the two differ by one step of that cast carried through SiLU (slope at most 1.1) plus one step of the
    output's: few elements, and no more than that. The norm's output z = w * xhat + b itself differs by the float32
    error of the statistics, relative to |w * xhat| + |b|, not to |z|: where the two terms cancel, z is near zero,
    its bfloat16 steps are fine, and that error spans many of them (the GPU run of 2026-12-02 failed a bound that
    left this out)."""
    reference, kernel = (module.to(CUDA) for module in reference_and_kernel(256, torch.float32))
    x = (torch.randn(1, 256, 24, 20, 16, device=CUDA) * 3 + 2).to(torch.bfloat16).contiguous(memory_format=CL)
    grad_out = torch.randn(x.shape, device=CUDA).to(torch.bfloat16).contiguous(memory_format=CL)
    norm = reference[0]
    plain = GroupNormSiLU(copy.deepcopy(norm))
    expected, expected_grads = values_and_gradients(plain, x, grad_out)
    out, grads = values_and_gradients(kernel, x, grad_out)
    with torch.no_grad():
        xhat = torch.nn.functional.group_norm(x.double(), 32, eps=norm.eps)
        weight, bias = (p.double()[:, None, None, None] for p in (norm.weight, norm.bias))
        z = xhat * weight + bias
        spread = (xhat * weight).abs() + bias.abs()
    eps, eps32 = torch.finfo(torch.bfloat16).eps, torch.finfo(torch.float32).eps
    bound = 1.1 * (eps * z.abs() + 64 * eps32 * spread) + eps * expected.double().abs() + 1e-30
    differ = out != expected
    assert float(differ.float().mean()) < 0.01
    assert bool(((out.double() - expected.double()).abs() <= bound)[differ].all())
    for grad, expected_grad in zip(grads, expected_grads):
        assert grad.dtype == expected_grad.dtype
        assert relative(grad, expected_grad) < 1e-2


@on_gpu
def test_on_the_gpu_a_batch_beyond_2_31_elements_is_addressed_right():
    """9 samples of 128 channels at 128^3 (2.4e9 elements, bfloat16): the last sample, beyond 2^31 elements from the
    start, is normalised as the plain function normalises it alone."""
    reference, kernel = (module.to(CUDA) for module in reference_and_kernel(128, torch.float32))
    x = torch.randn(9, 128, 128, 128, 128, device=CUDA, dtype=torch.bfloat16).contiguous(memory_format=CL)
    x[-1].mul_(3).add_(2)
    assert x.numel() > 2**31
    with torch.no_grad():
        last = kernel(x)[-1:]
        expected = GroupNormSiLU(copy.deepcopy(reference[0]))(x[-1:])
    assert float((last != expected).float().mean()) < 0.01
    assert relative(last, expected) < 4e-3


@triton.jit
def _tile_offsets_kernel(out_ptr, n, tile, S, C, BLOCK_S: tl.constexpr, BLOCK_C: tl.constexpr):
    """The offsets and mask `_tile_at` gives for sample n's tile, written out (one program)."""
    offsets, mask = ndhwc_norm._tile_at(n, tile, S, C, BLOCK_S, BLOCK_C)
    where = tl.arange(0, BLOCK_S)[:, None] * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    tl.store(out_ptr + where, tl.where(mask, offsets, -1))


@pytest.mark.parametrize("n, tile, S, C", [
    (8, 0, 128**3, 128),          # the first row of sample 8: 2^31 exactly, where 32 bits wrap to -2^31
    (8, 32767, 128**3, 128),      # sample 8's last tile of 64 rows at 128^3 (9 samples: the GPU test's batch)
    (16, 5, 64**3, 512),          # another shape past 2^31, and past 2^32 (8.6e9 elements)
    (0, 16384, 2**21, 2048),      # one sample past 2^31: its row offsets alone reach 2^31 (the rows in 64 bits too)
    (0, 2, 40, 6),                # a partial last tile: the rows beyond S masked
])
def test_tile_offsets_are_64_bit_past_2_31_elements(n, tile, S, C):
    """Every kernel addresses the activation through `_tile_at`: its offsets, computed by Triton (the interpreter on
    a CPU, the compiled kernel on a GPU), equal Python's integers for samples that start at or beyond 2^31 elements,
    without the memory such a batch needs (the GPU test above runs one whole)."""
    block_s, block_c = 64, triton.next_power_of_2(C)
    out = torch.empty(block_s, block_c, dtype=torch.int64, device=DEVICE)
    _tile_offsets_kernel[(1,)](out, n, tile, S, C, BLOCK_S=block_s, BLOCK_C=block_c)
    expected = torch.full((block_s, block_c), -1, dtype=torch.int64)
    for row in range(block_s):
        if tile * block_s + row < S:
            expected[row, :C] = torch.tensor([(n * S + tile * block_s + row) * C + col for col in range(C)])
    assert torch.equal(out.cpu(), expected)
    assert n * S * C < 2**31 or int(out.max()) >= 2**31


def layout_conversions(kernels: list[str]) -> int:
    """Copy kernels and cuDNN's NCHW<->NHWC transposes among a step's kernel names."""
    return sum("copy" in k or "nchwToNhwc" in k or "nhwcToNchw" in k for k in kernels)


@on_gpu
def test_compiled_unet_keeps_the_kernels_and_converts_no_layout_around_the_norms():
    """The frontier_ndhwc switches on the tiny U-Net, compiled as one graph: the custom op is kept (its kernels run),
    fewer layout conversions than the eager channels-last step, and the step matches it to bfloat16 rounding."""
    from torch.profiler import ProfilerActivity, profile

    from medddpm.variants import apply_backend, autocast, compile_model, prepare_input

    switches = dict(autocast="bfloat16", compile="default", checkpointing="none", gather_upsampling=True)
    fast = Variant("frontier_ndhwc", True, True, True, ndhwc=True, **switches)
    eager = Variant("bf16_channels_last", True, True, True, autocast="bfloat16", checkpointing="none")
    x, t = tiny_inputs(shape=(16, 16, 16))
    x, t = x.to(CUDA), t.to(CUDA)
    results = {}
    for variant in (eager, fast):
        apply_backend(variant)
        model = prepare_model(tiny_unet().to(CUDA), variant, CUDA)
        compile_model(model, variant)
        with autocast(variant, CUDA):
            for _ in range(2):  # the first call compiles
                out = model(prepare_input(x, variant), t)
                out.float().abs().mean().backward()
            model.zero_grad(set_to_none=True)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                out = model(prepare_input(x, variant), t)
                out.float().abs().mean().backward()
                torch.cuda.synchronize()
        kernels = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
        results[variant.name] = (out.detach(), {n: p.grad for n, p in model.named_parameters()}, kernels)
    out, grads, kernels = results["frontier_ndhwc"]
    for name in ("_forward_sums", "_forward_statistics", "_forward_apply", "_backward_sums", "_backward_coefficients",
                 "_backward_apply"):
        assert any(name in k for k in kernels), name
    # cuDNN still transposes around a few convolutions (in the whole-head step: the first one, whose 3 input
    # channels it pads, and the backward of some 64-channel ones at 128^3); far fewer than in the eager step.
    assert layout_conversions(kernels) < layout_conversions(results["bf16_channels_last"][2])
    assert relative(out, results["bf16_channels_last"][0]) < 2e-2
    for name, grad in grads.items():
        assert torch.isfinite(grad).all(), name


# -- channels-last end to end ---------------------------------------------------------------------------------------


def channels_last(t: torch.Tensor) -> bool:
    return t.is_contiguous(memory_format=CL) and not t.is_contiguous()


def test_the_attention_sum_in_5d_keeps_a_batch_of_one_channels_last():
    """Upstream's residual sum in 3-D gives a batch of one an odd batch stride, after which torch.cat sees no
    channels-last (the decoder's concatenations turn contiguous); the same sum in 5-D keeps the input's strides."""
    from medddpm.unet import AttentionBlock

    torch.manual_seed(0)
    block = AttentionBlock(64, 1, 32, use_checkpoint=False)
    with torch.no_grad():
        block.proj_out.weight.normal_()
    x = torch.randn(1, 64, 4, 4, 4).contiguous(memory_format=CL)
    upstream = block(x)
    block.keep_layout = True
    kept = block(x)
    assert torch.equal(kept, upstream)
    assert kept.stride() == x.stride()
    assert channels_last(torch.cat([kept, x], dim=1))
    assert not channels_last(torch.cat([upstream, x], dim=1))


class CudnnLayout(torch.autograd.Function):
    """A convolution's output as cuDNN gives it for a channels-last input: channels-last with its own strides (a
    CPU convolution returns it contiguous)."""

    @staticmethod
    def forward(ctx, y):
        return torch.empty(y.shape, dtype=y.dtype).contiguous(memory_format=CL).copy_(y)

    @staticmethod
    def backward(ctx, grad):
        return grad


@pytest.mark.parametrize("ndhwc", [False, True], ids=["upstream", "ndhwc"])
def test_with_ndhwc_every_activation_between_convolutions_stays_channels_last(ndhwc, monkeypatch):
    """The tiny U-Net's forward in channels-last with the gather upsampling, its convolutions laying out their
    outputs as cuDNN does: with the ndhwc switch every module's 5-D output is channels-last (the last convolution's,
    of one channel, is both layouts); upstream's formulation turns the decoder contiguous."""
    convolve = torch.nn.Conv3d._conv_forward

    def cudnn_like(self, x, weight, bias):
        y = convolve(self, x, weight, bias)
        return CudnnLayout.apply(y) if channels_last(x) else y

    monkeypatch.setattr(torch.nn.Conv3d, "_conv_forward", cudnn_like)
    variant = Variant("v", False, False, True, gather_upsampling=True, ndhwc=ndhwc)
    model = prepare_model(tiny_unet(), variant, torch.device("cpu"))
    if ndhwc:  # the kernels too (on a CPU prepare_model keeps the plain function, which returns contiguous)
        assert fuse_norm_act(model, group_norm_silu_ndhwc) == 0
        for module in model.modules():
            if isinstance(module, GroupNormSiLU):
                module.kernel = group_norm_silu_ndhwc
    turned = []
    for name, module in model.named_modules():
        module.register_forward_hook(lambda m, args, out, name=name: turned.append(name) if isinstance(
            out, torch.Tensor) and out.ndim == 5 and out.shape[1] > 1 and not channels_last(out) else None)
    x, t = tiny_inputs()
    model(x.contiguous(memory_format=CL), t)
    if ndhwc:
        assert turned == []
    else:
        assert any(name.startswith("output_blocks") for name in turned)


@on_gpu
def test_on_the_gpu_the_eager_ndhwc_step_copies_fewer_layouts():
    """The eager bfloat16 channels-last step of the tiny U-Net with and without the ndhwc switch (both with the gather
    upsampling): with it, fewer layout conversions (copy kernels and cuDNN transposes) than upstream's
    formulation, and the same output to bfloat16 rounding."""
    from torch.profiler import ProfilerActivity, profile

    from medddpm.variants import apply_backend, autocast, prepare_input

    x, t = tiny_inputs(shape=(16, 16, 16))
    x, t = x.to(CUDA), t.to(CUDA)
    seen = {}
    for ndhwc in (False, True):
        variant = Variant("v", True, True, True, autocast="bfloat16", checkpointing="none", gather_upsampling=True,
                          ndhwc=ndhwc)
        apply_backend(variant)
        model = prepare_model(tiny_unet().to(CUDA), variant, CUDA)
        with autocast(variant, CUDA):
            out = model(prepare_input(x, variant), t)  # warm-up
            out.float().abs().mean().backward()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                out = model(prepare_input(x, variant), t)
                out.float().abs().mean().backward()
                torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
        seen[ndhwc] = (out.detach(), names)
    conversions = {ndhwc: layout_conversions(names) for ndhwc, (_, names) in seen.items()}
    assert conversions[True] < conversions[False], conversions
    assert relative(seen[True][0], seen[False][0]) < 2e-2
