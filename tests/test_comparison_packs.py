"""A comparison group whose processes do not fit on the device together is timed in packs (medddpm.comparison's
docstring): on an 80 GB H100 the first group of config/frontier.yaml, sized for a 141 GB H200, ran out of memory
building its fourth process (data/measurements/h100-2026-12-06-ladder).

A CPU never runs out of device memory beside a few tiny processes, so these tests hand the group's job a model of
that H100 instead of its worker processes: each variant's process holds, once built, the memory its process held on
the H100 when the fourth build failed (the numbers of the error line in the job's log), and a build beyond the card's
room fails with the worker's own error line as recorded there. What is tested is the job's own code: which variants it
times together, the rounds and records it writes, and the verdicts judged from them."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import REPO
from jobio.errors import ExpectedError
from measurement import verdicts
from medddpm import comparison, comparison_workers, compile_cache
from medddpm.settings import ComparisonSettings

RECORD = REPO / "data/measurements/h100-2026-12-06-ladder"
SETTINGS = dict(references=("baseline", "tf32"), phases=("train", "sample"), confidence=0.95, precision=0.03,
                band=0.10, min_rounds=6, max_rounds=8, budget_seconds=1.0, warmup_steps=1, load_difference_cores=0.5)


def recorded_out_of_memory_line() -> str:
    """The one-line error bf16_channels_last's process sent on the H100 (the job's log, as Snakemake printed it)."""
    log = (RECORD / "ladder/snakemake_ladder.log").read_text()
    return re.search(r"process failed: (OutOfMemoryError: [^\n]+)", log).group(1)


def h100() -> tuple[float, dict[str, float]]:
    """(MiB the processes could hold on the H100, MiB each variant's process holds once built), from the recorded
    error: the three processes built before the failure as it lists them, the failing one what it held plus the 512
    MiB it asked for, the card's room what they held plus the 503.44 MiB left free. bf16_channels_last_fused: its
    training peak of the shipped H200 bench (8.27 GiB) and some 1.5 GiB of context and cache, as tf32's process held
    22.94 GiB against its 19.24 GiB peak."""
    line = recorded_out_of_memory_line()
    held = [float(value) * 1024 for value in re.findall(r"Process \d+ has ([\d.]+) GiB memory in use", line)]
    failing = float(re.search(r"this process has ([\d.]+) GiB memory in use", line).group(1)) * 1024
    asked = float(re.search(r"Tried to allocate ([\d.]+) MiB", line).group(1))
    free = float(re.search(r"of which ([\d.]+) MiB is free", line).group(1))
    room = sum(held) + failing + free
    return room, {"baseline": held[0], "tf32": held[1], "bf16": held[2], "bf16_channels_last": failing + asked,
                  "bf16_channels_last_fused": 9.8 * 1024}


class ModelledDevice:
    """Workers' stand-in: the variants' processes on a device of `capacity` MiB. A build adds the variant's
    footprint to what the device holds, or fails as the H100's did where that passes the capacity; stopping a
    process frees its memory. A step's time is the variant's own (ms) times a shared round-to-round drift and a
    little noise of its own, as load moves both sides of a pairing."""

    def __init__(self, capacity: float, footprint: dict[str, float], ms: dict[str, float]):  # MiB, MiB, ms
        self.capacity, self.footprint, self.ms = capacity, footprint, ms
        self.held: dict[str, float] = {}
        self.most = 0.0
        self.started: list[list[str]] = []
        self.rng = np.random.default_rng(0)
        self.pids = iter(range(1000, 2000))

        self.ahead: list[list[str]] = []  # the processes started to compile ahead (medddpm.comparison_workers)
        self.events: list[tuple[str, str, str]] = []  # (sent or answered, process, phase) of every build

    def __call__(self, names: list[str], ahead: bool = False):
        (self.ahead if ahead else self.started).append(list(names))
        return ModelledPool(self, names, ahead)


class ModelledPool:
    def __init__(self, device: ModelledDevice, names: list[str], ahead: bool = False):
        self.device, self.names = device, names
        self.sides = {name: ModelledSide(device, name, next(device.pids), f"{name} ahead" if ahead else name)
                      for name in names}

    def __enter__(self) -> dict:
        return dict(self.sides)

    def stop(self, names: list[str]) -> None:
        for name in names:
            side = self.sides.pop(name, None)
            if side is not None:
                self.device.held.pop(side.key, None)

    def __exit__(self, *exc) -> None:
        self.stop(list(self.names))


class ModelledSide:
    def __init__(self, device: ModelledDevice, name: str, pid: int, key: str):
        self.device, self.name, self.pid, self.key = device, name, pid, key  # key: what it holds on the device under

    def ask(self, request, phase, kwargs):
        self.send(request, phase, kwargs)
        return self.receive()

    def send(self, request, phase, kwargs) -> None:
        self.phase = phase
        self.device.events.append(("sent", self.key, phase))

    def receive(self) -> dict:
        """A build: the process grows to its phase's footprint (a number: the same in every phase), keeping what
        it held (the caching allocator gives nothing back)."""
        device, footprint, phase = self.device, self.device.footprint[self.name], self.phase
        device.events.append(("answered", self.key, phase))
        need = footprint[phase] if isinstance(footprint, dict) else footprint
        more = max(0.0, need - device.held.get(self.key, 0.0))
        if sum(device.held.values()) + more > device.capacity:
            raise comparison_workers.OutOfMemory(self.name, recorded_out_of_memory_line())
        device.held[self.key] = device.held.get(self.key, 0.0) + more
        device.most = max(device.most, sum(device.held.values()))
        return {"process": self.pid, "seconds": 0.5, "compile_cache": dict.fromkeys(compile_cache.COUNTERS, 0)}

    def timed(self) -> tuple[float, float]:
        return self.device.ms[self.name] * (1 + 0.002 * self.device.rng.standard_normal()), 0.0


def runs_of(names: list[str]) -> dict:
    from config_settings import config_section
    from medddpm.runs import start_run
    from medddpm.settings import DeviceSpec
    from medddpm.switches import Variant

    variants = config_section("variants", "tests/tiny.yaml")
    spec = DeviceSpec("cpu", "cpu", None, False)
    return {name: start_run(spec, Variant.from_config(name, variants[name]), REPO, {}) for name in names}


def time_modelled_group(folder: Path, members: list[str], device: ModelledDevice, **settings) -> None:
    """The group's job on the modelled device (`settings`: comparison settings other than SETTINGS')."""
    from config_settings import config_section
    from medddpm.build import ModelSpec
    from medddpm.settings import SampleSettings, TrainSettings, from_mapping

    config = {name: config_section(name, "tests/tiny.yaml") for name in ("model", "diffusion", "train", "sample")}
    comparison.time_group(0, members, ModelSpec.from_params(config["model"], config["diffusion"]),
                          from_mapping(TrainSettings, config["train"], "train"),
                          from_mapping(SampleSettings, config["sample"], "sample"),
                          ComparisonSettings(**(SETTINGS | settings)), runs_of(members), folder / "no-dataset",
                          folder / "1.json", folder / "1.csv", workers=device)


GROUP = ["baseline", "tf32", "bf16", "bf16_channels_last", "bf16_channels_last_fused"]
MS = {"baseline": 1250.0, "tf32": 233.0, "bf16": 179.0, "bf16_channels_last": 277.0, "bf16_channels_last_fused": 151.0}


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("packed")
    device = ModelledDevice(*h100(), MS)
    with contextlib.redirect_stderr(io.StringIO()) as log:
        time_modelled_group(folder, GROUP, device)
    device.log = log.getvalue()
    settings = ComparisonSettings(**SETTINGS)
    verdicts.merge_groups([(folder / "1.json", folder / "1.csv")], [GROUP], settings, folder / "comparison.json",
                          folder / "comparison_rounds.csv")
    return (device, json.loads((folder / "1.json").read_text()), pd.read_csv(folder / "1.csv"),
            json.loads((folder / "comparison.json").read_text()))


def test_the_recorded_h100_error_and_the_cpus_allocator_are_out_of_memory_and_other_failures_are_not():
    assert comparison_workers.out_of_memory(recorded_out_of_memory_line())
    with pytest.raises(RuntimeError) as cpu:
        torch.empty(1 << 60, dtype=torch.uint8)  # more than any machine's memory: the CPU allocator refuses it
    assert comparison_workers.out_of_memory(f"{type(cpu.value).__name__}: {' '.join(str(cpu.value).split())}")
    assert not comparison_workers.out_of_memory("FileNotFoundError: [Errno 2] No such file or directory: 'no-dataset'")


def test_the_model_fails_where_the_h100_failed():
    """The first three processes fit, the fourth does not: 512 MiB asked where 503.44 were free."""
    room, footprint = h100()
    assert sum(footprint[name] for name in GROUP[:4]) > room >= sum(footprint[name] for name in GROUP[:3])


def test_a_group_that_does_not_fit_is_timed_in_packs_each_with_the_references(packed):
    device, record, rounds, _ = packed
    assert [pack["variants"] for pack in record["packs"]] == [
        ["baseline", "tf32", "bf16"], ["baseline", "tf32", "bf16_channels_last", "bf16_channels_last_fused"]]
    assert device.most <= device.capacity
    # The first pack's processes were started for every variant; the second's for the ones left.
    assert device.started == [GROUP, ["baseline", "tf32", "bf16_channels_last", "bf16_channels_last_fused"]]
    assert device.held == {}  # every process stopped at the end
    # The job's log says which variant did not fit beside which, why in the process's own words, and what follows.
    said = [line for line in device.log.splitlines() if line.startswith("comparison: ")]
    assert said == [f"comparison: bf16_channels_last ran out of the device's memory building its train side beside "
                    f"baseline, tf32, bf16 ({recorded_out_of_memory_line()}); bf16_channels_last and "
                    "bf16_channels_last_fused go to the next pack"]
    for pack_number, pack in enumerate(record["packs"]):
        for phase in ("train", "sample"):
            own = rounds[(rounds["pack"] == pack_number) & (rounds["phase"] == phase)]
            assert own["group"].eq(0).all()
            members = own.groupby("round")["variant"].apply(sorted).tolist()
            assert members == [sorted(pack["variants"])] * pack["phases"][phase]["rounds"]
            assert pack["phases"][phase]["rounds"] >= SETTINGS["min_rounds"]
    assert record["phases"]["train"]["rounds"] == max(pack["phases"]["train"]["rounds"] for pack in record["packs"])
    assert record["sides"]["baseline"]["process"] == record["packs"][0]["processes"]["baseline"]
    assert record["packs"][1]["processes"]["baseline"] != record["packs"][0]["processes"]["baseline"]


def test_each_comparison_is_judged_from_its_own_packs_rounds(packed):
    _, _, rounds, merged = packed
    assert merged["groups"][0]["packs"] == [["baseline", "tf32", "bf16"],
                                            ["baseline", "tf32", "bf16_channels_last", "bf16_channels_last_fused"]]
    for phase in ("train", "sample"):
        judged = {(c["reference"], c["variant"]): c for c in merged["phases"][phase]["comparisons"]}
        assert judged[("baseline", "tf32")]["pack"] == 0 and judged[("baseline", "bf16")]["pack"] == 0
        assert judged[("tf32", "bf16_channels_last")]["pack"] == 1
        own = rounds[(rounds["pack"] == 1) & (rounds["phase"] == phase)].pivot(index="round", columns="variant",
                                                                                 values="step_ms")
        ratios = sorted(own["tf32"] / own["bf16_channels_last"])
        middle = (ratios[(len(ratios) - 1) // 2] + ratios[len(ratios) // 2]) / 2
        assert judged[("tf32", "bf16_channels_last")]["speedup"] == pytest.approx(middle, rel=1e-3)
        assert judged[("tf32", "bf16_channels_last")]["rounds"] == len(ratios)
        assert judged[("baseline", "bf16_channels_last_fused")]["speedup"] == pytest.approx(1250 / 151, rel=0.01)
    assert len(merged["variants"]["baseline"]["processes"]) == 2 and len(merged["variants"]["bf16"]["processes"]) == 1


@pytest.mark.parametrize("variant, gib, said, fix", [
    ("bf16", 40, "bf16 does not fit in the device's memory beside the references' processes (baseline, tf32)",
     "compare it with fewer references (comparison.references) or on a device with more memory"),
    ("tf32", 60, "the reference tf32 does not fit in the device's memory beside the other references' processes "
                 "(baseline)", "fewer references (comparison.references) or a device with more memory"),
])
def test_a_variant_that_does_not_fit_beside_the_references_alone_ends_the_job_in_one_line(tmp_path, variant, gib,
                                                                                          said, fix):
    room, footprint = h100()
    device = ModelledDevice(room, {**footprint, variant: gib * 1024}, MS)
    with pytest.raises(ExpectedError) as failed:
        time_modelled_group(tmp_path, ["baseline", "tf32", "bf16"], device)
    message = str(failed.value)
    assert message.startswith(f"comparison: {said}: OutOfMemoryError: CUDA out of memory.")
    assert message.endswith(f"; fix: {fix}")
    assert "\n" not in message and not list(tmp_path.iterdir()) and device.held == {}


def test_a_group_that_fits_is_one_pack_as_before(tmp_path):
    device = ModelledDevice(141 * 1024, h100()[1], MS)
    time_modelled_group(tmp_path, GROUP, device)
    record = json.loads((tmp_path / "1.json").read_text())
    assert [pack["variants"] for pack in record["packs"]] == [GROUP] and device.started == [GROUP]
    assert set(pd.read_csv(tmp_path / "1.csv")["pack"]) == {0}


def test_a_variant_that_outgrows_the_device_in_a_later_phase_leaves_the_pack_with_its_earlier_rounds(tmp_path):
    """bf16 fits for training, but its sampling side does not while the variant after it holds its training memory:
    the pack is given up (bf16 was its first variant beside the references), bf16 timed alone beside them, then the
    rest; no rounds of the given-up pack are kept."""
    room, footprint = h100()
    members = ["baseline", "tf32", "bf16", "bf16_channels_last_fused"]
    device = ModelledDevice(room, {**footprint, "bf16": {"train": 17 * 1024.0, "sample": 30 * 1024.0}}, MS)
    time_modelled_group(tmp_path, members, device)
    record = json.loads((tmp_path / "1.json").read_text())
    rounds = pd.read_csv(tmp_path / "1.csv")
    # First try: bf16's sampling side does not fit while bf16_channels_last_fused holds its training memory; then
    # bf16 alone beside the references, then the rest.
    assert device.started == [members, ["baseline", "tf32", "bf16"], ["baseline", "tf32", "bf16_channels_last_fused"]]
    assert [pack["variants"] for pack in record["packs"]] == [["baseline", "tf32", "bf16"],
                                                              ["baseline", "tf32", "bf16_channels_last_fused"]]
    for number, pack in enumerate(record["packs"]):
        own = rounds[rounds["pack"] == number]
        assert own.groupby("phase")["variant"].apply(set).tolist() == [set(pack["variants"])] * 2
    assert device.most <= room and device.held == {}
