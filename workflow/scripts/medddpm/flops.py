"""FLOPs of the U-Net, counted once: one forward (a sampling step) and one training micro-batch.

Counted by PyTorch's FLOP counter (`torch.utils.flop_counter.FlopCounterMode`) on meta tensors, so nothing is
computed and the whole-head 128^3 network is counted in seconds on any machine. The counter's formulas count
multiply-adds as two FLOPs in convolutions and matrix products only (element-wise work, norms and softmax are
not counted: under 1 % here). Its convolution-backward count holds both gradients; it is split here into the
data gradient (dgrad) and the weight gradient (wgrad) with the counter's own formula, one output at a time.
The first convolution gets no data gradient: its input (noisy image and mask) needs none.
"""

from __future__ import annotations

from collections import Counter

import torch

from .unet import UNet3D, UNetConfig, set_checkpointing

CLASSES = ("conv_fprop", "conv_dgrad", "conv_wgrad", "gemm", "other")
_aten = torch.ops.aten
_GEMM = {_aten.mm, _aten.addmm, _aten.bmm, _aten.baddbmm}
OUTPUT_MASK = 10  # position of output_mask in aten.convolution_backward's arguments


class _ClassCounter:
    """FLOPs per kernel class, filled by the counter's formulas as it sees each operation."""

    def __init__(self):
        self.flops: Counter = Counter()

    def mapping(self) -> dict:
        """A custom mapping for FlopCounterMode: the registry's formulas, each also adding to its class. The
        registry's entries take the operation's raw arguments (they convert tensors to shapes themselves), so the
        wrappers are marked raw too."""
        from torch.utils import flop_counter  # imported where counted: it imports Triton, where installed

        registry = flop_counter.flop_registry
        counter = self

        def counted(op, name):
            formula = registry[op]

            def wrapped(*args, **kwargs):
                flops = formula(*args, **kwargs)
                counter.flops[name] += flops
                return flops

            wrapped._get_raw = True
            return wrapped

        def convolution_backward(*args, **kwargs):
            formula = registry[_aten.convolution_backward]
            args = list(args)
            positional = len(args) > OUTPUT_MASK
            mask = args[OUTPUT_MASK] if positional else kwargs["output_mask"]
            total = 0
            for index, name in ((0, "conv_dgrad"), (1, "conv_wgrad")):
                single = [i == index and bool(mask[i]) for i in range(3)]
                if positional:
                    args[OUTPUT_MASK] = single
                else:
                    kwargs["output_mask"] = single
                flops = formula(*args, **kwargs)
                counter.flops[name] += flops
                total += flops
            return total

        convolution_backward._get_raw = True
        mapping = {op: counted(op, "gemm" if op in _GEMM else "other") for op in registry}
        mapping[_aten.convolution] = counted(_aten.convolution, "conv_fprop")
        mapping[_aten._convolution] = counted(_aten._convolution, "conv_fprop")
        mapping[_aten.convolution_backward] = convolution_backward
        return mapping


def _count(run) -> dict:
    from torch.utils import flop_counter

    classes = _ClassCounter()
    with flop_counter.FlopCounterMode(display=False, custom_mapping=classes.mapping()) as mode:
        run()
    by_class = {name: int(classes.flops.get(name, 0)) for name in CLASSES}
    total = int(mode.get_total_flops())
    if sum(by_class.values()) != total:
        raise AssertionError(f"FLOP classes {by_class} do not add up to the counter's total {total}")
    return {"total": total, **by_class}


def unet_flops(unet: UNetConfig, shape: tuple[int, int, int], checkpointing: str = "attention",
               batch: int = 1) -> dict:
    """FLOPs of one U-Net forward and of one training micro-batch (forward, backward and the forward recomputed in
    backward by `checkpointing`) at volume `shape`, per kernel class, on meta tensors."""
    with torch.device("meta"):
        model = UNet3D(unet)
    set_checkpointing(model, checkpointing)
    x = torch.empty(batch, unet.in_channels, *shape, device="meta")
    t = torch.zeros(batch, dtype=torch.long, device="meta")

    def forward():
        with torch.no_grad():
            model(x, t)

    def train():
        model(x, t).abs().mean().backward()

    return {"forward": _count(forward), "train_micro_batch": _count(train), "shape": list(shape), "batch": batch,
            "checkpointing": checkpointing}


def step_flops(unet: UNetConfig, shape: tuple[int, int, int], checkpointing: str) -> dict:
    """What a training job records next to its step time (train.json's `flops`): the FLOPs of the model (no
    recomputation; its forward is a sampling step's) and as executed under the run's `checkpointing`, at the volume
    it trained on. The bench and the workload table read them there, without PyTorch."""
    model = unet_flops(unet, shape, "none")
    return {"model": model, "executed": model if checkpointing == "none" else unet_flops(unet, shape, checkpointing)}
