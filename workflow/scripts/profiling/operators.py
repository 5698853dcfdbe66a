"""Each repeated operator of a profiled step profiled once (profiling.ncu `repeated_operators: once`).

Nsight Compute replays every kernel once per pass of its metric set, so its time grows with the kernels of the step
(about 0.33 s per kernel for the sampling set on an H200, 0.035 s for the training set), not with their size. One
U-Net evaluation calls the same operator on the same shapes many times (533 kernels of tf32's sampling step, 4,068
of its training step), and an operator called again with the same signature launches the same kernels on the same
amount of data: the same aten function with, for every argument, a tensor's shape, strides, storage offset, dtype,
device and the alignment of its data (vectorised elementwise kernels choose their width by it), or any other
argument's value. Its kernels' counters are the first call's, up to measurement noise.

So the profiled program (profiling.target) wraps every operator the dispatcher runs, forward and backward (autograd's
thread included: the dispatch mode travels with the backward), in two NVTX push/pop ranges: `FIRST` or `REPEAT`
around `OCCURRENCE<k>` (its place in the step), and writes the step's calls with their signatures. ncu skips kernels
inside a REPEAT range (`--nvtx-exclude REPEAT/`; measured on an H200 with ncu 2025.3.1: an excluded outer range
drops the kernels of the ranges nested in it). `expand` then rebuilds both exported pages as ncu would have written
them for every launch: each repeat's kernels copied from its signature's first call, in launch order, renumbered,
and named REPEAT/OCCURRENCE<k> in the NVTX column, as a profile of every kernel with the same ranges shows them.
Checked on an H200 for a small network's forward and backward (data/measurements/h200-2026-12-04-ncu-operators): the
ranges change no kernel, and the expanded page lists the kernels of the profile of every launch in the same order.

Only eager steps are marked (`markable`): a compiled step's Triton kernels and a CUDA graph's replayed kernels are
launched outside the dispatcher, where no operator range would hold them; their profiles keep every kernel.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

# The names the probe of ncu's filter recorded (data/measurements/h200-2026-12-04-ncu-operators/nvtx_probe.py), whose
# exports tests/test_operators.py expands: nothing else in the profiled program pushes NVTX ranges.
FIRST = "first"
REPEAT = "repeat"
OCCURRENCE = "op"
NCU_EXCLUDE = f"{REPEAT}/"  # ncu's form for a push/pop range (profiling.ncu.build_command explains the slash)
# A kernel's push/pop stack in ncu's CSV pages: '<thread>  "<domain>:<range>:none:..."  "<domain>:<range>:..." ',
# outermost first (recorded on the H200).
_OCCURRENCE = re.compile(rf':{OCCURRENCE}(\d+):')
_FIRST_IN_STACK = f":{FIRST}:"


def markable(placement) -> bool:
    """Whether every kernel of the step placed so (a medddpm.placement.Placement: the variant on its device) is
    launched inside an operator the dispatcher runs (eager, one process, no CUDA graph), so that its repeated
    operators can be profiled once."""
    variant = placement.variant
    return (placement.device.type == "cuda" and not placement.compiles and not variant.cuda_graphs
            and not variant.cuda_graph_training and variant.data_parallel == 1)


def signature(func, args: tuple, kwargs: dict) -> tuple:
    """What decides the kernels an operator call launches and the data they move (module docstring)."""
    import torch
    from torch.utils._pytree import tree_flatten

    parts: list = [str(func)]
    for value in tree_flatten((args, kwargs))[0]:
        if isinstance(value, torch.Tensor):
            parts.append((tuple(value.shape), value.stride(), value.storage_offset(), str(value.dtype),
                          str(value.device), value.data_ptr() % 16))
        else:
            parts.append(repr(value))
    return tuple(parts)


def operator_marks(nvtx: bool = True):
    """A TorchDispatchMode that marks every operator call (module docstring); `calls` lists (function, signature
    index) in call order afterwards. `nvtx` False records the calls without ranges (a CPU build has no NVTX)."""
    import contextlib

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    def ranges(first: bool, call: int):
        if not nvtx:
            return contextlib.nullcontext()
        return _ranges(torch.cuda.nvtx, FIRST if first else REPEAT, f"{OCCURRENCE}{call}")

    class OperatorMarks(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.signatures: dict[tuple, int] = {}
            self.calls: list[tuple[str, int]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            key = signature(func, args, kwargs)
            first = key not in self.signatures
            index = self.signatures.setdefault(key, len(self.signatures))
            call = len(self.calls)
            self.calls.append((str(func), index))
            with ranges(first, call):
                return func(*args, **kwargs)

    return OperatorMarks()


class _ranges:
    """Two nested NVTX push/pop ranges on the calling thread."""

    def __init__(self, nvtx, outer: str, inner: str):
        self.nvtx, self.outer, self.inner = nvtx, outer, inner

    def __enter__(self):
        self.nvtx.range_push(self.outer)
        self.nvtx.range_push(self.inner)

    def __exit__(self, *exc):
        self.nvtx.range_pop()
        self.nvtx.range_pop()


def write_calls(path: Path, calls: list[tuple[str, int]] | None) -> None:
    """The step's calls for `expand` (None: the step was not marked)."""
    record = {"marked": calls is not None, "calls": calls or []}
    Path(path).write_text(json.dumps(record))


