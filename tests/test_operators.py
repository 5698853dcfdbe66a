"""Repeated operators profiled once (profiling.operators), on Nsight Compute exports recorded on an H200.

tests/fixtures/profiling/ncu_operators/ holds three raw pages of one program (a Conv3d/GroupNorm network's forward
and backward: data/measurements/h200-2026-12-04-ncu-operators/nvtx_probe.py, ncu 2025.3.1): `plain.csv` without
operator ranges, `marks.csv` with them and every kernel profiled, `exclude_repeat.csv` with them and the repeats
skipped (`--nvtx-exclude repeat/`); `exclude_repeat.log` is that run's ncu log with the program's list of calls.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import pytest

from profiling import ncu, operators
from profiling.errors import ProfilingError
from profiling.runner import profile_ncu

FIXTURES = Path(__file__).parent / "fixtures" / "profiling" / "ncu_operators"
IDENTITY = ["Kernel Name", "Context", "Stream", "Block Size", "Grid Size", "Device", "CC"]
STACK = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
DURATION = "gpu__time_duration.sum"


def recorded_calls() -> list[tuple[str, int]]:
    """The program's calls as it printed them: 'op<k> <function> <signature> first|repeat'."""
    lines = (FIXTURES / "exclude_repeat.log").read_text().splitlines()
    return [(words[1], int(words[2])) for words in map(str.split, lines) if re.fullmatch(r"op\d+", words[0])]


def kernels(text: str) -> list[dict]:
    rows = list(csv.DictReader(io.StringIO(text)))
    return [row for row in rows if row["ID"].strip()]  # the units row has no ID


def stack_without_thread(row: dict) -> str:
    return re.sub(r"^\s*\d+", "", row[STACK])


def test_skipping_repeats_then_expanding_gives_the_kernels_of_the_profile_of_every_launch():
    calls = recorded_calls()
    skipped = (FIXTURES / "exclude_repeat.csv").read_text()
    expanded, copied = operators.expand(skipped, calls)
    every = kernels((FIXTURES / "marks.csv").read_text())
    got = kernels(expanded)
    assert (len(kernels(skipped)), copied, len(got)) == (29, 30, 59) == (29, 30, len(every))
    assert [row["ID"] for row in got] == [str(i) for i in range(59)]
    for mine, theirs in zip(got, every):
        assert [mine[c] for c in IDENTITY] == [theirs[c] for c in IDENTITY]
        # the same ranges, the same call (only the thread's number differs: two processes)
        assert stack_without_thread(mine) == stack_without_thread(theirs)
    # A copy carries its first call's counters; the step's total stays that of the profile of every launch.
    total = sum(float(row[DURATION].replace(",", "")) for row in got)
    reference = sum(float(row[DURATION].replace(",", "")) for row in every)
    # 305.0 against 302.7 us (the profiles of every launch without and with the ranges: 303.6 and 302.7)
    assert total == pytest.approx(reference, rel=0.02)
    header = expanded.splitlines()[:2]
    assert header == skipped.splitlines()[:2]  # header and units row kept as ncu wrote them


def test_the_operator_ranges_change_no_kernel_of_the_step():
    plain, marked = (kernels((FIXTURES / name).read_text()) for name in ("plain.csv", "marks.csv"))
    assert [[row[c] for c in IDENTITY] for row in plain] == [[row[c] for c in IDENTITY] for row in marked]
    assert all(row[STACK] == "" for row in plain)
    assert all(f":{operators.OCCURRENCE}" in row[STACK] for row in marked)


def test_a_page_without_skipped_repeats_comes_back_byte_for_byte():
    text = (FIXTURES / "exclude_repeat.csv").read_text()
    every_call_first = [(name, call) for call, (name, _) in enumerate(recorded_calls())]
    assert operators.expand(text, every_call_first) == (text, 0)


