"""Bad input and faults: each kind the workflow is known to meet ends in one line that names the file (or the setting)
and the fix, and leaves none of the job's outputs behind. docs/troubleshooting.md lists the same cases,
by the ids used here (a test keeps the two in step).

The cases run the job scripts themselves (as Snakemake's `script:` does, with a stand-in `snakemake` object) or the
library functions the workflow calls; Snakemake itself runs only for the cases that are about Snakemake (where it is
run from, a config error before any job, a failed job stopping what depends on it), in one shared copy.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import time
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from conftest import REPO, Files, Params, copy_run, copy_workflow, random_prepared_dataset, run_script, snakemake
from watched import run_watched, start_snakemake
from test_data import BAD_INPUTS
from planning.configcheck import ConfigError, check_config, check_files, read_mapping
from jobio.errors import ExpectedError
from medddpm import checkpoints, training
from medddpm.build import ModelSpec
from reporting.results import TABLES
from snakemake.utils import update_config
from planning.plan import SHIPPED_NAMES
from measurement.provenance import device_record
from measurement.conv_checks import checks_for
from measurement.stack import stack_of

FIXTURES = REPO / "tests" / "fixtures" / "profiling"
H200_RAW = FIXTURES / "ncu_raw_h200_tiny_train_step.csv"
H200_PUSHPOP = FIXTURES / "ncu_raw_h200_tiny_train_step_pushpop.csv"
H200_DETAILS = FIXTURES / "ncu_details_h200_tiny_train_step.csv"
H200_TRACE = FIXTURES / "torch_trace_h200_tiny_train_step.json"
NSYS_KERN_SUM = FIXTURES / "nsys_cuda_gpu_kern_sum_handmade.csv"
REFERENCE = REPO / "data" / "reference" / "wholehead" / "h200"

# The tiny U-Net of tests/unet_helpers.py on 8^3 volumes: a training step takes a fraction of a second on a CPU.
MODEL = {"in_channels": 3, "out_channels": 1, "base_width": 32, "channel_mult": [1, 2], "num_res_blocks": 1,
         "attention_downsample_rates": [2], "num_heads": 1, "dropout": 0.0}
DIFFUSION = {"timesteps": 4}
SHAPE = (8, 8, 8)
CPU = {"label": "cpu", "device": "cpu", "name_pattern": None, "emulate_gpus_on_cpu": False}
BASELINE = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False}
TRAIN = {"lr": 1e-5, "gradient_accumulation": 2, "ema_decay": 0.995, "ema_update_every": 10, "ema_start_step": 2000,
         "warmup_steps": 1, "measured_steps": 1, "seed": 0, "bare_loop_steps": 0}


# --- what every case asserts -----------------------------------------------------------------------------------------


@dataclass
class Attempt:
    """What a case does (`act` must fail) and the outputs that must not exist afterwards."""

    act: Callable[[], object]
    outputs: list[Path] = field(default_factory=list)


def refusal(act: Callable[[], object]) -> str:
    """The one-line message with which `act` fails: an ExpectedError's, or a job script's exit message."""
    try:
        act()
    except ExpectedError as error:
        return str(error)
    except SystemExit as exit_:
        message = str(exit_.code)
        assert message.startswith("error: "), message
        return message.removeprefix("error: ")
    raise AssertionError("no error")


CASES: dict[str, tuple[Callable[..., Attempt], str]] = {}


def case(pattern: str):
    """Register a case: the function (its name, dashed, is the case's id) returns an Attempt; `pattern` is searched
    in the message."""

    def register(make: Callable[..., Attempt]) -> Callable[..., Attempt]:
        CASES[make.__name__.removeprefix("case_").replace("_", "-")] = (make, pattern)
        return make

    return register


# --- shared inputs ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return random_prepared_dataset(tmp_path_factory, SHAPE)


def preflight_here(folder: Path) -> Path:
    """A passed preflight record of this machine's CPU and software, every combination passed (what a timed job
    checks it against)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "preflight.json"
    checks = [{**vars(check), "name": check.name, "passed": True, "state": "passed"} for check in checks_for({})]
    path.write_text(json.dumps({"stack": stack_of(device_record(torch.device("cpu"))), "checks": checks,
                                "passed": True}))
    return path


def train_job(folder: Path, dataset: Path, train: dict | None = None, device: dict | None = None) -> Attempt:
    """workflow/scripts/train.py on the tiny workload, writing into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    out = Files(summary=folder / "train.json", steps=folder / "train_steps.csv", checkpoint=folder / "checkpoint.pt")
    params = Params(device=device or CPU, variant=BASELINE, model=MODEL, diffusion=DIFFUSION, train=train or TRAIN)
    inputs = Files(dataset=dataset, preflight=preflight_here(folder.with_name(folder.name + "-label")))
    return Attempt(lambda: run_script("train.py", params=params, wildcards=SimpleNamespace(variant="baseline"),
                                      input=inputs, output=out, log=Files(folder / "train.log")),
                   [Path(p) for p in out])


@pytest.fixture(scope="module")
def checkpoint(dataset, tmp_path_factory) -> Path:
    """A checkpoint of the tiny workload, written by the train job."""
    attempt = train_job(tmp_path_factory.mktemp("trained"), dataset)
    attempt.act()
    return attempt.outputs[2]


def sample_job(folder: Path, dataset: Path, checkpoint: Path, diffusion: dict = DIFFUSION) -> Attempt:
    """workflow/scripts/sample.py with the EMA weights of `checkpoint`."""
    out = Files(summary=folder / "sample.json", steps=folder / "sample_steps.csv",
                volumes=[folder / "samples" / "sample_000.nii.gz"])
    params = Params(device=CPU, variant=BASELINE, model=MODEL, diffusion=diffusion,
                    sample={"masks": 1, "max_steps": None, "warmup_steps": 1, "seed": 0, "batch_sizes": [1],
                            "throughput_warmup_steps": 2, "throughput_steps": 1})
    return Attempt(lambda: run_script("sample.py", params=params, wildcards=SimpleNamespace(variant="baseline"),
                                      input=Files(dataset=dataset, checkpoint=checkpoint,
                                                  preflight=preflight_here(folder.with_name(folder.name + "-label"))), output=out,
                                      log=Files(folder / "sample.log")),
                   [Path(p) for p in out])


def extract_job(folder: Path, tool: str, phase: str = "train", **inputs: Path) -> Attempt:
    """workflow/scripts/extract_profile.py on the given profiler exports (and, unless given, the conditions file of a
    quiet profiled step)."""
    if "conditions" not in inputs:
        inputs["conditions"] = folder / f"{tool}_conditions.json"
        inputs["conditions"].write_text(json.dumps({"before": {"speed_probe_ms": 9.0}, "after": {"speed_probe_ms": 9.0},
                                                    "changes": [], "other_load_cores": 0.0, "wall_ms": 1.0}))
    out = Files(kernels=folder / f"{tool}_kernels.parquet", summary=folder / f"{tool}_summary.csv")
    return Attempt(lambda: run_script("extract_profile.py", params=Params(tool=tool),
                                      wildcards=SimpleNamespace(phase=phase), input=Files(**inputs), output=out,
                                      log=Files(folder / f"extract_{phase}_{tool}.log")),
                   [Path(p) for p in out])


def ncu_log(kernels: int) -> str:
    """What ncu prints while profiling `kernels` kernels (its per-kernel progress lines)."""
    lines = ["==PROF== Connected to process 4711 (/usr/bin/python3.12)"]
    lines += [f'==PROF== Profiling "kernel_{k}" - {k}: 0%....50%....100% - 1 pass' for k in range(kernels)]
    return "\n".join(lines + ["==PROF== Disconnected from process 4711", "==PROF== Report: out.ncu-rep", ""])


DETAILS_METRIC_COLUMNS = ["Section Name", "Metric Name", "Metric Unit", "Metric Value", "Rule Name", "Rule Type",
                          "Rule Description", "Estimated Speedup Type", "Estimated Speedup"]


def details_page(raw_text: str) -> str:
    """The details page of the report whose raw page is `raw_text`, laid out as ncu writes it (as in the shipped H200
    exports): per kernel its launch columns, then one row per metric of the section "Command line profiler metrics"
    (section, metric, unit, value) ending after an empty rule name."""
    rows = list(csv.reader(io.StringIO(raw_text)))
    header, units = rows[0], rows[1]
    launch = header.index("CC") + 1
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(header[:launch] + DETAILS_METRIC_COLUMNS)
    for row in rows[2:]:
        for column in range(launch, len(header)):
            writer.writerow(row[:launch] + ["Command line profiler metrics", header[column], units[column],
                                            row[column], ""])
    return out.getvalue()


def ncu_extract(folder: Path, raw_text: str, profiled: int | None = 41, raw_name: str = "ncu_raw.csv",
                details: str | None = None, log: str | None = None, phase: str = "train") -> Attempt:
    """extract_profile.py on a raw page `raw_text` and a details page (by default that of the whole tiny H200 step),
    with a tool log saying ncu profiled `profiled` kernels (or `log` as the tool log)."""
    (folder / raw_name).write_text(raw_text)
    (folder / "ncu_details.csv").write_text(details if details is not None else details_page(H200_RAW.read_text()))
    (folder / "tool.log").write_text(log if log is not None else ncu_log(profiled))
    return extract_job(folder, "ncu", phase, raw=folder / raw_name, details=folder / "ncu_details.csv",
                       tool_log=folder / "tool.log")


def raw_lines() -> list[str]:
    return H200_RAW.read_text().splitlines(keepends=True)


def with_value(column: str, kernel: int, value: str) -> str:
    """The H200 raw page with `value` in `column` of kernel `kernel` (quoted as ncu quotes every field)."""
    lines = raw_lines()
    header, row = next(csv.reader([lines[0]])), next(csv.reader([lines[2 + kernel]]))
    row[header.index(column)] = value
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n").writerow(row)
    lines[2 + kernel] = text.getvalue()
    return "".join(lines)


def fake_profiler(folder: Path, name: str, log_text: str, code: int = 0, raw: str = "", details: str = "",
                  seconds: float = 0) -> Path:
    """An executable standing in for ncu: it writes the report, prints `log_text` and exits with `code` (after
    `seconds`); asked for a page, it prints `raw` or `details`."""
    (folder / "fake.log").write_text(log_text)
    (folder / "fake_raw.csv").write_text(raw)
    (folder / "fake_details.csv").write_text(details)
    script = folder / name
    script.write_text(f"""#!/bin/sh
case " $* " in
  *" --page raw "*) cat '{folder}/fake_raw.csv'; exit 0 ;;
  *" --page details "*) cat '{folder}/fake_details.csv'; exit 0 ;;
esac
previous=""
for argument in "$@"; do
  if [ "$previous" = "-o" ]; then : > "$argument.ncu-rep"; fi
  previous="$argument"
