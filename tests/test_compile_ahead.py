"""A comparison group's compiled variants are compiled together ahead of their timed builds
(medddpm.comparison_workers.compile_ahead): on a model of a device (test_comparison_packs.ModelledDevice) which
processes start and in what order the builds run; on the CPU, with real processes and a real inductor compilation,
that the timed builds then find their graphs in the on-disk cache."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pandas as pd
import pytest

from conftest import REPO, random_prepared_dataset
from medddpm import compile_cache
from medddpm.settings import ComparisonSettings
from test_comparison_packs import SETTINGS, ModelledDevice, h100, recorded_out_of_memory_line, time_modelled_group

COMPILED = ["bf16_compile", "frontier"]
MS = {"baseline": 1250.0, "tf32": 233.0, "bf16": 179.0, "bf16_compile": 117.0, "frontier": 89.0}
GIB = 1024.0


def footprints(**more: float) -> dict[str, float]:
    return {**h100()[1], "bf16_compile": 14 * GIB, "frontier": 16 * GIB, **more}


def timed_builds(device: ModelledDevice) -> list[tuple[str, str, str]]:
    return [event for event in device.events if not event[1].endswith(" ahead")]


def test_the_compiled_variants_compile_together_before_the_timed_builds_which_follow_one_after_another(tmp_path):
    members = ["baseline", "tf32", "bf16_compile", "bf16", "frontier"]
    device = ModelledDevice(141 * GIB, footprints(), MS)
    time_modelled_group(tmp_path, members, device)
    record = json.loads((tmp_path / "1.json").read_text())
    # Only the compiled variants, in processes of their own; the eager bf16 and the references compile nothing.
    assert device.ahead == [COMPILED] and device.started == [members]
    ahead = device.events[:8]
    assert ahead == [("sent", "bf16_compile ahead", "train"), ("sent", "frontier ahead", "train"),
                     ("answered", "bf16_compile ahead", "train"), ("answered", "frontier ahead", "train"),
                     ("sent", "bf16_compile ahead", "sample"), ("sent", "frontier ahead", "sample"),
                     ("answered", "bf16_compile ahead", "sample"), ("answered", "frontier ahead", "sample")]
    # Then each timed build alone: its answer before the next is sent, every variant, phase by phase.
    timed = timed_builds(device)
    assert len(timed) == len(device.events) - len(ahead) == 4 * len(members)
    assert all(timed[i][0] == "sent" and timed[i + 1] == ("answered", *timed[i][1:]) for i in range(0, len(timed), 2))
    assert [event[1] for event in timed[::2]] == members * 2
    assert device.held == {}  # the processes compiling ahead were stopped, and the timed ones at the end
    assert record["compiled_ahead"]["variants"] == COMPILED and record["compiled_ahead"]["failed"] == {}
    assert record["compiled_ahead"]["seconds"] >= 0
    builds = record["packs"][0]["builds"]
    assert set(builds) == set(members) and builds["frontier"]["sample"]["seconds"] == 0.5
    assert builds["baseline"]["train"]["cache"] is None  # the model's processes look nothing up


def test_a_variant_that_fails_ahead_is_compiled_by_its_timed_build_and_the_log_says_so(tmp_path):
    """Three compiled variants of 30 GiB each do not fit on the H100 together, each does beside the references: the
    third one's failure ahead ends only its own compilation ahead, and each is timed in a pack of its own."""
    room, _ = h100()
    device = ModelledDevice(room, footprints(bf16_compile=30 * GIB, frontier=30 * GIB, bf16_compile_tuned=30 * GIB),
                            {**MS, "bf16_compile_tuned": 88.0})
    members = ["baseline", "tf32", "bf16_compile", "frontier", "bf16_compile_tuned"]
    with contextlib.redirect_stderr(io.StringIO()) as log:
        time_modelled_group(tmp_path, members, device)
    record = json.loads((tmp_path / "1.json").read_text())
    line = recorded_out_of_memory_line()
    assert record["compiled_ahead"]["failed"] == {"bf16_compile_tuned": line}
    assert log.getvalue().splitlines()[0] == (f"comparison: compiling bf16_compile_tuned ahead failed ({line}); its "
                                              "timed build compiles it itself")
    # Its process stopped at once; the other two went on to their sampling builds.
    assert ("sent", "bf16_compile_tuned ahead", "sample") not in device.events
    assert ("answered", "frontier ahead", "sample") in device.events
    assert [pack["variants"] for pack in record["packs"]] == [["baseline", "tf32", name] for name in members[2:]]
    assert device.most <= room and device.held == {}