def test_ncu_own_lines_in_a_page_are_kept_and_not_taken_for_kernels():
    text = (FIXTURES / "exclude_repeat.csv").read_text()
    lines = text.splitlines(keepends=True)
    warning = '==WARNING== a line ncu printed among the rows, "quoted" in part\n'
    expanded, copied = operators.expand("".join([*lines[:5], warning, *lines[5:]]), recorded_calls())
    assert copied == 30 and warning in expanded
    assert expanded.replace(warning, "") == operators.expand(text, recorded_calls())[0]


def test_a_kernel_outside_every_operator_range_is_refused():
    with pytest.raises(operators.ExpansionError, match="kernel 0 ran outside every operator range"):
        operators.expand((FIXTURES / "plain.csv").read_text(), recorded_calls())


def test_a_profiled_repeat_is_refused():
    with pytest.raises(operators.ExpansionError, match="not a first call"):
        operators.expand((FIXTURES / "marks.csv").read_text(), recorded_calls())


def details_page(raw_text: str) -> str:
    """A details page of the raw page's kernels, two metric rows each, in ncu's layout: the raw page's identity
    columns then Section Name, Metric Name, Metric Unit, Metric Value (built here: the probe exported no details)."""
    rows = list(csv.reader(io.StringIO(raw_text)))
    head, duration = rows[0][:13], rows[0].index(DURATION)
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(head + ["Section Name", "Metric Name", "Metric Unit", "Metric Value"])
    for row in rows[2:]:
        writer.writerow(row[:13] + ["Command line profiler metrics", DURATION, "ns", row[duration]])
        writer.writerow(row[:13] + ["Command line profiler metrics", "launch__grid_size", "", "8"])
    return out.getvalue()


def test_the_details_page_expands_kernel_by_kernel_like_the_raw_page():
    calls = recorded_calls()
    raw, _ = operators.expand((FIXTURES / "exclude_repeat.csv").read_text(), calls)
    details, copied = operators.expand(details_page((FIXTURES / "exclude_repeat.csv").read_text()), calls)
    assert copied == 30
    assert details == details_page(raw)
    ncu.check_pages_agree(raw, "raw.csv", details, "details.csv")


FAKE_NCU = """#!{python}
# Stands in for ncu: writes the report, the log and the pages recorded on the H200, and the profiled program's calls.
import json, sys
from pathlib import Path
fixtures = Path({fixtures!r})
argv = sys.argv[1:]
if "--page" in argv:
    page = (fixtures / "exclude_repeat.csv").read_text()
    print(page if argv[argv.index("--page") + 1] == "raw" else {details!r}, end="")
    sys.exit(0)
Path({argv_file!r}).write_text(json.dumps(argv))
Path(argv[argv.index("-o") + 1] + ".ncu-rep").write_text("")
spec = json.loads(Path(argv[-1]).read_text())
calls = [[line.split()[1], int(line.split()[2])] for line in (fixtures / "exclude_repeat.log").read_text().splitlines()
         if line.split()[0][2:].isdigit()]
Path(spec["operators"]).write_text(json.dumps({{"marked": True, "calls": calls}}))
print("\\n".join(line for line in (fixtures / "exclude_repeat.log").read_text().splitlines()
                if line.startswith("==PROF==")))
"""


