"""A comparison group's compiled variants are compiled together ahead of their timed builds
(medddpm.comparison_workers.compile_ahead): on a model of a device (test_comparison_packs.ModelledDevice) which
processes start and in what order the builds run; on the CPU, with real processes and a real inductor compilation,
that the timed builds then find their graphs in the on-disk cache."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from conftest import REPO, random_prepared_dataset
from medddpm import comparison_workers
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
    assert set(record["compiled_ahead"]["builds"]) == set(COMPILED)


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


def test_compiled_ahead_a_timed_build_finds_its_graphs_in_inductors_cache(tmp_path_factory, monkeypatch):
    """Real processes on the CPU, a real inductor compilation into an empty cache folder: the process compiling ahead
    misses the cache, and the timed process's build of the same variant then finds every graph there. (Which
    variants compile ahead, together, and when, is the job's part, tested above on the modelled device.)"""
    from config_settings import config_section
    from medddpm.build import ModelSpec
    from medddpm.runs import start_run
    from medddpm.settings import DeviceSpec, TrainSettings, from_mapping
    from medddpm.switches import Variant

    folder = tmp_path_factory.mktemp("ahead")
    # TORCHINDUCTOR_VEC_ISA_OK=0: scalar C++ instead of a probe build per instruction set (tests/test_compile.py).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(folder / "inductor"))
    monkeypatch.setenv("TORCHINDUCTOR_VEC_ISA_OK", "0")
    config = {name: config_section(name, "tests/tiny.yaml") for name in ("model", "diffusion", "train", "variants")}
    run = start_run(DeviceSpec("cpu", "cpu", None, False),
                    Variant.from_config("bf16_compile", config["variants"]["bf16_compile"]), REPO, {})
    arguments = {"model_spec": ModelSpec.from_params(config["model"], config["diffusion"]),
                 "train": from_mapping(TrainSettings, config["train"], "train"), "run": run,
                 "dataset_dir": random_prepared_dataset(tmp_path_factory)}
    # The training phase only: the sampling phase's compilation would double the time and test nothing more.
    ahead = comparison_workers.compile_ahead(["bf16_compile"], ("train",), lambda name, phase: arguments)
    assert ahead["failed"] == {} and ahead["builds"]["bf16_compile"]["train"]["cache"] == "cold"
    assert os.listdir(folder / "inductor")
    with comparison_workers.Workers(["bf16_compile"]) as sides:
        timed = comparison_workers.build_record(sides["bf16_compile"].ask("build", "train", arguments))
    assert timed["cache"] == "warm" and timed["compile_cache"]["fx_graph_hits"] > 0, timed
    assert timed["seconds"] < ahead["builds"]["bf16_compile"]["train"]["seconds"]
