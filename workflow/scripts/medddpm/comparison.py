"""The paired comparison job of one hardware label: every variant's training step and sampling step timed in
alternating rounds, so that a change of load hits every side (measurement.pairing says why and how the ratios,
intervals and verdicts follow).

Each variant runs in a process of its own (medddpm.comparison_worker), built as its own jobs build it (engine.Training
from the same seed, engine.Sampling of the same initial weights), compiled and warmed up before any round
(compilation, CUDA graph capture and cuDNN autotuning stay outside). One process for all would share state that
makes one variant's time depend on the others': PyTorch keeps one cache of cuDNN convolution plans per process, keyed
by the convolution without the `cudnn.benchmark` switch, so a variant that picks plans by heuristics (bf16) fixed
them for a later variant that should autotune them (bf16_compile_tuned). Measured so on an H200 at 128^3
(data/measurements/h200-2026-12-03-paired): in one process with bf16 and bf16_channels_last, the autotuned rungs'
training steps took 107.8 and 87.9 ms per sample, against 80.5 and 53.7 ms in their own jobs (and 53.9 ms paired
beside eager rungs that share none of its convolutions). Process-wide switches (TF32), inductor's and dynamo's
caches and the allocator's pools stay apart the same way.

A round asks every variant's process for one optimizer step (or one sampling step, at mid-chain), in an order that
rotates from round to round; the others wait, idle, for their turn. Each step runs between its own timer's start and
stop, the device synchronised after it, with the CPU time other processes used meanwhile
(measurement.conditions.OtherLoad). Rounds go on until every comparison's interval is narrow enough to decide
(pairing.StopRule), or the round or time limits end them; what was reached is recorded.

Where the variants' processes do not fit on the GPU together, they run in consecutive groups (`groups`), every
reference in each: each comparison is paired within one group's rounds.

Files, beside the label's runs: comparison.json (per phase: rounds, why they stopped, each comparison's ratio,
interval, verdict, group and the reason where it is "not measurable"; each group's variants, rounds and seconds; the
machine's conditions before and after) and comparison_rounds.csv (every timed step: group, phase, round, position in
its round, variant, ms, other processes' cores).
"""

from __future__ import annotations

import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Listener
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from jobio.errors import ExpectedError, write_json, writing
from measurement import conditions, pairing
from measurement.timing import DeviceTimer, synchronize

from .build import ModelSpec
from .dataset import HeldOut
from .engine import Sampling, Training
from .placement import Placement
from .runs import Run
from .settings import ComparisonSettings, SampleSettings, TrainSettings, as_dict
from .variants import apply_backend

PHASE_UNITS = {"train": "ms per training sample", "sample": "ms per sampling step"}
NO_EFFECT = "not measurable here"


class Side:
    """One variant's step of one phase, ready to be timed."""

    def __init__(self, run: Run, step, prepare=None, per_step: int = 1):
        self.run, self.step, self.prepare, self.per_step = run, step, prepare, per_step

    def timed(self) -> tuple[float, float | None]:
        """(ms per unit, other processes' cores) of one step, with the variant's backend switches in force."""
        apply_backend(self.run.variant)
        if self.prepare:
            self.prepare()
        device = self.run.device
        synchronize(device)
        load = conditions.OtherLoad()
        load.start()
        timer = DeviceTimer(device)
        started = timer.start()
        self.step()
        timer.stop(started)
        synchronize(device)
        others = load.stop()
        return timer.elapsed_ms()[0] / self.per_step, others


def training_side(model_spec: ModelSpec, train: TrainSettings, run: Run, dataset_dir: Path) -> Side:
    apply_backend(run.variant)
    training = Training(model_spec, train, run, dataset_dir)
    training.warm_up()
    for _ in range(max(1, train.warmup_steps)):  # the first eager step also captures a graph-replayed step
        training.prepare()
        training.step()
    return Side(run, training.step, training.prepare, train.gradient_accumulation)


