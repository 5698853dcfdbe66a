"""Operator calls and distinct signatures (profiling.operators' marks, without NVTX) of the paper network's training
work (two micro-batches' forward and backward, an Adam step) and of one U-Net evaluation, on a CPU at SIZE^3.
Usage, from the repository root: python3 data/measurements/h200-2026-12-04-ncu-operators/operator_count.py SIZE"""

import collections
import sys
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "workflow" / "scripts"))
from medddpm.build import build_diffusion  # noqa: E402
from profiling.operators import operator_marks  # noqa: E402

size = int(sys.argv[1])
model = {**yaml.safe_load((REPO / "config.yaml").read_text())["model"], "base_width": 64}  # config/paper.yaml's
diffusion = build_diffusion(model, {"timesteps": 250}, 0)
print("parameters", sum(p.numel() for p in diffusion.parameters()))
x, condition = torch.randn(1, 1, size, size, size), torch.randn(1, 2, size, size, size)
optimizer = torch.optim.Adam(diffusion.parameters(), lr=1e-5)
with operator_marks(nvtx=False) as marks:
    for _ in range(2):
        diffusion.loss(x, condition).backward()
    optimizer.step()
    optimizer.zero_grad()
print("training: calls", len(marks.calls), "signatures", len(marks.signatures))
with torch.no_grad(), operator_marks(nvtx=False) as marks:
    diffusion.denoise(x, condition, torch.tensor([100]))
print("evaluation: calls", len(marks.calls), "signatures", len(marks.signatures))
by_function = collections.Counter({index: name for name, index in marks.calls}.values())
print("evaluation's signatures by function:", by_function.most_common(6))
