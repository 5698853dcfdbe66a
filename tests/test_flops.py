"""FLOP counts of the U-Net (medddpm.flops) against a count written here from the layer shapes alone."""

import pytest
import torch
from torch import nn

from config_settings import paper_unet
from medddpm.flops import CLASSES, unet_flops
from medddpm.unet import AttentionBlock, ResBlock, UNet3D, UNetConfig
from unet_helpers import TINY, TINY_SHAPE


def _shapes(config: UNetConfig, shape):
    """Every convolution, linear layer and attention block with its input and output shapes, from one real forward
    of the small network (hooks record shapes only)."""
    model = UNet3D(config)
    seen = []

    def hook(module, inputs, output):
        seen.append((module, tuple(inputs[0].shape), tuple(output.shape)))

    for module in model.modules():
        if isinstance(module, (nn.Conv3d, nn.Conv1d, nn.Linear, AttentionBlock)):
            module.register_forward_hook(hook)
    with torch.no_grad():
        model(torch.zeros(1, config.in_channels, *shape), torch.tensor([1]))
    return model, seen


def _independent_count(config: UNetConfig, shape, checkpointing: str) -> dict:
    """2 x multiply-adds: a convolution 2 N C_out C_in k^3 per output voxel; a linear layer 2 B in out; attention
    two batched products of 2 B T T C each (T tokens, C channels). Training: every convolution's weight gradient
    costs its forward, its data gradient too except for the first convolution (the input needs no gradient);
    linear layers and attention products cost two products each in backward (both operands need gradients),
    except the first time-embedding layer (its sinusoidal input needs none). A recomputed block adds its forward
    except its last operation that saves tensors for backward: torch's checkpoint stops recomputing as soon as the
    last saved tensor is back, and an operation saves its inputs before it computes. That is the attention's output
    projection, a ResBlock's skip convolution, or its output convolution where the skip is the identity."""
    model, seen = _shapes(config, shape)
    first_conv = model.input_blocks[0][0]
    first_linear = model.time_embed[0]
    inside = {}  # module -> the checkpointable block that holds it
    not_recomputed = set()
    for block in model.modules():
        if isinstance(block, (ResBlock, AttentionBlock)):
            for module in block.modules():
                inside.setdefault(module, block)
        if isinstance(block, AttentionBlock):
            not_recomputed.add(block.proj_out)
        if isinstance(block, ResBlock):
            last = block.skip_connection if isinstance(block.skip_connection, nn.Conv3d) else block.out_layers[-1]
            not_recomputed.add(last)
    recomputed = lambda m: m not in not_recomputed and (  # noqa: E731
        (checkpointing == "all" and isinstance(inside.get(m), ResBlock))
        or (checkpointing in ("attention", "all") and isinstance(inside.get(m), AttentionBlock)))
    forward = dict.fromkeys(CLASSES, 0)
    train = dict.fromkeys(CLASSES, 0)
    for module, inp, out in seen:
        if isinstance(module, (nn.Conv3d, nn.Conv1d)):
            kernel = 1
            for k in module.kernel_size:
                kernel *= k
            voxels = 1
            for n in out[2:]:
                voxels *= n
            flop = 2 * out[0] * module.out_channels * module.in_channels * kernel * voxels
            forward["conv_fprop"] += flop
            train["conv_fprop"] += flop * (2 if recomputed(module) else 1)
            train["conv_wgrad"] += flop
            train["conv_dgrad"] += 0 if module is first_conv else flop
        elif isinstance(module, nn.Linear):
            flop = 2 * inp[0] * module.in_features * module.out_features
            forward["gemm"] += flop
            train["gemm"] += flop * (2 if recomputed(module) else 1) + flop * (1 if module is first_linear else 2)
        else:  # attention: q^T k and weights x v, one head
            channels, tokens = inp[1], 1
            for n in inp[2:]:
                tokens *= n
            flop = 2 * (2 * inp[0] * tokens * tokens * channels)
            forward["gemm"] += flop
            train["gemm"] += flop * (2 if recomputed(module) else 1) + 2 * flop
    return {"forward": {"total": sum(forward.values()), **forward},
            "train_micro_batch": {"total": sum(train.values()), **train}}


@pytest.mark.parametrize("checkpointing", ["attention", "none", "all"])
def test_counter_agrees_with_the_count_from_layer_shapes(checkpointing):
    counted = unet_flops(TINY, TINY_SHAPE, checkpointing)
    expected = _independent_count(TINY, TINY_SHAPE, checkpointing)
    assert counted["forward"] == expected["forward"]
    assert counted["train_micro_batch"] == expected["train_micro_batch"]
    assert counted["forward"]["conv_dgrad"] == counted["forward"]["conv_wgrad"] == 0


def test_whole_head_counts():
    """The faithful 128^3 network: 5.54 TFLOP per forward; 16.59 TFLOP per training sample without recomputation,
    16.63 with upstream's attention recomputation (on meta tensors: nothing is computed)."""
    counted = unet_flops(paper_unet(), (128, 128, 128), "attention")
    assert counted["forward"]["total"] / 1e12 == pytest.approx(5.537, abs=1e-3)
    assert counted["train_micro_batch"]["total"] / 1e12 == pytest.approx(16.630, abs=1e-3)
    plain = unet_flops(paper_unet(), (128, 128, 128), "none")
    assert plain["train_micro_batch"]["total"] / 1e12 == pytest.approx(16.588, abs=1e-3)
    assert counted["forward"]["conv_fprop"] / counted["forward"]["total"] > 0.99