def sampling_side(model_spec: ModelSpec, train: TrainSettings, sample: SampleSettings, run: Run,
                  dataset_dir: Path) -> Side:
    apply_backend(run.variant)
    sampling = Sampling(model_spec.build(train.seed), Placement.of(run))
    condition = HeldOut(dataset_dir, 1).conditions(sampling.placement)[0]
    sampling.warm_up(condition, sample.seed, steps=max(1, sample.warmup_steps))
    generator = torch.Generator(device=run.device).manual_seed(sample.seed)
    x = sampling.placement.input(torch.randn((1, sampling.diffusion.channels, *condition.shape[2:]),
                                             device=run.device, generator=generator))

    def step() -> None:
        with sampling.running():
            sampling.step(x, condition, sampling.middle_step, generator)

    return Side(run, step)


class WorkerSide:
    """A variant's side in its own process (medddpm.comparison_worker): timed() asks it for one step."""

    def __init__(self, name: str, connection):
        self.name, self.connection = name, connection

    def ask(self, *request):
        self.connection.send(request)
        answer = self.connection.recv()
        if answer[0] == "error":
            print(answer[2], file=sys.stderr)
            raise ExpectedError(f"comparison: {self.name}'s process failed: {answer[1]}")
        return answer[1]

    def timed(self) -> tuple[float, float | None]:
        return self.ask("time")


class Workers:
    """One process per variant, each connected back through a Unix socket that only this job knows (a random key)
    and naming itself by its process id first; stopped and waited for on leaving, whatever happened. The processes
    start together: each spends seconds importing torch before it connects."""

    def __init__(self, names: list[str]):
        self.names, self.sides, self.processes = names, {}, []

    def __enter__(self) -> dict[str, WorkerSide]:
        self.folder = tempfile.TemporaryDirectory(prefix="compare-")
        try:
            return self._start()
        except BaseException:
            self.__exit__(None, None, None)  # the processes started so far stopped, the socket's folder removed
            raise

    def _start(self) -> dict[str, WorkerSide]:
        address, key = os.path.join(self.folder.name, "socket"), secrets.token_bytes(16)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])])}
        with Listener(address, family="AF_UNIX", backlog=len(self.names), authkey=key) as listener:
            names = {}
            for name in self.names:
                process = subprocess.Popen([sys.executable, "-m", "medddpm.comparison_worker", address, key.hex()],
                                           env=env)
                self.processes.append(process)
                names[process.pid] = name
            # Accept with a timeout, so that a process that ends before it connects (an import that fails) ends the
            # job instead of leaving it waiting for ever (Listener has no timeout of its own).
            listener._listener._socket.settimeout(1.0)
            while len(self.sides) < len(self.names):
                try:
                    connection = listener.accept()
                except TimeoutError:
                    for process in self.processes:
                        if process.poll() is not None and names[process.pid] not in self.sides:
                            raise ExpectedError(f"comparison: {names[process.pid]}'s process ended (exit status "
                                                f"{process.returncode}) before it connected; its error is above in "
                                                "this log") from None
                    continue
                name = names[connection.recv()]  # in the order they connect, each known by the id it sends first
                self.sides[name] = WorkerSide(name, connection)
        return {name: self.sides[name] for name in self.names}

    def __exit__(self, *exc) -> None:
        for side in self.sides.values():
            try:
                side.connection.send(("stop",))
                side.connection.close()
            except OSError:
                pass
        for process in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        self.folder.cleanup()


def pairs(variants: list[str], references: tuple[str, ...]) -> list[tuple[str, str]]:
    """(reference, variant) of every comparison: each configured reference present against every other variant."""
    return [(reference, variant) for reference in references if reference in variants
            for variant in variants if variant != reference]