done
{f'sleep {seconds}' if seconds else ''}
cat '{folder}/fake.log'
exit {code}
""")
    script.chmod(0o755)
    return script


def profile_job(folder: Path, dataset: Path, executable: str | Path | None, tool: str = "ncu",
                minutes: float = 1) -> Attempt:
    """workflow/scripts/profile_tool.py for one training step of the tiny workload under `executable` (None: the
    config names none, the tool is looked for on PATH)."""
    executable = None if executable is None else str(executable)
    if tool == "ncu":
        settings = {"executable": executable, "metrics": ["gpu__time_duration.sum"], "sections": [],
                    "launch_count": None, "extra_args": [], "timeout_minutes": minutes}
        out = Files(report=folder / "ncu.ncu-rep", raw=folder / "ncu_raw.csv", details=folder / "ncu_details.csv",
                    conditions=folder / "ncu_conditions.json")
    else:
        settings = {"executable": executable, "timeout_minutes": minutes}
        out = Files(report=folder / "nsys.nsys-rep", kern_sum=folder / "nsys_kern_sum.csv",
                    conditions=folder / "nsys_conditions.json")
    params = Params(tool=tool, settings=settings, device=CPU, variant=BASELINE, model=MODEL, diffusion=DIFFUSION,
                    train={"seed": 0, "lr": 1e-5}, warmup_steps=1)
    return Attempt(lambda: run_script("profile_tool.py", params=params,
                                      wildcards=SimpleNamespace(variant="baseline", phase="train"),
                                      input=Files(dataset=dataset, preflight=preflight_here(folder.with_name(folder.name + "-label"))),
                                      output=out, log=Files(job=folder / "job.log", tool=folder / "tool.log")),
                   [Path(p) for p in out])


def config_with(tmp_path: Path, overlay: dict) -> Attempt:
    """The embedded default merged with `overlay` (written as an overlay file), checked as the workflow does."""
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(overlay))
    config = read_mapping(REPO / "config.yaml")
    update_config(config, overlay)
    return Attempt(lambda: check_config(config, REPO, [REPO / "config.yaml", path]))


# --- silent wrong results, now refused -------------------------------------------------------------------------------


@case(r"ncu raw CSV \S+ncu_raw\.csv holds 20 kernels but ncu profiled 41 \(says its log \S+tool\.log\): the export is "
      r"cut short; fix: delete it and export it again")
def case_ncu_export_cut_at_a_row_boundary(tmp_path, dataset):
    return ncu_extract(tmp_path, "".join(raw_lines()[:22]))


@case(r"ncu raw CSV \S+ is incomplete: kernel IDs must run 0, 1, 2, \.\.\.; line 13 holds '11' after kernel 9; fix:")
def case_ncu_export_with_rows_lost(tmp_path, dataset):
    lines = raw_lines()
    return ncu_extract(tmp_path, "".join(lines[:12] + lines[13:]))


@case(r"ncu raw CSV \S+ is incomplete: kernel IDs must run 0, 1, 2, \.\.\.; line 3 holds '17' as the first kernel")
def case_ncu_export_cut_at_the_top(tmp_path, dataset):
    lines = raw_lines()
    return ncu_extract(tmp_path, "".join(lines[:2] + lines[19:]))


@case(r"ncu raw CSV \S+: kernel 3 \(\S+\) has '12\.5x' in column gpu__time_duration\.sum, which is not a number; "
      r"fix: export the raw page again")
def case_ncu_duration_not_a_number(tmp_path, dataset):
    return ncu_extract(tmp_path, with_value("gpu__time_duration.sum", 3, "12.5x"))


@case(r"ncu raw CSV \S+: kernel 5 \(\S+\) has no value \('n/a'\) in column gpu__time_duration\.sum, and 1 of 41 "
      r"kernels lack it; a summary over them would be NaN; fix: profile the step again")
def case_ncu_duration_missing(tmp_path, dataset):
    return ncu_extract(tmp_path, with_value("gpu__time_duration.sum", 5, "n/a"))


@case(r"ncu raw CSV \S+: kernel 7 \(\S+\) has no value \(''\) in column sm__cycles_elapsed\.max, .*would be NaN")
def case_ncu_metric_missing(tmp_path, dataset):
    return ncu_extract(tmp_path, with_value("sm__cycles_elapsed.max", 7, ""))


@case(r"ncu raw CSV \S+: kernel 2 \(\S+\) has 'n/a;' in column sm__inst_executed\.avg\.per_cycle_active, which is "
      r"not a number")
def case_ncu_metric_not_a_number(tmp_path, dataset):
    return ncu_extract(tmp_path, with_value("sm__inst_executed.avg.per_cycle_active", 2, "n/a;"))


@case(r"ncu raw CSV \S+ has no gpu__time_duration\.sum column, which every time share is computed from; fix: keep "
      r"it in the metric set")
def case_ncu_export_without_durations(tmp_path, dataset):
    rows = list(csv.reader(io.StringIO((FIXTURES / "ncu_raw_handmade_scaled_units.csv").read_text())))
    drop = rows[0].index("gpu__time_duration.sum")
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([r[:drop] + r[drop + 1:] for r in rows])
    return ncu_extract(tmp_path, text.getvalue(), profiled=10)


@case(r"training diverged: the loss is (nan|inf) at optimizer step 2, micro-batch 0 of 2 \(numbered from 0, as the "
      r"step and loss_micro_N columns of train_steps\.csv\); nothing was written; fix: lower train\.lr \(now 1e\+30\)")
def case_loss_not_finite(tmp_path, dataset):
    return train_job(tmp_path, dataset, {**TRAIN, "lr": 1e30, "measured_steps": 2})  # step 1 is finite, step 2 not


@case(r"training diverged: the loss is inf at optimizer step 0, micro-batch 1 of 2 .*fix: lower train\.lr")
def case_loss_infinite(tmp_path, dataset, monkeypatch):
    original, calls = training.Trainer.loss, []

    def loss(self, target, condition, generator):
        calls.append(1)
        value = original(self, target, condition, generator)
        return value * float("inf") if len(calls) == 2 else value

    monkeypatch.setattr(training.Trainer, "loss", loss)
    return train_job(tmp_path, dataset)


# The sampling step of the shipped H200 baseline: a raw and a details page of one report, 412 kernels.
SAMPLE_PROFILE = REFERENCE / "baseline" / "profile" / "sample"


def real_page(page: str) -> list[str]:
    """The lines of the shipped page ("raw" or "details") of SAMPLE_PROFILE."""
    return gzip.decompress((SAMPLE_PROFILE / f"ncu_{page}.csv.gz").read_bytes()).decode().splitlines(keepends=True)


def details_up_to(kernel: int, metric_rows: int | None = None) -> str:
    """The real details page cut at a row boundary: the rows of kernels before `kernel`, and the first `metric_rows`
    rows of `kernel` itself where given."""
    lines = real_page("details")
    starts = [n for n, line in enumerate(lines) if line.startswith(f'"{kernel}",')]
    end = starts[0] + metric_rows if metric_rows is not None else starts[0]
    return "".join(lines[:end])


def ncu_rules_job(folder: Path, details_text: str, raw_text: str | None = None) -> Attempt:
    """extract_ncu_rules.py on a details page, beside the real raw page of the same report (or `raw_text`)."""
    (folder / "ncu_details.csv").write_text(details_text)
    (folder / "ncu_raw.csv").write_text(raw_text if raw_text is not None else "".join(real_page("raw")))
    out = Files(rules=folder / "ncu_rules.csv")
    return Attempt(lambda: run_script("extract_ncu_rules.py",
                                      input=Files(details=folder / "ncu_details.csv", raw=folder / "ncu_raw.csv"),
                                      output=out, log=Files(folder / "rules.log")), [Path(p) for p in out])


@case(r"ncu details CSV \S+ncu_details\.csv holds 30 kernels but the other page of the same report, \S+ncu_raw\.csv, "
      r"holds 412: ncu_details\.csv is cut short; fix: export it again from the report: ncu -i \S+ncu\.ncu-rep --csv "
      r"--page details --print-units base --print-kernel-base demangled > \S+ncu_details\.csv")
def case_ncu_details_cut_at_a_row_boundary(tmp_path, dataset):
    return ncu_rules_job(tmp_path, details_up_to(30))


@case(r"ncu details CSV \S+ncu_details\.csv is cut short: its last kernel \(411\) has 40 metric rows, where kernels "
      r"like it have \d+; fix: export it again from the report: ncu -i \S+ncu\.ncu-rep --csv --page details")
def case_ncu_details_cut_inside_its_last_kernel(tmp_path, dataset):
    return ncu_rules_job(tmp_path, details_up_to(411, metric_rows=40))


@case(r"ncu raw CSV \S+ncu_raw\.csv holds 200 kernels but the other page of the same report, \S+ncu_details\.csv, "
      r"holds 412: ncu_raw\.csv is cut short; fix: export it again from the report: ncu -i \S+ncu\.ncu-rep --csv "
      r"--page raw")
def case_ncu_export_cut_at_a_row_boundary_and_a_log_without_ncu_lines(tmp_path, dataset):
    # ncu run with --quiet or --log-file leaves no ==PROF== line in the job's tool log: the details page tells.
    return ncu_extract(tmp_path, "".join(real_page("raw")[:202]), details="".join(real_page("details")),
                       log="step 0 of 1 (profiled)\n", phase="sample")


@case(r"ncu details CSV \S+ncu_details\.csv is a raw page \(a units row under its header, no 'Section Name' and "
      r"'Metric Name' columns\), not a details page: saved under the other page's name\?; fix: export it again with "
      r"ncu -i REPORT --csv --page details")
def case_ncu_raw_page_saved_as_the_details_page(tmp_path, dataset):
    # The raw page itself is whole: the line must not call it cut short.
    return ncu_extract(tmp_path, H200_RAW.read_text(), details=H200_RAW.read_text())


@case(r"ncu raw CSV \S+ncu_raw\.csv is a details page \(it has the 'Section Name' and 'Metric Name' columns of --page "
      r"details\), not a raw page: saved under the other page's name\?; fix: export again with ncu -i REPORT --csv "
      r"--page raw")
def case_ncu_details_page_saved_as_the_raw_page(tmp_path, dataset):
    return ncu_extract(tmp_path, details_page(H200_RAW.read_text()))


# --- shipped or imported reference sets that cannot be read -----------------------------------------------------------


class Bundle(Files):
    """The collect job's outputs: one file per table of the bundle, by name (Snakemake's output has items())."""

    def items(self):
        return [(name, getattr(self, name)) for name in TABLES]


def reference_copy(root: Path, manifest: bool = True) -> Path:
    """A copy of two variants of the shipped H200 set under <root>/data/reference/wholehead/h200, with a
    manifest.sha256 of that copy (unless `manifest` is False)."""
    folder = root / "data" / "reference" / "wholehead" / "h200"
    for variant in ("baseline", "tf32"):
        shutil.copytree(REFERENCE / variant, folder / variant)
    if manifest:
        write_manifest(folder)
    return folder


def write_manifest(folder: Path) -> None:
    """sha256sum's lines for every file of the set (computed here with hashlib, not by the workflow's code)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "manifest.sha256")
    (folder / "manifest.sha256").write_text("".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(folder).as_posix()}\n" for p in files))


