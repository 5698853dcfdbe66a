"""FLOP counts of the U-Net (medddpm.flops) against a count written here from the layer shapes alone."""

import pytest
import torch
from torch import nn

from config_settings import paper_unet
from medddpm import flops
from medddpm.flops import CLASSES, step_flops, unet_flops
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


def test_the_record_names_its_volume_batch_and_recomputation_and_counts_per_sample_times_the_batch(capsys):
    """Without `checkpointing` the count is upstream's (attention recomputed); a batch of two counts every product
    twice (each layer's FLOPs are proportional to the batch); counting prints no table."""
    default = unet_flops(TINY, TINY_SHAPE)
    expected = _independent_count(TINY, TINY_SHAPE, "attention")
    assert default["forward"] == expected["forward"] and default["train_micro_batch"] == expected["train_micro_batch"]
    assert default["shape"] == list(TINY_SHAPE) and default["batch"] == 1 and default["checkpointing"] == "attention"
    two = unet_flops(TINY, TINY_SHAPE, "none", batch=2)
    plain = _independent_count(TINY, TINY_SHAPE, "none")
    assert two["batch"] == 2 and two["checkpointing"] == "none"
    for part in ("forward", "train_micro_batch"):
        assert two[part] == {name: 2 * value for name, value in plain[part].items()}, part
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("checkpointing", ["none", "all"])
def test_a_training_jobs_flops_are_the_models_and_those_executed_under_its_recomputation(checkpointing, monkeypatch):
    """Counted once where nothing is recomputed (the model's count is then the executed one), twice otherwise."""
    counts = []
    monkeypatch.setattr(flops, "unet_flops", lambda *args: counts.append(args[2]) or unet_flops(*args))
    recorded = step_flops(TINY, TINY_SHAPE, checkpointing)
    assert counts == (["none"] if checkpointing == "none" else ["none", checkpointing])
    model, executed = _independent_count(TINY, TINY_SHAPE, "none"), _independent_count(TINY, TINY_SHAPE,
                                                                                         checkpointing)
    for name, expected in (("model", model), ("executed", executed)):
        for part in ("forward", "train_micro_batch"):
            assert recorded[name][part] == expected[part], (name, part)
    assert recorded["model"]["checkpointing"] == "none" and recorded["executed"]["checkpointing"] == checkpointing
    assert recorded["model"]["shape"] == recorded["executed"]["shape"] == list(TINY_SHAPE)
    if checkpointing == "all":  # the recomputed forward is work done, not the model's
        assert recorded["executed"]["train_micro_batch"]["total"] > recorded["model"]["train_micro_batch"]["total"]


def _meta(*shape):
    return torch.empty(*shape, device="meta")


def _attention():
    """An attention kernel the counter has a formula of its own for: batch 2, 3 heads, 5 queries, 7 keys, key
    width 4, value width 6: 2 B H S_q S_k (D + D_v) FLOPs."""
    return torch.ops.aten._scaled_dot_product_efficient_attention(_meta(2, 3, 5, 4), _meta(2, 3, 7, 4),
                                                                   _meta(2, 3, 7, 6), None, False)


ATTENTION = 2 * 2 * 3 * 5 * 7 * (4 + 6)


def test_each_operation_the_counter_knows_goes_to_its_class():
    """A product, both of the counter's forward convolutions, and an attention kernel of its own (neither a
    product nor a convolution: "other"), with their FLOPs written out: 2 m k n for a product, 2 N C_out C_in k^3
    per output voxel for a convolution, 2 B H S_q S_k (D + D_v) for attention."""
    x, w = _meta(2, 3, 6, 6, 6), _meta(4, 3, 3, 3, 3)
    conv = 2 * 2 * 4 * 3 * 27 * 6**3
    runs = [
        ("gemm", lambda: torch.mm(_meta(5, 7), _meta(7, 9)), 2 * 5 * 7 * 9),
        ("conv_fprop", lambda: torch.nn.functional.conv3d(x, w, padding=1), conv),
        # aten._convolution, which torch._convolution dispatches to without going through aten.convolution
        ("conv_fprop", lambda: torch._convolution(x, w, None, [1] * 3, [1] * 3, [1] * 3, False, [0] * 3, 1, False,
                                                  False, True, True), conv),
        ("other", _attention, ATTENTION),
    ]
    for index, (label, run, expected) in enumerate(runs):
        counted = flops._count(run)
        assert counted == {"total": expected, **{name: expected if name == label else 0 for name in CLASSES}}, index


def test_a_class_the_table_leaves_out_makes_the_count_refuse(monkeypatch):
    """The classes must add up to the counter's total: an operation counted in a class the table does not list
    (here "other", taken out of it) is an error naming both sums, not a silently smaller breakdown."""
    monkeypatch.setattr(flops, "CLASSES", tuple(name for name in CLASSES if name != "other"))
    with pytest.raises(AssertionError, match=rf"FLOP classes .* do not add up to the counter's total {ATTENTION}"):
        flops._count(_attention)


@pytest.mark.parametrize("mask, dgrad", [([True, True, False], True), ([False, True, True], False)])
def test_the_convolution_backward_is_split_into_data_and_weight_gradients_however_its_mask_is_passed(mask, dgrad):
    """The counter's convolution backward, given its output mask as the operation's eleventh argument or by name:
    the data gradient and the weight gradient each cost the forward's 2 N C_out C_in k^3 per output voxel, the data
    gradient nothing where the mask asks for none (the bias gradient, the mask's third entry, costs none)."""
    conv = 2 * 2 * 4 * 3 * 27 * 6**3
    x, w, grad_out = _meta(2, 3, 6, 6, 6), _meta(4, 3, 3, 3, 3), _meta(2, 4, 6, 6, 6)
    arguments = [grad_out, x, w, None, [1] * 3, [1] * 3, [1] * 3, False, [0] * 3, 1]
    out = (_meta(2, 3, 6, 6, 6), _meta(4, 3, 3, 3, 3), None)
    expected = {"conv_dgrad": conv if dgrad else 0, "conv_wgrad": conv}
    for positional in (True, False):
        classes = flops._ClassCounter()
        backward = classes.mapping()[torch.ops.aten.convolution_backward]
        if positional:
            total = backward(*arguments, list(mask), out_val=out)
        else:
            total = backward(*arguments, output_mask=list(mask), out_val=out)
        assert total == sum(expected.values()) and dict(classes.flops) == expected, positional