def run_fake_ncu(tmp_path: Path, repeated_operators: str, write_calls: bool = True, marked: bool = True):
    argv_file = tmp_path / "argv.json"
    fake = tmp_path / "ncu"
    script = FAKE_NCU.format(python=sys.executable, fixtures=str(FIXTURES), argv_file=str(argv_file),
                             details=details_page((FIXTURES / "exclude_repeat.csv").read_text()))
    if not write_calls:
        script = script.replace('Path(spec["operators"]).write_text', "(lambda text: None)")
    if not marked:  # what the profiled program writes for a compiled or CUDA-graph step
        script = script.replace('"marked": True, "calls": calls', '"marked": False, "calls": []')
    fake.write_text(script)
    fake.chmod(0o755)
    settings = {"executable": str(fake), "metrics": [DURATION], "sections": [], "launch_count": None,
                "extra_args": [], "timeout_minutes": 1, "repeated_operators": repeated_operators}
    spec = {"params": {}, "variant": "tf32", "phase": "train", "dataset": str(tmp_path), "preflight": None,
            "repo": str(tmp_path), "nvtx_range": "medddpm_profiled"}
    paths = {name: tmp_path / name for name in ("ncu.ncu-rep", "raw.csv", "details.csv", "tool.log", "cond.json")}
    profile_ncu(spec, Path(__file__).parents[1] / "workflow" / "scripts", settings, *paths.values())
    return json.loads(argv_file.read_text()), paths


def test_the_profile_job_skips_repeats_and_writes_pages_that_extraction_accepts(tmp_path):
    argv, paths = run_fake_ncu(tmp_path, "once")
    # the profiled step's kernels within the profiled range, repeats excluded
    assert argv[argv.index("--nvtx-include") + 1] == "medddpm_profiled"
    assert argv[argv.index("--nvtx-exclude") + 1] == "repeat/"
    log = paths["tool.log"].read_text()
    assert (ncu.profiled_kernels(log), ncu.copied_kernels(log)) == (29, 30)
    table = ncu.checked_kernels(paths["raw.csv"], paths["tool.log"], paths["details.csv"])
    assert len(table) == 59
    assert table["name"].tolist() == [row["Kernel Name"] for row in kernels((FIXTURES / "marks.csv").read_text())]


def test_without_the_calls_the_profile_job_stops_instead_of_writing_a_step_with_holes(tmp_path):
    with pytest.raises(ProfilingError, match="wrote no list of its operator calls"):
        run_fake_ncu(tmp_path, "once", write_calls=False)
    assert not (tmp_path / "raw.csv").exists()


def test_a_step_that_was_not_marked_keeps_the_pages_as_ncu_wrote_them(tmp_path):
    _, paths = run_fake_ncu(tmp_path, "once", marked=False)
    assert paths["raw.csv"].read_text() == (FIXTURES / "exclude_repeat.csv").read_text()
    assert ncu.copied_kernels(paths["tool.log"].read_text()) == 0


def test_every_kernel_profiled_passes_no_exclude_filter(tmp_path):
    argv, _ = run_fake_ncu(tmp_path, "every", write_calls=False)
    assert "--nvtx-exclude" not in argv


def test_the_marks_record_every_operator_of_a_medddpm_training_step_and_change_nothing_it_computes():
    """The marking mode around the embedded default's U-Net at 16^3 on this machine's CPU, placed as a variant with
    every block checkpointed (the backward recomputes the forward) and channels-last: the same loss and gradients as
    without it, and calls that repeat (the ranges are CUDA's: left out here)."""
    import contextlib

    import torch
    import yaml

    from medddpm.build import build_diffusion
    from medddpm.placement import Placement
    from medddpm.switches import Variant

    config = yaml.safe_load((Path(__file__).parents[1] / "config.yaml").read_text())
    variant = Variant(name="v", cudnn_tf32=False, matmul_tf32=False, channels_last=True, checkpointing="all")

    def step(mark: bool):
        diffusion = Placement(variant, torch.device("cpu")).model(
            build_diffusion(config["model"], config["diffusion"], seed=0))
        x, condition, noise = (torch.randn(shape, generator=torch.Generator().manual_seed(seed))
                               for seed, shape in enumerate([(1, 1, 16, 16, 16), (1, 2, 16, 16, 16), (1, 1, 16, 16, 16)]))
        marks = operators.operator_marks(nvtx=False) if mark else None
        with marks or contextlib.nullcontext():
            loss = diffusion.loss_at(x, condition, torch.tensor([3]), noise)
            loss.backward()
        return loss.detach(), [p.grad for p in diffusion.parameters()], marks

    plain_loss, plain_grads, _ = step(False)
    loss, grads, marks = step(True)
    assert torch.equal(loss, plain_loss)
    assert all(torch.equal(a, b) for a, b in zip(grads, plain_grads))
    signatures = {index for _, index in marks.calls}
    assert len(marks.calls) > 2 * len(signatures) > 0  # most calls repeat one before them
    assert any("convolution_backward" in name for name, _ in marks.calls)  # autograd's calls are marked too
    assert len(signatures) == len(marks.signatures)