def collect_job(root: Path, folder: Path) -> Attempt:
    """workflow/scripts/collect_results.py reading the set in `folder` as a shipped one, writing the bundle."""
    shipped = sorted(str(p) for p in folder.rglob("*") if p.name.endswith(SHIPPED_NAMES))
    out = Bundle(**{name: root / "collected" / f"{name}.parquet" for name in TABLES})
    (root / "collected").mkdir(exist_ok=True)
    return Attempt(lambda: run_script("collect_results.py", input=Files(measured=[], shipped=shipped, references=[]),
                                      params=Params(gpus=[]), output=out, log=Files(root / "collect.log")),
                   [Path(p) for p in out])


@case(r"\S+/h200/baseline/train\.json: not a complete train\.json \(invalid JSON: .* at line \d+, column \d+; cut "
      r"short or damaged\); fix: restore the set from where it came from \(git checkout -- \S+train\.json for a set "
      r"committed here, or copy the exported set again")
def case_reference_set_json_cut_in_half(tmp_path):
    folder = reference_copy(tmp_path)
    text = (folder / "baseline" / "train.json").read_text()
    (folder / "baseline" / "train.json").write_text(text[: len(text) // 2])
    write_manifest(folder)  # exported so: the manifest lists the damage, the reader still refuses it
    return collect_job(tmp_path, folder)


@case(r"\S+/h200/tf32/train\.json: has no 'provenance' entry, which every train\.json of this workflow holds "
      r"\(written by another version, or another file\); fix: restore the set")
def case_reference_set_of_another_schema(tmp_path):
    folder = reference_copy(tmp_path)
    data = json.loads((folder / "tf32" / "train.json").read_text())
    data["meta"] = data.pop("provenance")
    (folder / "tf32" / "train.json").write_text(json.dumps(data))
    write_manifest(folder)
    return collect_job(tmp_path, folder)


@case(r"\S+/h200/baseline/profile/train/ncu_summary\.csv: not a readable ncu_summary\.csv table \(ValueError: cut "
      r"short: its last line ends without a newline\); fix: restore the set")
def case_reference_set_summary_cut(tmp_path):
    folder = reference_copy(tmp_path)
    summary = folder / "baseline" / "profile" / "train" / "ncu_summary.csv"
    data = summary.read_bytes()
    summary.write_bytes(data[: int(len(data) * 0.7)])
    write_manifest(folder)
    return collect_job(tmp_path, folder)


@case(r"\S+/h200/tf32/sample\.json: its sha256 differs from the one in \S+/h200/manifest\.sha256 \(damaged, cut "
      r"short or edited since the export\); fix: restore the set from where it came from \(git checkout -- \S+/h200 "
      r"for a set committed here, or copy the exported set again\); \(cd \S+/h200 && sha256sum -c "
      r"manifest\.sha256\) lists every damaged file")
def case_reference_set_unlike_its_manifest(tmp_path):
    folder = reference_copy(tmp_path)
    sample = folder / "tf32" / "sample.json"
    sample.write_text(sample.read_text().replace('"timesteps": ', '"timesteps": 1', 1))  # still valid JSON
    return collect_job(tmp_path, folder)


@case(r"\S+/h200/baseline/profile/train/ncu_summary\.csv: its sha256 differs from the one in \S+/h200/"
      r"manifest\.sha256 \(damaged, cut short or edited since the export\); fix: restore the set")
def case_reference_set_summary_cut_at_a_row_boundary(tmp_path):
    # Every remaining row parses: without the manifest, fig01 would draw the shortened step as the whole one.
    folder = reference_copy(tmp_path)
    summary = folder / "baseline" / "profile" / "train" / "ncu_summary.csv"
    lines = summary.read_text().splitlines(keepends=True)
    summary.write_text("".join(lines[:-3]))
    return collect_job(tmp_path, folder)


@case(r"\S+/data/reference/wholehead/h200/ has no manifest\.sha256, so no file of it can be checked against what was "
      r"exported \(every set the export target writes has one\); fix: copy the exported set again with its "
      r"manifest\.sha256, or, for a set you have checked yourself, write one: PYTHONPATH=workflow/scripts python3 -m "
      r"planning\.set_manifest \S+/h200")
def case_reference_set_without_manifest(tmp_path):
    return collect_job(tmp_path, reference_copy(tmp_path, manifest=False))


# --- results measured here that cannot be read whole ------------------------------------------------------------------


def measured_copy(root: Path, *parts: str) -> Path:
    """A copy of the shipped H200 run at `parts` (a variant, or study/<variant>/seed<k>) as if measured here, under
    <root>/results/wholehead/h200/."""
    folder = root / "results" / "wholehead" / "h200" / Path(*parts)
    shutil.copytree(REFERENCE / Path(*parts), folder)
    return folder


def collect_measured(root: Path, folder: Path) -> Attempt:
    """workflow/scripts/collect_results.py reading the results in `folder` as measured here."""
    measured = sorted(str(p) for p in folder.rglob("*") if p.name.endswith(SHIPPED_NAMES))
    out = Bundle(**{name: root / "collected" / f"{name}.parquet" for name in TABLES})
    (root / "collected").mkdir(exist_ok=True)
    return Attempt(lambda: run_script("collect_results.py", input=Files(measured=measured, shipped=[], references=[]),
                                      params=Params(gpus=["h200"]), output=out, log=Files(root / "collect.log")),
                   [Path(p) for p in out])


@case(r"\S+/results/wholehead/h200/baseline/profile/sample/ncu_summary\.csv: not a readable ncu_summary\.csv table "
      r"\(ValueError: its last row is not the one 'all' row that every summary ends with \(its total\): cut short at a "
      r"row boundary\); fix: run the job that writes it again \(your snakemake command with --forcerun \S+ added")
def case_summary_cut_at_a_row_boundary(tmp_path):
    # Its class rows still parse: fig01 would draw the shortened step, and a table job would find no 'all' row.
    folder = measured_copy(tmp_path, "baseline")
    summary = folder / "profile" / "sample" / "ncu_summary.csv"
    summary.write_text("".join(summary.read_text().splitlines(keepends=True)[:-1]))
    return collect_measured(tmp_path, folder)


@case(r"\S+/h200/tf32/profile/train/torch_summary\.csv: not a readable torch_summary\.csv table \(ValueError: its "
      r"kernel classes hold 3,306 launches but its 'all' row 4,068: rows cut or edited\); fix: run the job that writes it")
def case_summary_with_a_row_lost(tmp_path):
    folder = measured_copy(tmp_path, "tf32")
    summary = folder / "profile" / "train" / "torch_summary.csv"
    lines = summary.read_text().splitlines(keepends=True)
    summary.write_text("".join(lines[:5] + lines[6:]))  # the layout conversions (762 launches) gone; the total kept
    return collect_measured(tmp_path, folder)


@case(r"\S+/h200/tf32/train_steps\.csv: not a readable train_steps\.csv table \(ValueError: holds 5 steps, but "
      r"train\.json beside it ran 2 warm-up and 4 timed steps \(6\): cut short or of another run\); fix: run the job that writes")
def case_train_steps_cut_at_a_row_boundary(tmp_path):
    folder = measured_copy(tmp_path, "tf32")
    steps = folder / "train_steps.csv"
    steps.write_text("".join(steps.read_text().splitlines(keepends=True)[:-1]))  # the loss curve one step short
    return collect_measured(tmp_path, folder)


@case(r"\S+/study/baseline/seed0/losses\.csv: not a readable study losses table \(ValueError: holds 1000 steps, but "
      r"run\.json beside it trained 1200: cut short or of another run\); fix: run the job that writes it again")
def case_study_losses_cut_at_a_row_boundary(tmp_path):
    folder = measured_copy(tmp_path, "study", "baseline", "seed0")
    losses = folder / "losses.csv"
    losses.write_text("".join(losses.read_text().splitlines(keepends=True)[:1001]))
    return collect_measured(tmp_path, folder)


@case(r"\S+nsys_kern_sum\.csv: nsys kernel-summary CSV holds \S+ ns of kernel time in 4 rows, but its largest "
      r"kernel's share \(58\.2 % of \S+ ns\) gives a whole of at least \S+ ns: at least 4\.6\d% of the time is missing "
      r"\(cut short at a row boundary\); fix: run nsys stats again")
def case_nsys_summary_cut_at_a_row_boundary(tmp_path, dataset):
    lines = NSYS_KERN_SUM.read_text().splitlines(keepends=True)
    (tmp_path / "nsys_kern_sum.csv").write_text("".join(lines[:-3]))  # every row left parses
    return extract_job(tmp_path, "nsys", phase="sample", kern_sum=tmp_path / "nsys_kern_sum.csv")


def test_the_restore_a_damaged_committed_set_is_told_works(tmp_path):
    """Doing what the line says for a set committed in the repository: its git command restores the file, and the
    same collect job then reads the set."""
    folder = reference_copy(tmp_path)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "data"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "set"], cwd=tmp_path,
                   check=True)
    train = folder / "baseline" / "train.json"
    train.write_text(train.read_text()[:100])
    attempt = collect_job(tmp_path, folder)
    message = refusal(attempt.act)
    command = message.split("(git checkout -- ", 1)[1].split(" for a set committed here", 1)[0]
    subprocess.run(["git", "checkout", "--", command], cwd=tmp_path, check=True)
    attempt.act()
    assert all(path.is_file() for path in attempt.outputs)


# --- profiler exports that cannot be used ----------------------------------------------------------------------------


@case(r"ncu raw CSV \S+ is truncated: row 43 has 222 of 336 columns; fix: export again")
def case_ncu_export_cut_inside_a_row(tmp_path, dataset):
    text = H200_RAW.read_text()
    return ncu_extract(tmp_path, text[: len(text) - 700])


@case(r"ncu raw CSV \S+ has no units row after the header .*; fix: export again")
def case_ncu_export_without_units_row(tmp_path, dataset):
    lines = raw_lines()
    return ncu_extract(tmp_path, "".join(lines[:1] + lines[2:]))


@case(r"ncu raw CSV \S+ has no header row \(empty or failed export\); fix: export again")
def case_ncu_export_empty(tmp_path, dataset):
    return ncu_extract(tmp_path, "")


@case(r"ncu details CSV \S+details\.csv is truncated or malformed .*; fix: export it again with ncu -i REPORT --csv "
      r"--page details")