def read_calls(path: Path) -> list[tuple[str, int]] | None:
    """The step's calls, None where it was not marked."""
    record = json.loads(Path(path).read_text())
    return [(name, int(index)) for name, index in record["calls"]] if record["marked"] else None


class ExpansionError(ValueError):
    """The pages do not fit the step's recorded calls (the message says how)."""


def expand(page_text: str, calls: list[tuple[str, int]]) -> tuple[str, int]:
    """One exported page (raw or details: both hold a kernel's rows under its ID, with the NVTX push/pop stack in the
    column ncu names so) rebuilt for every launch of the step; returns it and the number of kernels copied. The text
    of every row is ncu's own but for the ID, which runs 0, 1, 2, ... again, and a copy's NVTX stack; the rows before
    the first kernel (header, units) are kept as they are."""
    # ncu's own lines (==WARNING==, ==PROF==) are no CSV: kept, ahead of the rows, as every reader skips them
    lines = io.StringIO(page_text).readlines()
    own = [line for line in lines if line.startswith("==")]
    records = list(_records("".join(line for line in lines if not line.startswith("=="))))
    header_at = next((i for i, (row, _) in enumerate(records) if row and row[0] == "ID"), None)
    if header_at is None:
        raise ExpansionError("no header row with an 'ID' column")
    nvtx = next((i for i, name in enumerate(records[header_at][0]) if "Push/Pop_Range" in name), None)
    if nvtx is None:
        raise ExpansionError("no NVTX push/pop column: profiled without --nvtx?")
    lead = own + [text for _, text in records[: header_at + 1]]
    kernels: list[tuple[str, str, list[str]]] = []  # (ID, NVTX stack, its rows' text) in the page's order
    for row, text in records[header_at + 1:]:
        if not row or not row[0].strip():  # the raw page's units row
            lead.append(text)
        elif kernels and kernels[-1][0] == row[0]:
            kernels[-1][2].append(text)
        else:
            kernels.append((row[0], row[nvtx] if len(row) > nvtx else "", [text]))
    by_call: dict[int, list[tuple[str, list[str]]]] = {}  # first call -> its kernels' (NVTX stack, rows' text)
    for kernel_id, stack, texts in kernels:
        found = _OCCURRENCE.findall(stack)
        if not found:
            raise ExpansionError(f"kernel {kernel_id} ran outside every operator range, so its place among the "
                                 "skipped repeats is unknown")
        call = int(found[-1])
        if call >= len(calls) or _FIRST_IN_STACK not in stack:
            raise ExpansionError(f"kernel {kernel_id} belongs to call {call}, which is not a first call of the "
                                 f"{len(calls)} recorded (a repeat was profiled: ncu's exclude filter missing?)")
        by_call.setdefault(call, []).append((stack, texts))
    first_call: dict[int, int] = {}  # signature -> its first call
    out_kernels: list[list[str]] = []
    copied = 0
    for call, (_, index) in enumerate(calls):
        if index not in first_call:
            first_call[index] = call
            out_kernels += [texts for _, texts in by_call.get(call, [])]
            continue
        first = first_call[index]
        for stack, texts in by_call.get(first, []):
            copied += 1
            cell, repeat_cell = _csv_cell(stack), _csv_cell(_as_repeat(stack, first, call))
            if cell not in texts[0]:
                raise ExpansionError(f"kernel {_ID.match(texts[0])[0]}'s NVTX cell is not written as {cell[:40]}...")
            out_kernels.append([text.replace(cell, repeat_cell, 1) for text in texts])
    strays = sorted(set(by_call) - set(first_call.values()))
    if strays:
        raise ExpansionError(f"kernels of calls {strays[:5]} are profiled, but those calls repeat an earlier one")
    numbered = (_ID.sub(f'"{number}"', text, count=1) for number, texts in enumerate(out_kernels) for text in texts)
    return "".join(lead) + "".join(numbered), copied


_ID = re.compile(r'^"\d+"')


def _records(text: str):
    """(parsed row, its exact text) of each CSV record, a record's text being the lines the reader took for it."""
    taken: list[str] = []

    def lines():
        for line in io.StringIO(text):
            taken.append(line)
            yield line

    for row in csv.reader(lines(), strict=True):
        yield row, "".join(taken)
        taken.clear()


def _as_repeat(stack: str, first: int, call: int) -> str:
    """A first call's kernel's NVTX stack as the same kernel of a later call (`call`) shows in a profile of every
    launch."""
    return stack.replace(_FIRST_IN_STACK, f":{REPEAT}:").replace(f":{OCCURRENCE}{first}:", f":{OCCURRENCE}{call}:")


def _csv_cell(value: str) -> str:
    """A cell as ncu writes it: quoted, its quotes doubled."""
    return '"' + value.replace('"', '""') + '"'