@pytest.mark.parametrize("members, compile_ahead", [
    (["baseline", "tf32", "bf16_compile", "bf16"], True),  # one compiled variant: as long ahead as in its build
    (["baseline", "tf32", "bf16_compile", "frontier"], False),  # switched off
])
def test_nothing_compiles_ahead_for_one_compiled_variant_or_where_it_is_switched_off(tmp_path, members,
                                                                                    compile_ahead):
    device = ModelledDevice(141 * GIB, footprints(), MS)
    time_modelled_group(tmp_path, members, device, compile_ahead=compile_ahead)
    assert device.ahead == [] and not [event for event in device.events if event[1].endswith(" ahead")]
    assert json.loads((tmp_path / "1.json").read_text())["compiled_ahead"] is None


def test_compiled_ahead_the_timed_builds_find_their_graphs_in_inductors_cache(tmp_path_factory, monkeypatch):
    """Real processes on the CPU, a real inductor compilation into an empty cache folder: the two compiled variants'
    processes compiling ahead miss the cache, and their timed processes' builds then find every graph there."""
    from config_settings import config_section
    from medddpm import comparison
    from medddpm.build import ModelSpec
    from medddpm.runs import start_run
    from medddpm.settings import DeviceSpec, SampleSettings, TrainSettings, from_mapping
    from medddpm.switches import Variant

    folder = tmp_path_factory.mktemp("ahead")
    # TORCHINDUCTOR_VEC_ISA_OK=0: scalar C++ instead of a probe build per instruction set (tests/test_compile.py).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(folder / "inductor"))
    monkeypatch.setenv("TORCHINDUCTOR_VEC_ISA_OK", "0")
    config = {name: config_section(name, "tests/tiny.yaml") for name in ("model", "diffusion", "train", "sample",
                                                                          "variants")}
    names = ["baseline", "bf16_compile", "bf16_compile_tuned"]
    spec = DeviceSpec("cpu", "cpu", None, False)
    runs = {name: start_run(spec, Variant.from_config(name, config["variants"][name]), REPO, {}) for name in names}
    # The training phase only: the sampling phase's compilation would double the time and test nothing more.
    settings = ComparisonSettings(**{**SETTINGS, "references": ("baseline",), "phases": ("train",)})
    with contextlib.redirect_stderr(io.StringIO()):
        comparison.time_group(0, names, ModelSpec.from_params(config["model"], config["diffusion"]),
                              from_mapping(TrainSettings, config["train"], "train"),
                              from_mapping(SampleSettings, config["sample"], "sample"), settings, runs,
                              random_prepared_dataset(tmp_path_factory), folder / "1.json", folder / "1.csv")
    record = json.loads((folder / "1.json").read_text())
    assert record["compiled_ahead"]["variants"] == ["bf16_compile", "bf16_compile_tuned"]
    assert record["compiled_ahead"]["failed"] == {}
    builds = record["packs"][0]["builds"]
    for name in ("bf16_compile", "bf16_compile_tuned"):
        assert builds[name]["train"]["cache"] == "warm", builds[name]
        assert builds[name]["train"]["compile_cache"]["fx_graph_hits"] > 0
    assert builds["baseline"]["train"]["cache"] is None  # eager: nothing looked up
    assert os.listdir(folder / "inductor")
    rounds = pd.read_csv(folder / "1.csv")
    assert set(rounds["variant"]) == set(names) and (rounds["step_ms"] > 0).all()
    assert compile_cache.state(builds["bf16_compile"]["train"]["compile_cache"]) == "warm"