def case_ncu_details_cut(tmp_path, dataset):
    text = H200_DETAILS.read_text()
    (tmp_path / "details.csv").write_text(text[: len(text) // 2 - 3] + '"x')
    out = Files(rules=tmp_path / "ncu_rules.csv")
    return Attempt(lambda: run_script("extract_ncu_rules.py", input=Files(details=tmp_path / "details.csv",
                                                                          raw=H200_RAW),
                                      output=out, log=Files(tmp_path / "rules.log")), [Path(p) for p in out])


@case(r"backward pass missing: no dgrad or wgrad kernel among 21 profiled kernels; .*fix: use "
      r"torch\.cuda\.nvtx\.range_start/range_end")
def case_training_profile_without_backward_kernels(tmp_path, dataset):
    return ncu_extract(tmp_path, H200_PUSHPOP.read_text(), profiled=21, details=details_page(H200_PUSHPOP.read_text()))


@case(r"torch trace \S+torch_trace\.json is cut short \(the JSON ends early\): .* at line \d+, column \d+; fix: delete "
      r"\S+ and rerun its profile job")
def case_torch_trace_cut_short(tmp_path, dataset):
    text = H200_TRACE.read_text()
    (tmp_path / "torch_trace.json").write_text(text[: len(text) // 2])
    return extract_job(tmp_path, "torch", trace=tmp_path / "torch_trace.json")


@case(r"torch trace \S+torch_trace\.json is not valid JSON: Expecting value at line 1, column 1; fix: delete")
def case_torch_trace_not_json(tmp_path, dataset):
    (tmp_path / "torch_trace.json").write_text("ncu-rep\x00 binary report saved under the trace's name\n")
    return extract_job(tmp_path, "torch", trace=tmp_path / "torch_trace.json")


@case(r"torch trace \S+ has no traceEvents list: not a torch\.profiler Chrome trace; fix: delete")
def case_torch_trace_of_another_tool(tmp_path, dataset):
    (tmp_path / "torch_trace.json").write_text(json.dumps({"schemaVersion": 1, "events": []}))
    return extract_job(tmp_path, "torch", trace=tmp_path / "torch_trace.json")


@case(r"torch trace \S+: event 3 \(\S+\) has dur None, not a number; fix: delete")
def case_torch_trace_event_without_duration(tmp_path, dataset):
    trace = json.loads(H200_TRACE.read_text())
    complete = [event for event in trace["traceEvents"] if event.get("ph") == "X"]
    complete[3]["dur"] = None
    (tmp_path / "torch_trace.json").write_text(json.dumps(trace))
    return extract_job(tmp_path, "torch", trace=tmp_path / "torch_trace.json")


@case(r"torch profile of the sample step holds no kernels; fix: see the profile job's log")
def case_torch_profile_without_kernels(tmp_path, dataset):
    (tmp_path / "torch_trace.json").write_text(json.dumps({"traceEvents": []}))
    return extract_job(tmp_path, "torch", phase="sample", trace=tmp_path / "torch_trace.json")


@case(r"\S+nsys_kern_sum\.csv: nsys kernel-summary CSV is truncated: row 4 has \d+ of 9 columns; fix: run nsys stats")
def case_nsys_summary_cut(tmp_path, dataset):
    lines = NSYS_KERN_SUM.read_text().splitlines(keepends=True)
    (tmp_path / "nsys_kern_sum.csv").write_text("".join(lines[:3]) + lines[3][:40] + "\n")
    return extract_job(tmp_path, "nsys", phase="sample", kern_sum=tmp_path / "nsys_kern_sum.csv")


@case(r"\S+nsys_kern_sum\.csv: kernel '.+' has '12;4' in column 'Total Time \(ns\)', not a number; .*fix: export")
def case_nsys_value_not_a_number(tmp_path, dataset):
    rows = list(csv.reader(io.StringIO(NSYS_KERN_SUM.read_text())))
    rows[2][rows[0].index("Total Time (ns)")] = "12;4"
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    (tmp_path / "nsys_kern_sum.csv").write_text(out.getvalue())
    return extract_job(tmp_path, "nsys", phase="sample", kern_sum=tmp_path / "nsys_kern_sum.csv")


# --- profilers that cannot run --------------------------------------------------------------------------------------


@case(r"ncu not found: Nsight Compute is not on PATH; fix: add /opt/nvidia/nsight-compute/<version> to PATH .*"
      r"\(tool output: \S+tool\.log\)")
def case_ncu_not_found(tmp_path, dataset, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu on PATH, and none configured
    monkeypatch.setattr("profiling.ncu.NCU_INSTALL_ROOT", tmp_path / "nsight-compute")
    return profile_job(tmp_path, dataset, None)


@case(r"ncu executable \S+/missing/ncu \(profiling\.ncu\.executable or its by_architecture override\) does not "
      r"exist; fix: correct the path \(the ncu binary of an install, e\.g\. /opt/nvidia/nsight-compute/<version>/ncu\),"
      r" or set it to null to use the ncu found on PATH")
def case_ncu_executable_missing(tmp_path, dataset):
    # Configured to a path that is not there: the config is wrong, not PATH.
    return profile_job(tmp_path, dataset, tmp_path / "missing" / "ncu")


@case(r"ncu may not read the GPU performance counters \(ERR_NVGPUCTRPERM.*fix: run as root or with CAP_SYS_ADMIN")
def case_ncu_counters_restricted_to_admins(tmp_path, dataset):
    text = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters\n"
    return profile_job(tmp_path, dataset, fake_profiler(tmp_path, "ncu", text, code=1))


@case(r"this ncu does not support the GPU \(gv100\); fix: use an ncu release that supports it")
def case_ncu_too_new_for_the_gpu(tmp_path, dataset):
    return profile_job(tmp_path, dataset, fake_profiler(tmp_path, "ncu", "==ERROR== Invalid chip gv100\n", code=1))


@case(r"ncu does not know the metric sm__bogus\.sum on this GPU/ncu; fix: correct it or override it")
def case_ncu_unknown_metric(tmp_path, dataset):
    text = "==ERROR== Failed to find metric sm__bogus.sum\n"
    return profile_job(tmp_path, dataset, fake_profiler(tmp_path, "ncu", text, code=1))


@case(r"ncu profiled no kernels: the NVTX filter never matched; fix: check the range name")
def case_ncu_profiled_no_kernels(tmp_path, dataset):
    text = "==PROF== Disconnected from process 1329\n==WARNING== No kernels were profiled.\n"
    return profile_job(tmp_path, dataset, fake_profiler(tmp_path, "ncu", text))


@case(r"the raw page of \S+ncu\.ncu-rep holds 20 kernels but ncu profiled 41 \(says its log \S+tool\.log\): the "
      r"export is cut short")
def case_ncu_export_shorter_than_the_profile(tmp_path, dataset):
    cut = "".join(raw_lines()[:22])
    return profile_job(tmp_path, dataset, fake_profiler(tmp_path, "ncu", ncu_log(41), raw=cut))


@case(r"ncu did not finish within 0\.01 minutes; fix: raise profiling\.ncu\.timeout_minutes or collect fewer")
def case_profiler_timeout(tmp_path, dataset):
    return profile_job(tmp_path, dataset, fake_profiler(tmp_path, "ncu", ncu_log(1), seconds=5), minutes=0.01)


@case(r"nsys not found: .*fix:")
def case_nsys_not_found(tmp_path, dataset, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    return profile_job(tmp_path, dataset, None, tool="nsys")


@case(r"nsys executable \S+/missing/nsys \(profiling\.nsys\.executable\) does not exist; fix: correct the path")
def case_nsys_executable_missing(tmp_path, dataset):
    return profile_job(tmp_path, dataset, tmp_path / "missing" / "nsys", tool="nsys")


# --- checkpoints, devices and disks ----------------------------------------------------------------------------------


@case(r"checkpoint \S+checkpoint\.pt is truncated or not a checkpoint of this workflow \(.*\); fix: add --forcerun "
      r"\S+checkpoint\.pt to the snakemake command \(before any --\): Snakemake then trains that variant again")
def case_checkpoint_truncated(tmp_path, dataset, checkpoint, monkeypatch):
    monkeypatch.delenv(checkpoints.COMMAND_VARIABLE, raising=False)  # a job run by hand: no command recorded
    data = checkpoint.read_bytes()
    (tmp_path / "checkpoint.pt").write_bytes(data[: len(data) // 2])
    return sample_job(tmp_path, dataset, tmp_path / "checkpoint.pt")


@case(r"checkpoint \S+checkpoint\.pt is truncated or not a checkpoint of this workflow .*fix: (run snakemake .*)?"
      r"(add )?--forcerun \S+checkpoint\.pt")
def case_checkpoint_not_a_checkpoint(tmp_path, dataset):
    (tmp_path / "checkpoint.pt").write_text("weights: see the cluster's copy\n")
    return sample_job(tmp_path, dataset, tmp_path / "checkpoint.pt")


@case(r"checkpoint \S+checkpoint\.pt holds ema weights of another network \(\d+ tensors differ in shape, e\.g\. "
      r"denoiser\.time_embed\.0\.weight is \[256, 64\] there and \[128, 32\] here\): it was trained for another "
      r"configuration; fix: (run snakemake .*)?(add )?--forcerun")
def case_checkpoint_of_another_network(tmp_path, dataset):
    wide = ModelSpec.from_params({**MODEL, "base_width": 64}, DIFFUSION).build(0).state_dict()
    torch.save({"model": wide, "ema": wide, "step": 3}, tmp_path / "checkpoint.pt")
    return sample_job(tmp_path, dataset, tmp_path / "checkpoint.pt")


@case(r"checkpoint \S+checkpoint\.pt was trained for another configuration \(diffusion\.timesteps 4 there, 8 here\); "
      r"fix: (run snakemake .*)?(add )?--forcerun")
def case_checkpoint_of_another_configuration(tmp_path, dataset, checkpoint):
    return sample_job(tmp_path, dataset, checkpoint, diffusion={"timesteps": 8})


@case(r"checkpoint \S+checkpoint\.pt holds \d+ entries \(alphas_cumprod, betas, \S+, \.\.\.\), not the model and ema "
      r"weights this workflow's train job writes \(a bare state_dict, or another program's file\); fix: "
      r"(run snakemake .*)?(add )?--forcerun")
def case_checkpoint_without_the_weights(tmp_path, dataset):
    torch.save(ModelSpec.from_params(MODEL, DIFFUSION).build(0).state_dict(), tmp_path / "checkpoint.pt")
    return sample_job(tmp_path, dataset, tmp_path / "checkpoint.pt")


@case(r"label 'h200' needs a CUDA GPU matching '\\bH200\\b', but no CUDA device is visible; fix: run it on a machine "
      r"with that GPU")
def case_gpu_label_without_that_gpu(tmp_path, dataset):
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible here")
    h200 = {"label": "h200", "device": "cuda", "name_pattern": r"\bH200\b", "emulate_gpus_on_cpu": False}
    return train_job(tmp_path, dataset, device=h200)


@case(r"preflight on .+ \(torch [^)]+\): bf16 conv3d \(contiguous\) of 1x32x16x16x16 differs from float64 by [\d.]+ of the "
      r"output's RMS at \d+ of 4096 sampled points \(allowed 0\.08\); this stack would time and draw wrong or fallback "
      r"convolutions; fix: install a torch release whose cuDNN has not this fault .*, or leave bf16 out of run_variants")
def case_preflight_conv3d_wrong_in_bf16(tmp_path, monkeypatch):
    # As the known cuDNN fault: bf16 convolutions wrong (here: the far half of the volume), fp32 right. Only the
    # contiguous layout is wrong, and only the bf16 variant (contiguous) is configured: the line names that check.
    from profiling import preflight

    right = preflight.F.conv3d

    def conv3d(*args, **kwargs):
        out = right(*args, **kwargs)
        if out.dtype == torch.bfloat16 and out.is_contiguous():
            out[:, :, 8:] = 0
        return out

    monkeypatch.setattr(preflight.F, "conv3d", conv3d)
    config = read_mapping(REPO / "config.yaml") | {"run_variants": ["baseline", "bf16"]}
    config["quality_study"]["variants"] = ["baseline"]
    out = Files(tmp_path / "preflight.json")
    return Attempt(lambda: run_script("preflight.py", params=Params(device=CPU, conv={"shape": [16, 16, 16],
                                                                                        "channels": 32}),
                                      config=config, wildcards=SimpleNamespace(gpu="cpu"), output=out,
                                      log=Files(tmp_path / "preflight.log")), [Path(p) for p in out])


@case(r"\S+/preflight\.json checked another software stack than this job's \(torch 2\.9\.0\+cu128 there, \S+ here\); "
      r"fix: check this one: your snakemake command with --forcerun \S+/preflight\.json added before any -- \(every timed "
      r"job of the label runs again: its results would otherwise mix two stacks\)")
def case_preflight_of_another_stack(tmp_path, dataset):
    # The record of a check made before torch was upgraded: it says nothing of this stack's convolutions.
    attempt = train_job(tmp_path, dataset)
    record = tmp_path.with_name(tmp_path.name + "-label") / "preflight.json"
    data = json.loads(record.read_text())
    data["stack"]["torch"] = "2.9.0+cu128"
    record.write_text(json.dumps(data))
    return attempt


@case(r"preflight on .+ \(torch [^)]+\): fp32 conv3d \(contiguous\) of 1x32x16x16x16 differs from float64 by 0\.5 \(\S+"
      r"preflight\.json\); baseline runs in it; fix: install a torch release whose cuDNN has not this fault")
def case_preflight_failed_for_this_variant(tmp_path, dataset):
    # A combination that failed while no configured variant used it (the preflight passed), then a variant that
    # runs in it: its timed job refuses to start.
    attempt = train_job(tmp_path, dataset)
    record = tmp_path.with_name(tmp_path.name + "-label") / "preflight.json"
    data = json.loads(record.read_text())
    failed = next(c for c in data["checks"] if c["name"] == "fp32 conv3d (contiguous)")
    failed.update(passed=False, state="fp32 conv3d (contiguous) of 1x32x16x16x16 differs from float64 by 0.5")
    record.write_text(json.dumps(data))
    return attempt


@case(r"label 'epyc9999' expects a CPU matching '\\bEPYC 9999\\b' but found '[^']+'; fix: use the label of this "
      r"CPU")
def case_cpu_label_on_another_cpu(tmp_path, dataset):
    # A CPU label naming a model this machine is not: its training would record this CPU's times under that name.
    epyc = {"label": "epyc9999", "device": "cpu", "name_pattern": r"\bEPYC 9999\b", "emulate_gpus_on_cpu": False}
    return train_job(tmp_path, dataset, device=epyc)


@case(r"no space left on the device while writing \S+ncu_kernels\.parquet \(ENOSPC\); fix: free space on the disk "
      r"holding \S+ \(df -h shows it\) and rerun")
def case_disk_full_writing_a_table(tmp_path, dataset):
    attempt = ncu_extract(tmp_path, H200_RAW.read_text())
    attempt.outputs[0].symlink_to("/dev/full")  # every write to it fails with ENOSPC
    return attempt


@case(r"no space left on the device while writing \S+checkpoint\.pt \(ENOSPC\); fix: free space")
def case_disk_full_writing_the_checkpoint(tmp_path, dataset, monkeypatch):
    def full_disk(**_):  # the checkpoint's temporary file lands on a full disk
        return os.open("/dev/full", os.O_WRONLY), str(tmp_path / ".checkpoint.pt.tmp")

    monkeypatch.setattr(checkpoints.tempfile, "mkstemp", full_disk)
    return train_job(tmp_path, dataset)


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs: a real file system that fills up (torch's writer meets ENOSPC part-way through a write,
    which /dev/full does not show). Needs the right to mount (root, as in the project's containers)."""
    disk = tmp_path / "small-disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def test_a_checkpoint_on_a_full_disk_is_refused_in_one_line(small_disk, dataset):
    """On a real full disk torch.save fails with an unrelated RuntimeError ("unexpected pos"); the train job names
    the full disk and the file in one line, and leaves none of its outputs, nor the temporary file."""
    (small_disk / "filler").write_bytes(b"\0" * 128 * 1024)
    attempt = train_job(small_disk / "run", dataset)
    message = refusal(attempt.act)
    assert re.fullmatch(r"no space left on the device while writing \S+/run/checkpoint\.pt \(ENOSPC\); fix: free "
                        r"space on the disk holding \S+/run \(df -h shows it\) and rerun; nothing half-written is "
                        r"kept", message), message
    assert sorted(p.name for p in (small_disk / "run").iterdir()) == ["train.log"]


def test_ctrl_c_during_training_ends_in_one_line_and_leaves_nothing(tmp_path, dataset, monkeypatch, capsys):
    """SIGINT in the middle of the measured steps (as Ctrl-C sends it to every process of the run): one line on the
    terminal and in the log, exit status 130, no output left; the rerun it names gives the same result."""
    original, calls = training.Trainer.loss, []

    def loss(self, target, condition, generator):
        calls.append(1)
        if len(calls) == 3:
            signal.raise_signal(signal.SIGINT)  # Python's own handler: KeyboardInterrupt here
        return original(self, target, condition, generator)

    monkeypatch.setattr(training.Trainer, "loss", loss)
    attempt = train_job(tmp_path / "run", dataset)
    # The handler a job started from a terminal has. A test session started in the background by a shell without job
    # control (nohup, `cmd &` in a script, some CI runners) inherits SIGINT ignored, and Python then installs none:
    # the signal would pass unseen and the test would say nothing of the job.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        attempt.act()
    except SystemExit as stopped:
        code = stopped.code
    else:
        pytest.fail(f"the job ended normally: Trainer.loss called {len(calls)} time(s)")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130
    line = capsys.readouterr().err.strip()
    assert re.fullmatch(r"error: interrupted \(Ctrl-C\) before the job finished; its outputs \(\S+train\.json and 2 "
                        r"other output\(s\)\) were removed; fix: rerun the same command: Snakemake runs this job "
                        r"again from the start", line), line
    assert (tmp_path / "run" / "train.log").read_text().strip().splitlines()[-1] == line
    assert not [path for path in attempt.outputs if path.exists()]
    monkeypatch.setattr(training.Trainer, "loss", original)
    attempt.act()
    assert all(path.is_file() for path in attempt.outputs)


@case(r"permission denied on \S+/run/train\.log \(EACCES\): \S+/run is not writable by this user; fix: make it "
      r"writable \(chmod -R u\+w \S+/run; ls -ld \S+/run shows its owner\) and rerun")
def case_results_folder_write_protected(tmp_path, dataset):
    folder = tmp_path / "run"
    attempt = train_job(folder, dataset)
    folder.chmod(0o555)
    return Attempt(lambda: train_job_bound_by_modes(folder, dataset), attempt.outputs)


def train_job_bound_by_modes(folder: Path, dataset: Path) -> None:
    """train_job in a child process that a folder's mode binds: the user running the tests, or root without
    CAP_DAC_OVERRIDE (setpriv), since root writes anywhere otherwise. Its one line comes back as a SystemExit."""
    code = (f"import sys; sys.path[:0] = [{str(REPO / 'tests')!r}, {str(REPO / 'workflow' / 'scripts')!r}]; "
            f"from pathlib import Path; import test_errors; "
            f"test_errors.train_job(Path({str(folder)!r}), Path({str(dataset)!r})).act()")
    argv = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root ignores a folder's mode, and setpriv is not installed to drop that capability")
        argv = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    lines = done.stderr.strip().splitlines()
    if done.returncode != 0:
        raise SystemExit(lines[-1] if lines else f"exit {done.returncode}")


# --- configuration ---------------------------------------------------------------------------------------------------


@case(r"config: hardware\.cpu\.profilers\[1\]: 'perf' is not one of \['torch', 'ncu', 'nsys'\] \(set in \S+overlay"
      r"\.yaml\) \[hardware\.cpu\.profilers: Profilers run for this label\]; fix: correct it there")
def case_unknown_profiler_name(tmp_path):
    return config_with(tmp_path, {"hardware": {"cpu": {"device": "cpu", "profilers": ["torch", "perf"]}}})


@case(r"config: train: Additional properties are not allowed \('warmup' was unexpected\) \(set in \S+overlay\.yaml\)")
def case_misspelt_key(tmp_path):
    return config_with(tmp_path, {"train": {"warmup": 2}})


@case(r"config: train\.lr: 'fast' is not of type 'number' \(set in \S+overlay\.yaml\) \[train\.lr: Adam learning "
      r"rate\]; fix:")
def case_value_of_the_wrong_type(tmp_path):
    return config_with(tmp_path, {"train": {"lr": "fast"}})


@case(r"config: variant 'frontier_ndhwc_ddp2' runs data_parallel 2 \(set in config\.yaml\) processes, which do not "
      r"divide train\.gradient_accumulation 3 \(set in \S+overlay\.yaml\) \(each process runs an equal share of the "
      r"step's micro-batches\); fix: set data_parallel to one of \[1, 3\], or train\.gradient_accumulation to a "
      r"multiple of 2$")
def case_data_parallel_that_does_not_divide_the_accumulation(tmp_path):
    return config_with(tmp_path, {"train": {"gradient_accumulation": 3},
                                  "run_variants": ["baseline", "frontier_ndhwc_ddp2"]})


@case(r"config: train\.warmup_steps: 0 is less than the minimum of 1 \(set in \S+overlay\.yaml\)")
def case_value_out_of_range(tmp_path):
    return config_with(tmp_path, {"train": {"warmup_steps": 0}})


@case(r"config: gpus lists 'mi300' \(set in \S+overlay\.yaml\), which is not defined under 'hardware'; fix: add it "
      r"there \(device, name_pattern, architecture\) or use one of \['a100', 'cpu', 'h100', 'h200', 'v100'\]")
def case_undefined_hardware_label(tmp_path):
    return config_with(tmp_path, {"gpus": ["mi300"]})


@case(r"config: dataset\.source synthetic_brats \(set in \S+overlay\.yaml\) belongs to the brats workload, but "
      r"workload is wholehead \(set in \S*config\.yaml\); fix: set workload: brats \(config/brats\.yaml does for "
      r"BraTS\) or a wholehead source \(synthetic, wholehead\)")
def case_brats_source_in_the_whole_head_workload(tmp_path):
    return config_with(tmp_path, {"dataset": {"source": "synthetic_brats"}})


@case(r"config: gpus lists 'h200_brats' \(set in \S+overlay\.yaml\), a hardware label with the workload in its "
      r"name; the workload is its own key now; fix: list 'h200' and set workload: brats \(config/brats\.yaml does\)")
def case_label_with_the_workload_in_its_name(tmp_path):
    return config_with(tmp_path, {"gpus": ["h200_brats"]})


@case(r"config: the wholehead workload has 1 image and 2 mask channel\(s\), so model\.in_channels must be 3 and "
      r"model\.out_channels 1 \(got 8 and 1\) \(set in \S+overlay\.yaml\); fix: set them so")
def case_model_channels_of_another_workload(tmp_path):
    return config_with(tmp_path, {"model": {"in_channels": 8}})


@case(r"config: run_variants lists 'fp8' \(set in \S+overlay\.yaml\), which is not defined under 'variants'; fix: "
      r"define its switches there")
def case_undefined_variant(tmp_path):
    return config_with(tmp_path, {"run_variants": ["baseline", "fp8"]})


@case(r"config: run_variants must include 'baseline' \(set in \S+overlay\.yaml\) \(every quality check and speed-up "
      r"is relative to it\); fix: add baseline to the list")
def case_run_variants_without_baseline(tmp_path):
    return config_with(tmp_path, {"run_variants": ["channels_last"]})


@case(r"config: quality\.ssim_kernel must be odd \(a centred Gaussian window\), got 8 \(set in \S+overlay\.yaml\); "
      r"fix: use 7 or 9")
def case_even_ssim_kernel(tmp_path):
    return config_with(tmp_path, {"quality": {"ssim_kernel": 8}})


@case(r"config: comparison\.processes_at_once 2 \(set in \S+overlay\.yaml\) leaves no process beside the references "
      r"\['baseline', 'tf32'\], which every group of the paired rounds holds; fix: set it to 3 or more, or null")
def case_comparison_groups_without_room_beside_the_references(tmp_path):
    return config_with(tmp_path, {"run_variants": ["baseline", "tf32", "channels_last"],
                                  "comparison": {"references": ["baseline", "tf32"], "processes_at_once": 2}})


@case(r"config: sample\.masks \(3\) exceeds dataset\.heldout \(2\) \(set in \S+overlay\.yaml\); fix: lower "
      r"sample\.masks or hold out more cases")
def case_more_masks_than_held_out_cases(tmp_path):
    return config_with(tmp_path, {"sample": {"masks": 3}})


@case(r"config: dataset\.heldout must leave at least one training case \(set in \S+overlay\.yaml\); fix: hold out "
      r"fewer than dataset\.cases \(6\)")
def case_every_case_held_out(tmp_path):
    return config_with(tmp_path, {"dataset": {"heldout": 6, "cases": 6}, "sample": {"masks": 1}})


@case(r"config: dataset\.shape \[30, 32, 32\] must be divisible by 16 \(the U-Net halves it 4 times\) \(set in "
      r"\S+overlay\.yaml\); fix: use \[32, 32, 32\]")
def case_volume_shape_the_unet_cannot_halve(tmp_path):
    return config_with(tmp_path, {"dataset": {"shape": [30, 32, 32]}})


@case(r"config: quality\.reference_shape \[48, 16, 16\] must fit in dataset\.shape and be divisible by 16 \(set in "
      r"\S+overlay\.yaml\); fix: use multiples of 16 up to \[16, 16, 16\], or null")
def case_reference_crop_larger_than_the_volume(tmp_path):
    return config_with(tmp_path, {"quality": {"reference_shape": [48, 16, 16]}})


@case(r"config: reference_results lists 'a100' \(set in \S+overlay\.yaml\), but data/reference/wholehead/a100/ does "
      r"not exist \(the wholehead workload's sets live in data/reference/wholehead/\); fix: leave it out, or put that "
      r"label's exported set there")
def case_reference_set_not_shipped(tmp_path):
    return config_with(tmp_path, {"reference_results": ["h200", "a100"]})


@case(r"config: reference_results lists 'h100' \(set in \S+overlay\.yaml\), but data/reference/wholehead/h100/ has "
      r"no manifest\.sha256, so no file of it can be checked .*; fix: copy the exported set again with its "
      r"manifest\.sha256, or, .* write one: PYTHONPATH=workflow/scripts python3 -m planning\.set_manifest "
      r"data/reference/wholehead/h100$")
def case_reference_set_listed_without_manifest(tmp_path):
    # Refused when the DAG is built, before the collect job would refuse it.
    shutil.copytree(REFERENCE / "bf16", tmp_path / "data" / "reference" / "wholehead" / "h100" / "bf16")
    (tmp_path / "overlay.yaml").write_text("reference_results: [h100]\n")
    config = read_mapping(REPO / "config.yaml")
    update_config(config, {"reference_results": ["h100"]})
    return Attempt(lambda: check_config(config, tmp_path, [REPO / "config.yaml", tmp_path / "overlay.yaml"]))


@case(r"overlay \S+my-overlay\.yaml does not exist; fix: correct the path")
def case_overlay_missing(tmp_path):
    return Attempt(lambda: check_files([tmp_path / "my-overlay.yaml"]))


# libyaml's wording (planning.configcheck parses with it where PyYAML has it), or PyYAML's own.
@case(r"\S+my-overlay\.yaml:4:1: YAML syntax error in this overlay: (did not find expected|expected) ',' or '}'"
      r"(, but got '<stream end>')? \(while parsing a flow mapping that starts at line 2\); fix: correct the YAML "
      r"there")
def case_overlay_yaml_syntax_error(tmp_path):
    (tmp_path / "my-overlay.yaml").write_text("gpus: [cpu]\ntrain: {lr: 1.0e-4,\nsample: {masks: 1}\n")
    return Attempt(lambda: check_files([tmp_path / "my-overlay.yaml"]))


@case(r"overlay \S+my-overlay\.yaml holds a list, not keys and values; fix: write it as `key: value` lines")
def case_overlay_not_a_mapping(tmp_path):
    (tmp_path / "my-overlay.yaml").write_text("- gpus: [cpu]\n- train: {lr: 1.0e-4}\n")
    return Attempt(lambda: check_files([tmp_path / "my-overlay.yaml"]))


@case(r"overlay \S+my-overlay\.yaml is empty \(or holds only comments\), which Snakemake refuses without naming it; "
      r"fix: write the settings it changes as `key: value` lines, or leave it out")
def case_overlay_empty(tmp_path):
    (tmp_path / "my-overlay.yaml").write_text("# the study's settings, to come\n")
    return Attempt(lambda: check_files([tmp_path / "my-overlay.yaml"]))


@pytest.mark.parametrize("text", ["", "# only a comment\n", "- gpus: [cpu]\n"], ids=["empty", "comment", "list"])
@pytest.mark.workflow
def test_what_snakemake_says_of_an_empty_or_list_overlay_is_the_line_the_docs_explain(workflow, text):
    """Snakemake reads --configfile overlays before any code of the workflow runs: for these it names no file. The
    troubleshooting page quotes its line and sends the user to the reader, which names the file."""
    (workflow / "my-overlay.yaml").write_text(text)
    refused = snakemake(workflow, "-n", "--configfile", "my-overlay.yaml")
    assert refused.returncode != 0
    said = "Config file must be given as JSON or YAML with keys at top level."
    assert said in refused.stdout + refused.stderr, refused.stderr[-2000:]
    assert said in " ".join((REPO / "docs" / "troubleshooting.md").read_text().split())
    with pytest.raises(ConfigError, match=r"overlay \S*my-overlay\.yaml (is empty|holds a list)"):
        check_files([workflow / "my-overlay.yaml"])


@pytest.mark.parametrize("name", list(CASES))
def test_refused_in_one_line_naming_the_fix_and_nothing_is_left(name, request, tmp_path):
    make, pattern = CASES[name]
    fixtures = {arg: request.getfixturevalue(arg) for arg in make.__code__.co_varnames[: make.__code__.co_argcount]
                if arg != "tmp_path"}
    attempt = make(tmp_path, **fixtures)
    message = refusal(attempt.act)
    assert "\n" not in message and "Traceback" not in message, message
    assert re.search(pattern, message), f"{message!r}\ndoes not match\n{pattern!r}"
    assert "; fix: " in message, message
    left = [str(path) for path in attempt.outputs if path.exists() or path.is_symlink()]
    assert not left, f"left behind: {left}"
    leftovers = [p.name for p in tmp_path.rglob(".*.tmp")]
    assert not leftovers, f"temporary files left behind: {leftovers}"


def test_the_fake_profiler_writes_a_whole_profile(tmp_path, dataset):
    """The control for the profiler cases: with a whole export and a clean log the job writes its outputs, among
    them the machine's conditions around the profiler's run (it sleeps 0.3 s here)."""
    raw = H200_RAW.read_text()
    attempt = profile_job(tmp_path, dataset, fake_profiler(tmp_path, "ncu", ncu_log(41), raw=raw,
                                                           details=H200_DETAILS.read_text(), seconds=0.3))
    attempt.act()
    assert all(path.exists() for path in attempt.outputs)
    assert (tmp_path / "ncu_raw.csv").read_text() == raw
    recorded = json.loads((tmp_path / "ncu_conditions.json").read_text())
    assert recorded["scope"] == "the profiler's whole run" and recorded["wall_ms"] >= 300
    assert recorded["other_load_cores"] >= 0 and recorded["before"]["speed_probe_ms"] > 0


def test_the_training_control_writes_valid_json(checkpoint):
    """The control for the training cases: the same job with a sane learning rate writes strict JSON."""
    summary = json.loads((checkpoint.parent / "train.json").read_text(), parse_constant=_reject)
    assert np.isfinite(summary["final_loss"])
    assert torch.load(checkpoint, weights_only=True)["workload"]["diffusion"] == DIFFUSION


def _reject(constant: str):
    raise AssertionError(f"{constant} in JSON")


# --- truncated copies of every real ncu export ----------------------------------------------------------------------

REAL_EXPORTS = sorted(FIXTURES.glob("ncu_raw_h200*.csv")) + sorted(FIXTURES.glob("h200_small/*/*/ncu_raw.csv.gz"))
REAL_EXPORTS += [REFERENCE / "baseline" / "profile" / "sample" / "ncu_raw.csv.gz",
                 REFERENCE / "tf32" / "profile" / "train" / "ncu_raw_first300.csv.gz"]


def _text(path: Path) -> str:
    return gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()


@pytest.mark.parametrize("path", REAL_EXPORTS, ids=[str(p.relative_to(REPO)) for p in REAL_EXPORTS])
def test_every_real_export_cut_at_a_row_boundary_is_refused(path):
    """Cut after half its kernel rows, a real export still parses (its rows are whole), and is refused against the
    kernel count ncu's log gives; without its first rows or one in the middle it is refused on its own."""
    from profiling import ncu
    from profiling.errors import ProfilingError

    text = _text(path)
    kernels = ncu.exported_kernels(text)
    lines = text.splitlines(keepends=True)
    half = "".join(lines[: 2 + kernels // 2])
    assert ncu.exported_kernels(half) == kernels // 2
    profiled = ncu.profiled_kernels(ncu_log(kernels))
    ncu.check_kernel_count(kernels, profiled, "whole")
    with pytest.raises(ProfilingError, match=rf"holds {kernels // 2} kernels but ncu profiled {kernels} .*cut short"):
        ncu.check_kernel_count(ncu.exported_kernels(half), profiled, "cut")
    for damaged in ("".join(lines[:2] + lines[3:]), "".join(lines[: 2 + kernels // 2] + lines[3 + kernels // 2:])):
        assert "kernel IDs must run 0, 1, 2" in ncu.check_raw_csv(damaged)


@pytest.mark.parametrize("name", ["ncu-details-cut-at-a-row-boundary", "ncu-details-cut-inside-its-last-kernel",
                                  "ncu-export-cut-at-a-row-boundary-and-a-log-without-ncu-lines"])
def test_the_export_command_a_cut_page_names_writes_it_again(name, tmp_path, dataset, monkeypatch):
    """Doing what the line says: its ncu command (here a stand-in ncu on PATH that prints the report's pages as the
    real one does) writes the page again, and the same job then succeeds."""
    attempt = CASES[name][0](tmp_path, dataset)
    message = refusal(attempt.act)
    command = message.split("fix: export it again from the report: ", 1)[1].split(" (or delete ", 1)[0]
    assert command.startswith(f"ncu -i {tmp_path / 'ncu.ncu-rep'} --csv --page "), command
    tools = tmp_path / "bin"
    tools.mkdir()
    fake_profiler(tools, "ncu", "", raw="".join(real_page("raw")), details="".join(real_page("details")))
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    subprocess.run(command, shell=True, check=True)
    attempt.act()
    assert all(path.is_file() for path in attempt.outputs)


def test_profiled_kernels_reads_a_real_launch_count_log():
    """With --launch-count ncu numbers its progress lines '- ID (K/N):'; a real log of 40 kernels (H200, ncu
    2025.3.1, --set full, tests/fixtures/profiling/h200_set_full.yaml) counts 40, not 0."""
    from profiling import ncu

    log = (REPO / "tests/fixtures/profiling/ncu_log_h200_set_full_launch_count.txt").read_text()
    assert "(40/40)" in log
    assert ncu.profiled_kernels(log) == 40


def test_profiled_kernels_reads_ncus_log():
    from profiling import ncu

    assert ncu.profiled_kernels(ncu_log(7)) == 7
    assert ncu.profiled_kernels("python says hello\n") is None  # not ncu's output: the count is unknown


def test_json_results_refuse_nan(tmp_path):
    from jobio.errors import write_json

    with pytest.raises(ValueError, match=r"final_loss is not a finite number"):
        write_json(tmp_path / "train.json", {"final_loss": float("nan"), "step_time": {"n": 2}})
    assert list(tmp_path.iterdir()) == []


def test_every_case_is_in_the_troubleshooting_page():
    """docs/troubleshooting.md lists every case by its id, and no other."""
    section = (REPO / "docs" / "troubleshooting.md").read_text()
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", section, re.M))
    dataset = {"dataset-" + make.__name__.strip("_").replace("_", "-") for make in BAD_INPUTS}  # tests/test_data.py
    cases = set(CASES) | set(SNAKEMAKE_CASES) | dataset
    assert listed == cases, cases ^ listed
    assert len(CASES) + len(SNAKEMAKE_CASES) >= 36


# --- cases about Snakemake itself: one copy of the workflow, shared ---------------------------------------------------

# The tiny U-Net of tests/tiny.yaml, on its 8^3 volumes, with an absurd learning rate.
DIVERGING = """dataset: {cases: 3, heldout: 1, shape: [8, 8, 8]}
model: {base_width: 32, channel_mult: [1, 2], attention_downsample_rates: [2]}
diffusion: {timesteps: 4}
quality: {reference_shape: [8, 8, 8]}
train: {lr: 1.0e+30, warmup_steps: 1, measured_steps: 2, bare_loop_steps: 0}
run_variants: [baseline]
fast_sampling: {samplers: {deis_ipndm: [2], ddim: [2], dpm_solver_pp_2m: [2]}}
"""


@pytest.fixture(scope="module")
def workflow(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("errors") / "wf")


def _started_from_a_subfolder(workdir: Path) -> tuple[subprocess.CompletedProcess, list[Path]]:
    (workdir / "sub").mkdir(exist_ok=True)
    return snakemake(workdir / "sub", "-s", "../Snakefile", "--cores", "1", "results/wholehead/dataset/prepared"), [
        workdir / "sub" / "results", workdir / "results" / "wholehead" / "dataset"]


def _profiler_name_in_an_overlay(workdir: Path) -> tuple[subprocess.CompletedProcess, list[Path]]:
    (workdir / "perf.yaml").write_text("hardware:\n  cpu: {device: cpu, profilers: [torch, perf]}\n")
    return snakemake(workdir, "--cores", "1", "--configfile", "perf.yaml", "--",
                     "results/wholehead/dataset/prepared"), [workdir / "results"]


def _metric_sets_with_a_yaml_error(workdir: Path) -> tuple[subprocess.CompletedProcess, list[Path]]:
    (workdir / "sets.yaml").write_text("paper:\n  - gpu__time_duration.sum\n  - [sm__cycles_elapsed.max\n")
    (workdir / "sets-overlay.yaml").write_text(  # a label whose profilers include ncu reads the metric sets
        "gpus: [h200]\nhardware: {h200: {device: cuda, profilers: [torch, ncu]}}\n"
        "profiling: {ncu: {metric_sets: sets.yaml}}\n")
    return snakemake(workdir, "-n", "--configfile", "sets-overlay.yaml"), []


def _overlay_with_a_key_given_twice(workdir: Path) -> tuple[subprocess.CompletedProcess, list[Path]]:
    # Snakemake reads it without a word, keeping the second `train:` (the learning rate of the first is lost).
    (workdir / "twice.yaml").write_text("train:\n  lr: 0.001\nsample: {masks: 1}\ntrain:\n  warmup_steps: 3\n")
    return snakemake(workdir, "-n", "--configfile", "twice.yaml", "--", "results/wholehead/dataset/prepared"), []


def _diverging_training_stops_the_run(workdir: Path) -> tuple[subprocess.CompletedProcess, list[Path]]:
    (workdir / "diverging.yaml").write_text(DIVERGING)
    run = snakemake(workdir, "--cores", "1", "--configfile", "diverging.yaml", "--",
                    "results/wholehead/cpu/baseline/sample.json")
    folder = workdir / "results" / "wholehead" / "cpu" / "baseline"
    log = (folder / "logs" / "train.log").read_text()
    assert log.strip().splitlines()[-1].startswith("error: training diverged"), log  # the log keeps the line
    return run, [folder / name for name in ("train.json", "train_steps.csv", "checkpoint.pt", "sample.json")]


SNAKEMAKE_CASES = {
    "started-from-a-subfolder": (
        _started_from_a_subfolder,
        r"Snakemake runs in \S+/sub, but this workflow runs in its own folder \S+ \(its paths are relative to it\); "
        r"fix: cd \S+ and run it there"),
    "unknown-profiler-name-in-an-overlay": (
        _profiler_name_in_an_overlay,
        r"config: hardware\.cpu\.profilers\[1\]: 'perf' is not one of \['torch', 'ncu', 'nsys'\] \(set in "
        r"perf\.yaml\)"),
    "metric-sets-with-a-yaml-error": (
        _metric_sets_with_a_yaml_error,
        r"\S+sets\.yaml:4:1: YAML syntax error in this metric-set file \(profiling\.ncu\.metric_sets\): (did not find "
        r"expected|expected) ',' or '\]'(, but got '<stream end>')? \(while parsing a flow sequence that starts "
        r"at line 3\); fix:"),
    "overlay-with-a-key-given-twice": (
        _overlay_with_a_key_given_twice,
        r"\S+twice\.yaml:4:1: YAML error in this overlay: key 'train' appears twice in one mapping \(first at line "
        r"1\), and the second would silently replace the first; fix: write the key once, with the settings of both"),
    "diverging-training-stops-the-run": (
        _diverging_training_stops_the_run,
        r"error: training diverged: the loss is (nan|inf) at optimizer step \d+, micro-batch \d of 2"),
}


@pytest.mark.workflow
@pytest.mark.parametrize("name", list(SNAKEMAKE_CASES))
def test_snakemake_stops_in_one_line_and_leaves_nothing(name, workflow):
    run_case, pattern = SNAKEMAKE_CASES[name]
    done, outputs = run_case(workflow)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-2000:]
    assert re.search(pattern, output), output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    left = [str(path) for path in outputs if path.exists()]
    assert not left, f"left behind: {left}"


def test_a_number_written_as_yaml_1_2_writes_it_is_that_number(tmp_path):
    """`lr: 1e-4` is a number in YAML 1.2 but the string '1e-4' to PyYAML (YAML 1.1), and so to Snakemake: the
    check reads it as YAML 1.2 does where the schema wants a number, and a word there is still refused."""
    config = read_mapping(REPO / "config.yaml")
    update_config(config, {"train": {"lr": "1e-4"}, "comparison": {"budget_seconds": "+2E2"}})
    check_config(config, REPO, [REPO / "config.yaml"])
    assert config["train"]["lr"] == 0.0001 and type(config["train"]["lr"]) is float
    assert config["comparison"]["budget_seconds"] == 200.0
    config = read_mapping(REPO / "config.yaml")
    update_config(config, {"train": {"lr": "1e-4x"}})
    with pytest.raises(ConfigError, match=r"train\.lr: '1e-4x' is not of type 'number'"):
        check_config(config, REPO, [REPO / "config.yaml"])


@pytest.mark.workflow
def test_an_overlay_with_lr_1e_4_plans(workflow):
    (workflow / "lr.yaml").write_text("train:\n  lr: 1e-4\n")
    planned = snakemake(workflow, "-n", "--configfile", "lr.yaml", "--", "results/wholehead/cpu/baseline/train.json")
    assert planned.returncode == 0, planned.stdout[-1500:] + planned.stderr[-1500:]


def test_a_reference_set_in_the_layout_before_workloads_is_refused_with_a_move_that_works(tmp_path):
    """A set exported before the workload became an axis (data/reference/<label>/): refused in one line with the
    command that moves it; after doing what the line says, the same configuration is accepted."""
    shutil.copytree(REFERENCE / "bf16", tmp_path / "data" / "reference" / "h100" / "bf16")
    write_manifest(tmp_path / "data" / "reference" / "h100")  # as exported then: every set carries one
    overlay = {"reference_results": ["h100"]}
    config = read_mapping(REPO / "config.yaml")
    update_config(config, overlay)
    with pytest.raises(ConfigError) as refused:
        check_config(config, tmp_path, [REPO / "config.yaml"])
    message = str(refused.value)
    assert message.startswith("config: reference_results lists 'h100'") and "\n" not in message, message
    fix = message.split("fix: ", 1)[1]
    assert fix == ("mkdir -p data/reference/wholehead && git mv data/reference/h100 data/reference/wholehead/h100")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "data"], cwd=tmp_path, check=True)
    subprocess.run(fix, shell=True, cwd=tmp_path, check=True)
    check_config(config, tmp_path, [REPO / "config.yaml"])
    assert (tmp_path / "data/reference/wholehead/h100/bf16/train.json").is_file()


@pytest.mark.workflow
def test_the_command_a_truncated_checkpoint_names_trains_again(finished_run, tmp_path):
    """Doing what the line says: a checkpoint cut in half, with its time kept (everything downstream looks up to
    date, so deleting it alone gives "Nothing to be done"), stops the sampling job that reads it; the command in the
    line (the same one with --forcerun of the checkpoint) trains that variant again and samples from it. (In a copy
    of the tiny run, with its configuration as a file of the checkout's top folder, as a user would keep one.)"""
    workdir = copy_run(finished_run, tmp_path / "wf")
    shutil.copy(REPO / "tests" / "tiny.yaml", workdir / "tiny.yaml")
    target = "results/wholehead/cpu/baseline/sample.json"
    saved = workdir / "results/wholehead/cpu/baseline/checkpoint.pt"
    times = saved.stat()
    data = saved.read_bytes()
    saved.write_bytes(data[: len(data) // 2])
    os.utime(saved, ns=(times.st_atime_ns, times.st_mtime_ns))
    refused = snakemake(workdir, "--cores", "1", "--configfile", "tiny.yaml", "--forcerun", target, "--", target)
    assert refused.returncode != 0
    (line,) = {text for text in (refused.stdout + refused.stderr).splitlines()
               if text.startswith("error: checkpoint ")}
    command = line.split("; fix: run ", 1)[1].split(" (the same command forcing its train job", 1)[0]
    assert command == ("snakemake --cores 1 --configfile tiny.yaml --forcerun results/wholehead/cpu/baseline/"
                       f"checkpoint.pt {target} -- {target}"), command
    fixed = snakemake(workdir, *shlex.split(command)[1:])  # the line's arguments, as they are
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert "Training baseline on cpu" in fixed.stdout + fixed.stderr
    assert (workdir / target).is_file()
    checkpoints.load_checkpoint(saved)


@pytest.mark.workflow
@pytest.mark.parametrize("target, setting", [
    ("results/wholehead/cpu/tf32/train.json", "run_variants"),
    ("results/wholehead/cpu/study/tf32/seed0/run.json", "quality_study.variants"),
])
def test_a_target_outside_the_configured_variants_names_the_setting_and_its_fix_plans(workflow, target, setting):
    """Snakemake alone answers "No rule to produce ..."; the workflow names the setting, and the overlay its line
    prints makes the same target plan."""
    refused = snakemake(workflow, "-n", "--", target)
    assert refused.returncode != 0
    (line,) = [text for text in (refused.stdout + refused.stderr).splitlines() if text.startswith(f"target {target}:")]
    assert f"is defined but not in {setting}" in line, line
    command = line.split("fix: add it in an overlay: ", 1)[1].split(", then add --configfile more.yaml")[0]
    subprocess.run(command, shell=True, cwd=workflow, check=True)
    planned = snakemake(workflow, "-n", "--configfile", "more.yaml", "--", target)
    assert planned.returncode == 0, planned.stderr[-2000:]


def test_targets_of_another_workload_or_label_name_the_setting():
    from planning.targets import target_problem

    config = read_mapping(REPO / "config.yaml")
    assert target_problem("results/wholehead/cpu/baseline/train.json", config) is None
    assert target_problem("results/wholehead/dataset/prepared", config) is None
    assert target_problem("results/wholehead/cpu/study/summary.md", config) is None  # the study's own files
    assert target_problem("results/wholehead/cpu/study/logs/compare.log", config) is None
    # A comparison group's own files (the label's comparison_groups/ folder is no variant).
    assert target_problem("results/wholehead/cpu/comparison_groups/1.json", config) is None
    assert target_problem("paper/figures/all", config) is None
    assert "fix: add config/brats.yaml" in target_problem("results/brats/cpu/baseline/train.json", config)
    assert "hardware label 'h200' is not measured" in target_problem("results/wholehead/h200/tf32/train.json", config)
    assert "'tf64' is not a defined variant" in target_problem("results/wholehead/cpu/tf64/train.json", config)


def test_a_target_in_the_layout_before_workloads_names_its_path_today():
    from planning.targets import target_problem

    config = read_mapping(REPO / "config.yaml")
    fix = "; fix: ask for "
    assert target_problem("results/cpu/baseline/train.json", config).endswith(
        fix + "results/wholehead/cpu/baseline/train.json")
    assert target_problem("results/dataset/prepared_brats", config).endswith(
        fix + "results/brats/dataset/prepared, and add config/brats.yaml after your other overlays")
    assert target_problem("results/h200_brats/tf32/train.json", config).endswith(
        fix + "results/brats/h200/tf32/train.json, and add config/brats.yaml after your other overlays")
    assert target_problem("results/nowhere/x.json", config).endswith("; fix: correct the path")


def test_a_target_of_another_workload_names_the_overlay_that_set_the_workload(tmp_path):
    """The fix names the file the user gave (here their own BraTS overlay), not one they never gave."""
    from planning.targets import target_problem

    mine = tmp_path / "my-brats.yaml"
    mine.write_text("workload: brats\n")
    config = read_mapping(REPO / "config.yaml")
    update_config(config, read_mapping(mine))
    problem = target_problem("results/wholehead/cpu/baseline/train.json", config, [REPO / "config.yaml", mine])
    assert problem.endswith(f"; fix: leave out {mine}, which sets workload: brats"), problem


@pytest.mark.workflow
def test_the_path_a_target_in_the_old_layout_is_told_plans(workflow):
    refused = snakemake(workflow, "-n", "--", "results/cpu/baseline/train.json")
    assert refused.returncode != 0
    (line,) = [text for text in (refused.stdout + refused.stderr).splitlines()
               if text.startswith("target results/cpu/baseline/train.json:")]
    target = line.split("; fix: ask for ", 1)[1]
    planned = snakemake(workflow, "-n", "--", target)
    assert planned.returncode == 0, planned.stderr[-2000:]


# --- two runs on one results folder -----------------------------------------------------------------------------------


def test_the_results_lock_names_its_holder_and_dies_with_it(tmp_path):
    """While another process holds results/ (a Snakemake run of another checkout), taking it is refused in one line
    naming that run; once the holder is killed (SIGKILL: no handler runs) it is free again, with no stale lock."""
    from planning.results_lock import ResultsInUse, hold

    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from planning.results_lock import hold; "
         f"h = hold({str(tmp_path)!r}, 'snakemake --cores 1 -- paper/figures/all'); print('held', flush=True); "
         "time.sleep(600)"],
        env={**os.environ, "PYTHONPATH": str(REPO / "workflow" / "scripts")}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ResultsInUse) as refused:
            hold(tmp_path, "snakemake --cores 1 -- export")
        message = str(refused.value)
        assert message.startswith(f"{tmp_path / 'results'}/ is in use by another run of this workflow: pid "
                                  f"{holder.pid} on ") and "\n" not in message, message
        assert "snakemake --cores 1 -- paper/figures/all; two runs on one results folder" in message
        assert message.endswith("fix: wait for that run to end, or give this checkout a results folder of its own")
    finally:
        holder.kill()
        holder.wait()
    held = hold(tmp_path, "snakemake --cores 1 -- export")
    assert f"pid {os.getpid()} " in (tmp_path / "results" / ".run.lock").read_text()
    held.close()


@pytest.mark.workflow
def test_a_second_checkout_sharing_the_results_folder_is_refused_while_the_first_runs(tmp_path):
    """Two checkouts, the second's `results` a link to the first's: while the first runs (held still, with
    SIGSTOP, once it has taken the folder), the second stops before any job in one line naming the first run; the
    first then finishes untouched, and the second runs once the first has ended."""
    first, second = copy_workflow(tmp_path / "first"), copy_workflow(tmp_path / "second")
    (first / "results").mkdir()
    (second / "results").symlink_to(first / "results")
    tiny = ("--cores", "1", "--configfile", "tests/tiny.yaml", "--")
    # The first run's target is the dataset: it is held still once it has taken the folder, and only has to finish.
    # It is forked by the Snakemake server as every other command of the tests (its pid is the Snakemake process's).
    log = tmp_path / "first.log"
    running = start_snakemake([*tiny, "results/wholehead/dataset/prepared"], first, log)
    lock = first / "results" / ".run.lock"
    try:
        # The first run takes the folder when its first job is about to start (no wall-clock limit: a loaded machine
        # only makes that later; a run that ends without taking it fails here).
        while f"pid {running.pid} " not in (lock.read_text() if lock.exists() else ""):
            assert running.poll() is None, "the first run ended without taking the results folder: " + \
                log.read_text()[-3000:]
            time.sleep(0.05)
        os.kill(running.pid, signal.SIGSTOP)
        refused = snakemake(second, *tiny, "results/wholehead/dataset/prepared")
        output = refused.stdout + refused.stderr
        assert refused.returncode != 0, output[-3000:]
        (line,) = [text for text in output.splitlines() if "is in use by another run of this workflow" in text]
        assert line.startswith(f"{(first / 'results').resolve()}/ is in use by another run of this workflow: pid "
                               f"{running.pid} on "), line
        assert f"from {first.resolve()}, since " in line
        assert f"(here results is {(first / 'results').resolve()})" in line
        assert "Traceback" not in output and "Deriving" not in output  # refused before its first job
    finally:
        os.kill(running.pid, signal.SIGCONT)
    running.wait()
    assert running.returncode == 0, log.read_text()[-3000:]
    again = snakemake(second, "--forcerun", "results/wholehead/dataset/prepared", *tiny,
                      "results/wholehead/dataset/prepared")
    assert again.returncode == 0, again.stderr[-3000:]