def groups(variants: list[str], references: tuple[str, ...], at_once: int | None) -> list[list[str]]:
    """The variants whose processes run together, group after group: every reference present in each group, the
    other variants in their order, split into groups as even as `at_once` processes allow (None: one group).

    Each process keeps its caching allocator's GPU memory through the rounds (releasing it between turns would put
    cudaMalloc calls inside the timed steps), so the processes alive together must fit on the GPU: the thirteen rungs
    of config/frontier.yaml hold about 140 GiB of peaks at 128^3, more than an H200's memory. A reference timed in
    two groups is paired with each group's variants in that group's rounds."""
    present = [reference for reference in references if reference in variants]
    others = [variant for variant in variants if variant not in present]
    if at_once is None or len(variants) <= at_once:
        return [list(variants)]
    room = at_once - len(present)
    if room < 1:
        raise ExpectedError(f"comparison: processes_at_once {at_once} leaves no room beside the {len(present)} "
                            f"reference(s) {present}; fix: set it above {len(present)}, or null")
    count = -(-len(others) // room)
    size, extra = divmod(len(others), count)
    chunks, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        chunks.append(others[start:end])
        start = end
    return [present + chunk for chunk in chunks]


def group_pairs(members: list[str], references: tuple[str, ...], first: bool) -> list[tuple[str, str]]:
    """The comparisons a group's rounds decide: its references against its other variants, and the references
    against each other in the first group only (each comparison once in the job's record)."""
    return [(reference, variant) for reference, variant in pairs(members, references)
            if first or variant not in references]


def judge(reference: str, variant: str, rounds: pd.DataFrame, settings: ComparisonSettings, runs: dict[str, Run],
          changed: list[str]) -> dict:
    """One comparison's ratio, interval and verdict from its rounds (a frame of round, variant, ms, others)."""
    by_round = rounds.pivot(index="round", columns="variant", values="ms")
    ratio = pairing.paired_ratio(list(by_round[reference]), list(by_round[variant]), settings.confidence)
    verdict, why = pairing.verdict(ratio, settings.band), None
    load = rounds.pivot(index="round", columns="variant", values="others")
    difference = (load[reference] - load[variant]).dropna()
    load_difference = float(statistics.median(difference)) if len(difference) else None
    drift = pairing.halves_disagree(list(by_round[reference]), list(by_round[variant]), settings.confidence)
    reference_switches, switches = runs[reference].variant.switches(), runs[variant].variant.switches()
    effective = runs[variant].provenance["switches_effective"]
    differing = [name for name, value in switches.items() if reference_switches.get(name) != value]
    if differing and not any(effective.get(name, True) for name in differing):
        verdict, why = NO_EFFECT, (f"every switch that sets {variant} apart from {reference} "
                                   f"({', '.join(differing)}) has no effect on this device")
    elif changed:
        verdict, why = pairing.UNMEASURABLE, "; ".join(changed)
    elif drift:
        verdict, why = pairing.UNMEASURABLE, ("the first and the second half of the rounds give intervals that do "
                                              "not overlap")
    elif load_difference is not None and abs(load_difference) > settings.load_difference_cores:
        verdict, why = pairing.UNMEASURABLE, (f"the two sides ran under different load: other processes used "
                                              f"{load_difference:+.2f} cores more during {reference}'s steps")
    elif verdict == pairing.UNMEASURABLE:
        why = pairing.undecided_reason(ratio, settings.confidence, settings.band)
    return {"reference": reference, "variant": variant, "rounds": ratio.rounds, "speedup": ratio.speedup,
            "low": ratio.low, "high": ratio.high, "coverage": ratio.coverage,
            "half_width": None if ratio.low is None else ratio.half_width, "halves_disagree": drift,
            "load_difference_cores": load_difference, "verdict": verdict, "why": why}


def measure_phase(phase: str, sides: dict[str, Side], settings: ComparisonSettings, runs: dict[str, Run],
                  progress=None) -> tuple[pd.DataFrame, str, float]:
    """The phase's rounds until the stop rule ends them: (every timed step, why they stopped, seconds)."""
    rule = pairing.StopRule(settings.confidence, settings.precision, settings.band, settings.min_rounds,
                            settings.max_rounds, settings.budget_seconds)
    names = list(sides)
    compared = pairs(names, settings.references)
    rows: list[dict] = []
    started = time.perf_counter()
    bar = progress(phase) if progress else None
    for index in range(settings.max_rounds):
        order = names[index % len(names):] + names[:index % len(names)]  # each variant leads in turn
        for position, name in enumerate(order):
            ms, others = sides[name].timed()
            rows.append({"phase": phase, "round": index, "position": position, "variant": name, "ms": ms,
                         "others": others})
        if bar is not None:
            bar.update(1)
        frame = pd.DataFrame(rows)
        by_round = frame.pivot(index="round", columns="variant", values="ms")
        ratios = [pairing.paired_ratio(list(by_round[r]), list(by_round[v]), settings.confidence) for r, v in compared]
        why = rule.stop(ratios, index + 1, time.perf_counter() - started)
        if why:
            break
    if bar is not None:
        bar.close()
    return pd.DataFrame(rows), why, time.perf_counter() - started


def run_comparison(model_spec: ModelSpec, train: TrainSettings, sample: SampleSettings, settings: ComparisonSettings,
                   runs: dict[str, Run], dataset_dir: Path, out_json: Path, out_rounds: Path) -> None:
    """The label's paired comparisons (module docstring); `runs`: variant -> its Run (start_run of each)."""
    first = next(iter(runs.values()))
    device = first.device
    before = conditions.snapshot(device)
    phases = {phase: {"unit": PHASE_UNITS[phase], "groups": []} for phase in settings.phases}
    tables, processes = [], {}
    grouped = groups(list(runs), settings.references, settings.processes_at_once)
    for number, members in enumerate(grouped):
        label = "" if len(grouped) == 1 else f", group {number + 1} of {len(grouped)}"
        with Workers(members) as sides:
            for phase in settings.phases:
                for name in members:  # one after another: a build (compilation) is never beside a round
                    run = runs[name]
                    common = {"model_spec": model_spec, "train": train, "run": run, "dataset_dir": dataset_dir}
                    pid = sides[name].ask("build", phase, common if phase == "train" else {**common, "sample": sample})
                    processes.setdefault(name, {})[pid] = None  # a reference's process in each group
                frame, why, seconds = measure_phase(
                    phase, sides, settings, {name: runs[name] for name in members},
                    progress=lambda phase: tqdm(total=settings.max_rounds, desc=f"paired {phase} rounds{label}",
                                                mininterval=5))
                frame.insert(0, "group", number)
                tables.append(frame)
                phases[phase]["groups"].append({
                    "variants": members, "rounds": int(frame["round"].max()) + 1, "stopped": why, "seconds": seconds})
    after = conditions.snapshot(device)
    changed = conditions.changes(before, after)
    rounds = pd.concat(tables, ignore_index=True)
    for phase, record in phases.items():
        mine = rounds[rounds["phase"] == phase]
        record["comparisons"] = [{**judge(reference, variant, mine[mine["group"] == number], settings, runs, changed),
                                  "group": number}
                                 for number, group in enumerate(record["groups"])
                                 for reference, variant in group_pairs(group["variants"], settings.references,
                                                                       number == 0)]
        # One group: its own numbers; several: the most rounds any ran, every reason, the phase's whole time.
        record["rounds"] = max(group["rounds"] for group in record["groups"])
        record["stopped"] = ", ".join(dict.fromkeys(group["stopped"] for group in record["groups"]))
        record["seconds"] = sum(group["seconds"] for group in record["groups"])
        record["median_ms"] = mine.groupby("variant")["ms"].median().to_dict()
        record["other_load_cores"] = mine.groupby("variant")["others"].median().to_dict()
    rounds = rounds.rename(columns={"ms": "step_ms", "others": "other_load_cores"})
    with writing(out_rounds):
        rounds.to_csv(out_rounds, index=False, float_format="%.6g")
    write_json(out_json, {
        "provenance": {key: value for key, value in first.provenance.items()
                       if key not in ("variant", "switches", "switches_effective", "backend_flags")},
        "variants": {name: {"switches": run.provenance["switches"],
                            "switches_effective": run.provenance["switches_effective"],
                            "processes": list(processes[name])} for name, run in runs.items()},
        "settings": {"comparison": as_dict(settings), "train": as_dict(train), "sample": as_dict(sample)},
        "conditions": {"before": before, "after": after, "changes": changed},
        "phases": phases,
    })
