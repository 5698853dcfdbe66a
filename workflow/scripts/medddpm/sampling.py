"""The U-Net evaluation of one sampling step under a variant: plain, compiled, or replayed from a CUDA graph."""

from __future__ import annotations

import torch

from .diffusion import GaussianDiffusion
from .switches import Variant


class UNetEvaluation:
    """Callable as ``GaussianDiffusion.denoise`` (x, condition, t) -> predicted noise, for `p_sample(denoise=...)`.

    With `cuda_graphs` on a CUDA device, the first call for a given input shape captures the evaluation (the
    concatenation with the mask included) into a CUDA graph after a few warm-up runs on a side stream (cuDNN
    autotuning and torch.compile happen there, not in the graph); later calls copy their inputs into the graph's
    static buffers and replay it. The returned tensor is then the graph's static output, overwritten by the next
    replay: callers use it before evaluating again (`p_sample` does). Elsewhere it is `diffusion.denoise` itself.
    Call it under the autocast state it will replay under and without gradients, as the sampling loop does.
    """

    WARMUP_RUNS = 3

    def __init__(self, diffusion: GaussianDiffusion, variant: Variant, device: torch.device):
        self.diffusion = diffusion
        self.graphs = bool(variant.cuda_graphs) and device.type == "cuda"
        self._graph: torch.cuda.CUDAGraph | None = None
        self._key: tuple | None = None
        self._static: tuple[torch.Tensor, ...] = ()
        self._out: torch.Tensor | None = None
        self.captures = 0

    @staticmethod
    def _signature(*tensors: torch.Tensor) -> tuple:
        return tuple((t.shape, t.stride(), t.dtype, t.device) for t in tensors)

    @torch.no_grad()
    def __call__(self, x: torch.Tensor, condition: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if not self.graphs:
            return self.diffusion.denoise(x, condition, t)
        if self._signature(x, condition, t) != self._key:
            self._capture(x, condition, t)
        for static, value in zip(self._static, (x, condition, t)):
            static.copy_(value)
        self._graph.replay()
        return self._out

    def _capture(self, x: torch.Tensor, condition: torch.Tensor, t: torch.Tensor) -> None:
        static = tuple(v.clone() for v in (x, condition, t))  # clone keeps the memory format
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.WARMUP_RUNS):
                self.diffusion.denoise(*static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.diffusion.denoise(*static)
        self._graph, self._static, self._out = graph, static, out
        self._key = self._signature(x, condition, t)
        self.captures += 1
