"""CUDA graphs on a CPU, for tests of the code that captures and replays them (training.StepGraph,
sampling.UNetEvaluation) where no GPU is.

`install(monkeypatch)` replaces torch.cuda's graph, stream and capturable-Adam entry points with `RecordedGraph`: the
capture records every aten operation its body runs (a TorchDispatchMode), and `replay` runs those operations again on
the same tensors. What makes a real CUDA graph hard to use right holds here too:
- a tensor that existed before the capture (a static input, a parameter, the optimizer's state) is read as it is at
  replay time, so an input not copied into its static buffer before the replay is read stale;
- what the capture made (an output, a gradient) is where every replay leaves its new value, made again by the
  recorded operations alone: a random draw or any Python made at capture time is not made again, and a gradient
  that existed at capture is added into by every replay;
- a capture computes nothing that lasts: the parameters and optimizer state it updated are put back as they were
  (a real capture only records kernels);
- reading a value to the host inside a capture fails, as on a GPU (it would be a constant of the graph).
"""

from __future__ import annotations

import contextlib
import importlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

_HOST_READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default}


class _Recorder(TorchDispatchMode):
    """Runs and records every operation; keeps a copy of each tensor from before the capture that an operation writes,
    taken before its first write."""

    def __init__(self):
        super().__init__()
        self.operations: list[tuple] = []
        self.produced: set[int] = set()  # ids of the tensors the capture made (kept alive by `operations`)
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._saved_ids: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _HOST_READS:
            raise RuntimeError(f"{func} inside a CUDA graph capture: a read to the host is not permitted while "
                               "capturing")
        for index, argument in enumerate(func._schema.arguments):
            written = argument.alias_info is not None and argument.alias_info.is_write
            value = args[index] if index < len(args) else kwargs.get(argument.name)
            for tensor in tree_flatten(value)[0] if written else ():
                if isinstance(tensor, torch.Tensor) and id(tensor) not in self.produced | self._saved_ids:
                    self._saved_ids.add(id(tensor))
                    self.saved.append((tensor, tensor.detach().clone()))
        out = func(*args, **kwargs)
        self.operations.append((func, args, kwargs, out))
        self.produced.update(id(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        return out


class RecordedGraph:
    """Stand-in for torch.cuda.CUDAGraph: filled by `graph(...)`, replayed by `replay`."""

    def __init__(self, *args, **kwargs):
        self.operations: list[tuple] = []
        self.replays = 0

    def replay(self) -> None:
        now: dict[int, torch.Tensor] = {}  # id of a tensor the capture made -> this replay's
        captured: dict[int, torch.Tensor] = {}

        def current(value):
            return now.get(id(value), value) if isinstance(value, torch.Tensor) else value

        with torch.no_grad():
            for func, args, kwargs, out in self.operations:
                result = func(*tree_map(current, args), **tree_map(current, kwargs))
                for tensor, replayed in zip(tree_flatten(out)[0], tree_flatten(result)[0]):
                    if isinstance(tensor, torch.Tensor):
                        now[id(tensor)], captured[id(tensor)] = replayed, tensor
            # The graph's memory is the capture's tensors: a replay leaves its results there (a view is written
            # through its base).
            for key, tensor in captured.items():
                if now[key] is not tensor and tensor._base is None:
                    tensor.copy_(now[key])
        self.replays += 1


@contextlib.contextmanager
def graph(recorded: RecordedGraph, pool=None, stream=None, **kwargs):
    """Stand-in for torch.cuda.graph: records the body into `recorded`, then undoes what it wrote."""
    recorder = _Recorder()
    with recorder:
        yield recorded
    with torch.no_grad():
        for tensor, before in recorder.saved:
            tensor.copy_(before)
    recorded.operations = recorder.operations


class _Stream:
    """A stream that is always done."""

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass

    def __eq__(self, other) -> bool:
        return isinstance(other, _Stream)

    __hash__ = object.__hash__


_STREAM = _Stream()


def install(monkeypatch) -> None:
    """Graphs, streams and capturable Adam on the CPU for the rest of the test (monkeypatch undoes it)."""
    adam = importlib.import_module("torch.optim.adam")  # the module (torch.optim.adam is also a function's name)
    supported = adam._get_capturable_supported_devices
    monkeypatch.setattr(adam, "_get_capturable_supported_devices",
                        lambda *args, **kwargs: [*supported(*args, **kwargs), "cpu"])
    monkeypatch.setattr(torch.cuda, "CUDAGraph", RecordedGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "Stream", lambda *args, **kwargs: _STREAM)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *args, **kwargs: _STREAM)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda *args, **kwargs: _STREAM)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