def test_repeats_once_with_a_launch_count_is_refused_in_one_line():
    """A step cut after N kernels has no later calls to copy the first calls' kernels to."""
    import copy

    import yaml

    from planning.configcheck import ConfigError
    from planning.ncu import ncu_settings

    repo = Path(__file__).parents[1]
    config = yaml.safe_load((repo / "config.yaml").read_text())
    assert ncu_settings(config, repo, "h200", "train")["repeated_operators"] == "once"
    every = copy.deepcopy(config)
    every["profiling"]["ncu"]["repeated_operators"] = "every"
    assert ncu_settings(every, repo, "h200", "train")["repeated_operators"] == "every"
    once = copy.deepcopy(config)
    once["profiling"]["ncu"]["launch_count"] = 40
    with pytest.raises(ConfigError, match=r"launch_count 40 with repeated_operators: once .* fix: set "
                                          r"repeated_operators: every"):
        ncu_settings(once, repo, "h200", "sample")


def test_only_eager_one_process_steps_on_a_gpu_are_marked():
    """A compiled step's Triton kernels and a CUDA graph's replays run outside the dispatcher: no operator range would
    hold them, so their profiles keep every kernel."""
    import torch

    from medddpm.placement import Placement
    from medddpm.switches import Variant

    def placed(device: str, **switches) -> bool:
        variant = Variant(name="v", cudnn_tf32=True, matmul_tf32=True, channels_last=False, **switches)
        return operators.markable(Placement(variant, torch.device(device)))

    assert placed("cuda") and placed("cuda", cudnn_benchmark=True, fused_adam=True, foreach_ema=True)
    assert not placed("cpu")  # no NVTX on a CPU
    assert not placed("cuda", compile="default")
    assert not placed("cuda", fused_norm_act=True)  # the norm compiled on its own
    assert not placed("cuda", cuda_graphs=True)
    assert not placed("cuda", cuda_graph_training=True)
    assert not placed("cuda", data_parallel=2)


def test_a_signature_tells_apart_what_changes_the_kernels_or_their_data():
    """The same function on tensors of the same shape, strides, offset, dtype, device and alignment, with the same
    other arguments, is one signature; a change of any of them is another."""
    import torch

    add = torch.ops.aten.add.Tensor
    x, y = torch.ones(4, 6), torch.ones(4, 6)
    base = operators.signature(add, (x, y), {})
    assert operators.signature(add, (torch.zeros(4, 6), y), {}) == base  # values do not count
    storage = torch.ones(64)
    others = [
        operators.signature(torch.ops.aten.mul.Tensor, (x, y), {}),  # the function
        operators.signature(add, (torch.ones(6, 4), y), {}),  # a shape
        operators.signature(add, (torch.ones(6, 4).t(), y), {}),  # the strides (same shape)
        operators.signature(add, (storage[8:32].view(4, 6), y), {}),  # the storage offset (aligned alike)
        operators.signature(add, (storage[1:25].view(4, 6), y), {}),  # the data's alignment
        operators.signature(add, (x.double(), y), {}),  # the dtype
        operators.signature(add, (torch.ones(4, 6, device="meta"), y), {}),  # the device
        operators.signature(add, (x, y), {"alpha": 2}),  # another argument's value
    ]
    assert len({base, *others}) == len(others) + 1


