"""What Nsight Compute's NVTX filter does with one push/pop range per dispatched operator (run under ncu; see run.sh).

A small Conv3d/GroupNorm network's forward and backward inside the process-wide range `medddpm_profiled`; with `marks`,
every aten operator (forward on this thread, backward on autograd's) is wrapped in two push/pop ranges: an outer
`first` or `repeat` (has an operator of the same signature run before?) and an inner `op<occurrence>`."""

import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class Marks(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen, self.sequence = {}, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        key = (str(func),) + tuple((tuple(a.shape), a.stride(), a.storage_offset(), str(a.dtype))
                                   if isinstance(a, torch.Tensor) else repr(a) for a in tree_flatten((args, kwargs))[0])
        first = key not in self.seen
        signature = self.seen.setdefault(key, len(self.seen))
        occurrence = len(self.sequence)
        self.sequence.append((str(func), signature, first))
        torch.cuda.nvtx.range_push("first" if first else "repeat")
        torch.cuda.nvtx.range_push(f"op{occurrence}")
        try:
            return func(*args, **kwargs)
        finally:
            torch.cuda.nvtx.range_pop()
            torch.cuda.nvtx.range_pop()


net = torch.nn.Sequential(*[torch.nn.Conv3d(8, 8, 3, padding=1) for _ in range(3)], torch.nn.GroupNorm(2, 8)).cuda()
x = torch.randn(1, 8, 16, 16, 16, device="cuda", requires_grad=True)


def step():
    net(x).square().mean().backward()


step()
torch.cuda.synchronize()
marks = Marks() if sys.argv[1] == "marks" else None
region = torch.cuda.nvtx.range_start("medddpm_profiled")
if marks:
    with marks:
        step()
else:
    step()
torch.cuda.synchronize()
torch.cuda.nvtx.range_end(region)
if marks:
    print("operators", len(marks.sequence), "signatures", len(marks.seen),
          "repeats", sum(not first for _, _, first in marks.sequence))
    for i, (name, signature, first) in enumerate(marks.sequence):
        print(f"op{i}", name, signature, "first" if first else "repeat")
