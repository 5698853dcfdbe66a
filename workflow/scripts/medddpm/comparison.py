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

Where the variants' processes do not fit on the GPU together, they run in consecutive groups
(measurement.comparison_groups), every reference in each: each comparison is paired within one group's rounds. Each
group is a job of its own (`time_group`), so that a run cut short keeps the groups it finished; measurement.verdicts
judges every group's comparisons and writes the label's comparison.json and comparison_rounds.csv.

The groups are planned before any GPU is seen, and a GPU with less memory than the one they were sized for cannot
hold a whole group: on an 80 GB H100 the first group of config/frontier.yaml (baseline, tf32, bf16,
bf16_channels_last, bf16_channels_last_fused, sized for a 141 GB H200) ran out of memory building its fourth process
(data/measurements/h100-2026-12-06-ladder). A group's job therefore times its variants in packs: it builds the
references, then the others in their order, and where a build runs out of the device's memory, that variant and the
ones after it leave the pack (their processes stopped) and make the next pack, with the references in processes of
their own again (where the first variant beside the references fails in a later phase, the variants after it still
holding their earlier phase's memory, the pack is given up and that variant tried alone beside the references). Each
pack's rounds pair its variants as a group's do; a variant that does not fit beside the references alone ends the job
in one line.

Before its packs, a group with two or more compiled variants compiles them together in throw-away processes, for the
on-disk caches their timed builds then find (medddpm.comparison_workers.compile_ahead, which says why nothing timed is
chosen there); each pack's record gives every build's seconds and cache lookups.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from jobio.errors import ExpectedError, write_json, writing
from measurement import conditions, pairing
from measurement.timing import DeviceTimer, synchronize
from measurement.comparison_groups import combined_phase, pairs

from .build import ModelSpec
from .comparison_workers import OutOfMemory, Workers, build_record, compile_ahead
from .dataset import HeldOut
from .engine import Sampling, Training
from .placement import Placement
from .runs import Run
from .settings import ComparisonSettings, SampleSettings, TrainSettings, as_dict
from .variants import apply_backend

PHASE_UNITS = {"train": "ms per training sample", "sample": "ms per sampling step"}


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


class FirstDoesNotFit(Exception):
    """The first variant of a pack beside the references ran out of memory building its side of a phase."""

    def __init__(self, name: str, line: str, later_phase: bool) -> None:
        super().__init__(name)
        self.name, self.line, self.later_phase = name, line, later_phase


def measure_phase(phase: str, sides: dict[str, Side], settings: ComparisonSettings,
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
            rows.append({"phase": phase, "round": index, "position": position, "variant": name, "step_ms": ms,
                         "other_load_cores": others})
        if bar is not None:
            bar.update(1)
        frame = pd.DataFrame(rows)
        by_round = frame.pivot(index="round", columns="variant", values="step_ms")
        ratios = [pairing.paired_ratio(list(by_round[r]), list(by_round[v]), settings.confidence) for r, v in compared]
        why = rule.stop(ratios, index + 1, time.perf_counter() - started)
        if why:
            break
    if bar is not None:
        bar.close()
    return pd.DataFrame(rows), why, time.perf_counter() - started


def time_group(number: int, members: list[str], model_spec: ModelSpec, train: TrainSettings, sample: SampleSettings,
               settings: ComparisonSettings, runs: dict[str, Run], dataset_dir: Path, out_json: Path,
               out_rounds: Path, count: int = 1, workers=None) -> None:
    """One group's rounds (`number` of `count`, 0-based; `runs`: each member's Run, from start_run) in its files:
    <n>.json (what measurement.verdicts needs to judge its comparisons) and <n>.csv (every timed step, with the pack
    whose rounds it belongs to). `workers`: what starts the variants' processes (Workers; a test's model of a device
    with too little memory for them all)."""
    workers = workers or Workers
    device = runs[members[0]].device
    before = conditions.snapshot(device)
    label = "" if count == 1 else f", group {number + 1} of {count}"
    references = [name for name in members if name in settings.references]
    waiting = [name for name in members if name not in references]

    def build_arguments(name: str, phase: str) -> dict:
        common = {"model_spec": model_spec, "train": train, "run": runs[name], "dataset_dir": dataset_dir}
        return common if phase == "train" else {**common, "sample": sample}

    # Compiled ahead only where two or more compile: one alone would compile as long ahead as in its timed build.
    compiled = [name for name in waiting if Placement.of(runs[name]).compiles]
    ahead = (compile_ahead(compiled, settings.phases, build_arguments, workers)
             if settings.compile_ahead and len(compiled) > 1 else None)
    candidates = waiting
    packs, tables = [], []
    while True:
        try:
            split = bool(packs) or candidates != waiting
            pack, frames = time_pack(len(packs), references, candidates, build_arguments, settings, workers, label,
                                     split)
        except FirstDoesNotFit as failure:
            # In a later phase the variants after it still held their earlier phase's memory: alone beside the
            # references it may fit. Where it was alone, or failed in the first phase, it cannot.
            if failure.later_phase and len(candidates) > 1:
                candidates = candidates[:1]
                continue
            raise ExpectedError(
                f"comparison: {failure.name} does not fit in the device's memory beside the references' processes "
                f"({', '.join(references)}): {failure.line}; fix: compare it with fewer references "
                "(comparison.references) or on a device with more memory") from None
        packs.append(pack)
        for frame in frames:
            frame.insert(0, "group", number)
            tables.append(frame)
        waiting = [name for name in waiting if name not in pack["variants"]]
        candidates = waiting
        if not waiting:
            break
    after = conditions.snapshot(device)
    with writing(out_rounds):
        pd.concat(tables, ignore_index=True).to_csv(out_rounds, index=False)  # full precision: judged from these
    phases = {phase: {"unit": PHASE_UNITS[phase], **combined_phase([pack["phases"][phase] for pack in packs])}
              for phase in settings.phases}
    write_json(out_json, {
        "group": number, "groups": count, "variants": members,
        "provenance": {key: value for key, value in runs[members[0]].provenance.items()
                       if key not in ("variant", "switches", "switches_effective", "backend_flags")},
        "sides": {name: {"switches": runs[name].provenance["switches"],
                         "switches_effective": runs[name].provenance["switches_effective"],
                         "process": next(pack["processes"][name] for pack in packs if name in pack["processes"])}
                  for name in members},
        "compiled_ahead": ahead,
        "packs": packs,
        "settings": {"comparison": as_dict(settings), "train": as_dict(train), "sample": as_dict(sample)},
        "conditions": {"before": before, "after": after, "changes": conditions.changes(before, after)},
        "phases": phases,
    })


def time_pack(index: int, references: list[str], candidates: list[str], build_arguments, settings: ComparisonSettings,
              workers, label: str, split: bool = False) -> tuple[dict, list[pd.DataFrame]]:
    """The references and as many of the candidates (variants not yet timed), in their order, as the device holds
    together, timed in rounds: (the pack's record: its variants, their process ids, each build's seconds and
    compilation cache lookups, each phase's rounds, why they stopped and seconds; its timed steps). A variant whose
    build runs out of memory leaves the pack with every one after it; where it is the first beside the references,
    the pack is given up (FirstDoesNotFit). `build_arguments(name, phase)`: a build's keyword arguments. `split`: the
    group is in several packs already (the progress bars say which)."""
    tables, phases, processes, builds = [], {}, {}, {}
    pool = workers(references + candidates)
    with pool as sides:
        names = list(sides)
        for phase in settings.phases:
            for name in list(names):  # one after another: a build (compilation) is never beside a round
                try:
                    built = sides[name].ask("build", phase, build_arguments(name, phase))
                except OutOfMemory as error:
                    if name in references:
                        raise ExpectedError(
                            f"comparison: the reference {name} does not fit in the device's memory beside the other "
                            f"references' processes ({', '.join(other for other in references if other != name)}): "
                            f"{error.line}; fix: fewer references (comparison.references) or a device with more "
                            "memory") from None
                    kept, left = names[:names.index(name)], names[names.index(name):]
                    if not [other for other in kept if other not in references]:
                        raise FirstDoesNotFit(name, error.line, phase != settings.phases[0]) from None
                    print(f"comparison: {name} ran out of the device's memory building its {phase} side beside "
                          f"{', '.join(kept)} ({error.line}); {' and '.join(left)} go to the next pack",
                          file=sys.stderr)
                    pool.stop(left)
                    names = kept
                    tables = [table[table["variant"].isin(names)].copy() for table in tables]  # an earlier phase's
                    break
                processes[name] = built["process"]
                builds.setdefault(name, {})[phase] = build_record(built)
            chosen = {name: sides[name] for name in names}
            pack = f", pack {index + 1}" if split or len(names) < len(references) + len(candidates) else ""
            frame, why, seconds = measure_phase(
                phase, chosen, settings,
                progress=lambda phase: tqdm(total=settings.max_rounds, desc=f"paired {phase} rounds{label}{pack}",
                                            mininterval=5))
            frame.insert(0, "pack", index)
            tables.append(frame)
            phases[phase] = {"rounds": int(frame["round"].max()) + 1, "stopped": why, "seconds": seconds}
    record = {"variants": names, "processes": {name: processes[name] for name in names},
              "builds": {name: builds[name] for name in names}, "phases": phases}
    return record, tables