def test_the_marks_push_a_first_or_repeat_range_around_each_call_and_run_it_unchanged(monkeypatch):
    """With NVTX (CUDA's, replaced here by a recorder): every call inside 'first' or 'repeat' and its own 'op<k>',
    popped after it; a call's keyword arguments reach the function."""
    import torch

    pushed = []

    class Recorder:
        @staticmethod
        def range_push(message):
            pushed.append(message)

        @staticmethod
        def range_pop():
            pushed.append("pop")

    monkeypatch.setattr(torch.cuda, "nvtx", Recorder)
    x, y = torch.ones(3), torch.full((3,), 2.0)
    x2, y2 = x[:2], y[:2]  # sliced before: a slice is an operator call too
    with operators.operator_marks(nvtx=True) as marks:
        first, again = torch.add(x, y), torch.add(x, y)
        other = torch.mul(x, y)  # the same arguments, another function
        scaled = torch.add(x, y, alpha=3)  # the same tensors, another keyword argument
        shorter = torch.add(x2, y2)  # the same function, other tensors
    assert torch.equal(first, torch.full((3,), 3.0)) and torch.equal(again, first) and torch.equal(other, y)
    assert torch.equal(scaled, torch.full((3,), 7.0)) and torch.equal(shorter, first[:2])
    assert marks.calls == [("aten.add.Tensor", 0), ("aten.add.Tensor", 0), ("aten.mul.Tensor", 1),
                           ("aten.add.Tensor", 2), ("aten.add.Tensor", 3)]
    assert pushed == [word for k, kind in enumerate(["first", "repeat", "first", "first", "first"])
                      for word in (kind, f"op{k}", "pop", "pop")]


def test_the_calls_file_keeps_the_calls_and_whether_the_step_was_marked(tmp_path):
    calls = [("aten.add.Tensor", 0), ("aten.add.Tensor", 0), ("aten.mul.Tensor", 1)]
    operators.write_calls(tmp_path / "calls.json", calls)
    assert json.loads((tmp_path / "calls.json").read_text()) == {"marked": True, "calls": [list(c) for c in calls]}
    assert operators.read_calls(tmp_path / "calls.json") == calls
    operators.write_calls(tmp_path / "unmarked.json", None)
    assert json.loads((tmp_path / "unmarked.json").read_text()) == {"marked": False, "calls": []}
    assert operators.read_calls(tmp_path / "unmarked.json") is None


def test_a_page_that_is_not_an_export_with_operator_ranges_is_refused_in_one_line():
    raw = (FIXTURES / "exclude_repeat.csv").read_text()
    with pytest.raises(operators.ExpansionError, match=r"^no header row with an 'ID' column$"):
        operators.expand(raw.replace('"ID"', '"Id"'), recorded_calls())
    with pytest.raises(operators.ExpansionError, match=r"^no NVTX push/pop column: profiled without --nvtx\?$"):
        operators.expand(raw.replace("Push/Pop_Range", "Push_Range"), recorded_calls())


def test_a_profiled_first_range_of_a_call_that_repeats_an_earlier_one_is_refused():
    """The pages and the list of calls disagree: a call profiled as the first of its signature which the list says
    repeats an earlier call."""
    calls = recorded_calls()
    stacks = [row[STACK] for row in kernels((FIXTURES / "exclude_repeat.csv").read_text())]
    profiled = sorted({int(re.search(r":op(\d+):", stack)[1]) for stack in stacks})
    assert len(profiled) > 1 and all(":first:" in stack for stack in stacks)
    stray = profiled[-1]
    calls[stray] = (calls[stray][0], calls[profiled[0]][1])
    with pytest.raises(operators.ExpansionError, match=rf"^kernels of calls \[{stray}\] are profiled, but those calls "
                                                       r"repeat an earlier one"):
        operators.expand((FIXTURES / "exclude_repeat.csv").read_text(), calls)
