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
- reading a value to the host inside a capture fails, as on a GPU (it would be a constant of the graph);
- streams belong to a device, which has a default stream and a current one; a capture on a default stream fails, and
  a capture given no stream runs on a side stream of the current device (the CUDA device code gets when it names
  none: not the CPU the tests' tensors are on).
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
        self.capture_stream = None

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


CURRENT_DEVICE = torch.device("cuda", 0)


def _device(device) -> torch.device:
    """The device a stream is asked for, as torch.cuda reads its argument: None is the current device."""
    if device is None:
        return CURRENT_DEVICE
    device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    return torch.device(device.type, 0) if device.type == "cuda" and device.index is None else device


class _Stream:
    """A stream of one device that is always done. Each device has its own default stream and a current stream (the
    default one until `stream(...)` makes another current)."""

    def __init__(self, device, default: bool = False):
        self.device = _device(device)
        self.default = default

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other) -> None:
        # torch's wait_stream records an event on `other`: anything but a stream fails there.
        if not isinstance(other, _Stream):
            raise AttributeError(f"{type(other).__name__!r} object has no attribute 'record_event'")

    def __repr__(self) -> str:
        return f"<{'default' if self.default else 'side'} stream of {self.device} {id(self):#x}>"


class _Streams:
    """The default and current streams of every device asked for."""

    def __init__(self):
        self.defaults: dict[torch.device, _Stream] = {}
        self.now: dict[torch.device, _Stream] = {}

    def default_stream(self, device=None) -> _Stream:
        device = _device(device)
        return self.defaults.setdefault(device, _Stream(device, default=True))

    def current_stream(self, device=None) -> _Stream:
        device = _device(device)
        return self.now.get(device) or self.default_stream(device)

    @contextlib.contextmanager
    def stream(self, stream):
        """torch.cuda.stream: `stream` current on its device for the block (None: changes nothing, as in torch)."""
        if stream is None:
            yield
            return
        before = self.now.get(stream.device)
        self.now[stream.device] = stream
        try:
            yield
        finally:
            if before is None:
                self.now.pop(stream.device)
            else:
                self.now[stream.device] = before

    @contextlib.contextmanager
    def graph(self, recorded: RecordedGraph, pool=None, stream=None, **kwargs):
        """Stand-in for torch.cuda.graph: records the body into `recorded`, then undoes what it wrote. The body runs on
        `stream` (current for the capture), or where none is given on a side stream of the current device, as in
        torch; a default stream cannot capture (CUDA refuses it). `recorded.capture_stream` says which it was."""
        capture = stream if stream is not None else _Stream(None)
        if capture.default:
            raise RuntimeError(f"a CUDA graph cannot be captured on {capture}")
        recorded.capture_stream = capture
        recorder = _Recorder()
        with self.stream(capture), recorder:
            yield recorded
        with torch.no_grad():
            for tensor, before in recorder.saved:
                tensor.copy_(before)
        recorded.operations = recorder.operations


def install(monkeypatch) -> _Streams:
    """Graphs, streams and capturable Adam on the CPU for the rest of the test (monkeypatch undoes it). The current
    CUDA device is CURRENT_DEVICE, which no tensor of the tests is on: code that asks for a stream without naming the
    device its work runs on gets that device's."""
    adam = importlib.import_module("torch.optim.adam")  # the module (torch.optim.adam is also a function's name)
    supported = adam._get_capturable_supported_devices
    monkeypatch.setattr(adam, "_get_capturable_supported_devices",
                        lambda *args, **kwargs: [*supported(*args, **kwargs), "cpu"])
    streams = _Streams()
    monkeypatch.setattr(torch.cuda, "CUDAGraph", RecordedGraph)
    monkeypatch.setattr(torch.cuda, "graph", streams.graph)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None, *args, **kwargs: _Stream(device))
    monkeypatch.setattr(torch.cuda, "current_stream", streams.current_stream)
    monkeypatch.setattr(torch.cuda, "default_stream", streams.default_stream)
    monkeypatch.setattr(torch.cuda, "stream", streams.stream)
    return streams
