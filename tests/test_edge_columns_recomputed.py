"""The `recompute_edge_columns` switch: the first convolution's im2col columns (the `edge_gemms` form) gathered again in
backward instead of kept from the forward for the weight's gradient, the same function.

Checked in float64 on the tiny U-Net (eager: torch.utils.checkpoint recomputes the region), and by what the compiled
step keeps: the tensors the forward graph of AOTAutograd's partition (inductor's partitioner) saves for backward, with
the columns among them without the switch and not with it. How much memory and time that is at 128^3 is a GPU's
question (docs/optimization-ladder.md)."""

import pytest
import torch
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from config_settings import paper_unet

from medddpm.conv_gemm import TAPS, ROW_MULTIPLE
from medddpm.switches import Variant
from medddpm.unet import (NdhwcInputConv3d, UNet3D, parameter_count, set_edge_columns_recomputed, set_edge_gemms,
                          set_ndhwc_edges)
from medddpm.variants import prepare_model
from unet_helpers import forward_backward, tiny_inputs, tiny_unet

IN_CHANNELS = 3
COLUMNS = len(TAPS) * IN_CHANNELS + -len(TAPS) * IN_CHANNELS % ROW_MULTIPLE  # 81 taps x channels, 7 zero columns


def test_the_unet_with_the_switch_is_the_same_function_in_float64():
    """The tiny U-Net with the NDHWC edges as matrix products, with and without the columns recomputed: the same
    output and the same gradient of every parameter, the first convolution's among them."""
    kept, recomputed = tiny_unet().double(), tiny_unet().double()
    for model in (kept, recomputed):
        set_ndhwc_edges(model, True)
        set_edge_gemms(model, True)
    set_edge_columns_recomputed(recomputed, True)
    assert [m.recompute_columns for m in recomputed.modules() if isinstance(m, NdhwcInputConv3d) and m.as_gemm] == [
        True]
    x, t = tiny_inputs()
    out, grads = forward_backward(kept, x.double(), t)
    out_recomputed, grads_recomputed = forward_backward(recomputed, x.double(), t)
    torch.testing.assert_close(out_recomputed, out, rtol=0, atol=0)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_recomputed[name], grad, rtol=1e-12, atol=1e-15, msg=name)
    assert grads["input_blocks.0.0.weight"].abs().sum() > 0


class FirstConvProbe(torch.nn.Module):
    """The U-Net's first convolution and what follows it in a ResBlock (SiLU and a library convolution)."""

    def __init__(self):
        super().__init__()
        self.first = NdhwcInputConv3d(IN_CHANNELS, 8, 3, padding=1)
        self.inner = torch.nn.Conv3d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.inner(F.silu(self.first(x)))


def saved_for_backward(recompute: bool) -> tuple[list[tuple[int, ...]], list[torch.Tensor]]:
    """Compiled (AOTAutograd's partition, as inductor's), float64: the shapes of the tensors the forward graph hands
    to the backward, and the parameters' gradients of one step."""
    torch.manual_seed(0)
    probe = FirstConvProbe().double()
    set_edge_gemms(probe, True)  # the first convolution alone: the probe has no OutputConv3d
    set_edge_columns_recomputed(probe, recompute)
    saved = []

    def forward_compiler(graph, _inputs):
        outputs = next(node for node in graph.graph.nodes if node.op == "output").args[0]
        saved.extend(tuple(node.meta["val"].shape) for node in outputs[1:])  # the first is the forward's own output
        return make_boxed_func(graph)

    torch._dynamo.reset()
    compiled = torch.compile(probe, backend=aot_autograd(fw_compiler=forward_compiler,
                                                         bw_compiler=lambda graph, _: make_boxed_func(graph)),
                             fullgraph=True, dynamic=False)
    x = torch.randn(1, IN_CHANNELS, 5, 6, 7, dtype=torch.float64)
    out = compiled(x)
    grads = torch.autograd.grad(out.square().sum(), list(probe.parameters()))
    return saved, list(grads)


def test_compiled_the_forward_keeps_the_input_instead_of_the_columns():
    kept, grads_kept = saved_for_backward(False)
    recomputed, grads_recomputed = saved_for_backward(True)
    voxels = 5 * 6 * 7
    # Without the switch the partitioner keeps the padded columns (one row per voxel); with it, the input.
    assert (voxels, COLUMNS) in kept and (voxels, COLUMNS) not in recomputed, (kept, recomputed)
    assert (1, IN_CHANNELS, 5, 6, 7) in recomputed
    for got, want in zip(grads_recomputed, grads_kept):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)


def test_the_switch_needs_the_first_convolution_as_a_matrix_product():
    model = tiny_unet()
    with pytest.raises(ValueError, match=r"^recompute_edge_columns needs the first convolution as a matrix product"):
        set_edge_columns_recomputed(model, True)
    set_edge_columns_recomputed(model, False)  # off: nothing to check
    switches = dict(cudnn_tf32=True, matmul_tf32=True, channels_last=True, compile="default", ndhwc=True,
                    ndhwc_edges=True)
    with pytest.raises(ValueError, match="recompute_edge_columns needs edge_gemms: true"):
        Variant.from_config("v", {**switches, "recompute_edge_columns": True})
    variant = Variant.from_config("v", {**switches, "edge_gemms": True, "recompute_edge_columns": True})
    assert variant.effective_on("cpu")["recompute_edge_columns"] is False
    assert variant.effective_on("cuda")["recompute_edge_columns"] is True
    # The rung's switches on the whole-head network: the first convolution alone, the same parameters.
    with torch.device("meta"):
        model = UNet3D(paper_unet())
    prepare_model(model, variant, torch.device("cpu"))
    assert [m for m in model.modules() if getattr(m, "recompute_columns", False)] == [model.input_blocks[0][0]]
    assert parameter_count(model) == 40_226_433
