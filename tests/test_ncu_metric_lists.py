"""Every metric that a per-architecture Nsight Compute set collects exists on that architecture's chip, as ncu itself
lists it (data/ncu-metrics/<chip>.txt.gz, written by `python3 -m profiling.metric_lists` on a machine with ncu).

A chip whose list is not shipped is skipped with the command that writes it: no list is invented here. The checker and
the list writer are tested on their own with lists and an ncu stand-in written by the test.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from planning.configcheck import ConfigError
from planning.ncu import ncu_settings as planned_settings
from profiling import metric_lists
from profiling.metric_lists import CHIPS, COMMAND, list_path, missing, parse_listing, shipped_list, write_list
from profiling.settings import ncu_settings

REPO = Path(__file__).resolve().parents[1]
METRIC_SETS = yaml.safe_load((REPO / "config" / "ncu-metrics.yaml").read_text())


def shipped_configs() -> dict[str, dict]:
    """The embedded default alone and merged with each shipped overlay that changes profiling settings."""
    base = yaml.safe_load((REPO / "config.yaml").read_text())
    configs = {"config.yaml": base}
    for overlay in sorted((REPO / "config").glob("*.yaml")):
        data = yaml.safe_load(overlay.read_text())
        if overlay.name != "ncu-metrics.yaml" and "profiling" in (data or {}):
            merged = yaml.safe_load((REPO / "config.yaml").read_text())
            update_config(merged, data)
            configs[f"config.yaml + config/{overlay.name}"] = merged
    return configs


def collected(architecture: str) -> dict[str, list[str]]:
    """Every set a label of `architecture` can collect, by where it comes from: each phase's set of every shipped
    configuration, and every named set of config/ncu-metrics.yaml through that architecture's overrides."""
    sets = {}
    for name, config in shipped_configs().items():
        ncu = config["profiling"]["ncu"]
        for phase in config["profiling"]["phases"]:
            sets[f"{name}, {phase} step"] = ncu_settings(ncu, architecture, phase, METRIC_SETS)["metrics"]
            for named in METRIC_SETS:
                chosen = {**ncu, "metrics": named, "by_phase": {}}
                sets[f"set {named!r} with {architecture}'s {phase}-step overrides"] = \
                    ncu_settings(chosen, architecture, phase, METRIC_SETS)["metrics"]
    return sets


def shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


@pytest.mark.parametrize("architecture", sorted(CHIPS))
def test_every_metric_of_every_set_exists_on_the_chip(architecture):
    chip, known = shipped_list(architecture)
    if known is None:
        pytest.skip(f"{shown(list_path(chip))} is not shipped: nothing to check {architecture}'s sets against; write "
                    f"it on a machine with ncu: {COMMAND} (ncu 2025 refuses gv100)")
    problems = [f"{where}: {', '.join(missing(metrics, known))}" for where, metrics in collected(architecture).items()
                if missing(metrics, known)]
    assert not problems, (f"metrics that ncu does not list for {chip} ({shown(list_path(chip))}); override them "
                          f"under profiling.ncu.by_architecture.{architecture}:\n" + "\n".join(problems))


def test_every_architecture_of_the_config_has_a_chip():
    architectures = {spec.get("architecture") for spec in yaml.safe_load((REPO / "config.yaml").read_text())[
        "hardware"].values()} - {None}
    assert architectures <= set(CHIPS)


def test_a_metric_missing_from_a_chips_list_stops_the_plan_in_one_line(tmp_path, monkeypatch):
    """With a list of ga100 that lacks one metric of the A100's sampling set (a list written here, standing for
    ncu's), planning an a100 run that profiles with ncu is refused, naming the metric, the chip's list and the
    override; with the metric listed it plans."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    wanted = collected("sm80")["config.yaml, sample step"]
    lacking = "sm__ops_path_tensor_src_fp16_dst_fp32.sum"
    assert lacking in wanted
    monkeypatch.setattr(metric_lists, "FOLDER", tmp_path)
    write_list(tmp_path / "ga100.txt.gz", ["# written by the test", *(m for m in wanted if m != lacking)])
    with pytest.raises(ConfigError) as refused:
        planned_settings(config, REPO, "a100", "sample")
    assert str(refused.value) == (
        f"config: profiling.ncu collects {lacking} in the sample step of a100 (sm80), which ncu does not list for "
        f"ga100 ({tmp_path / 'ga100.txt.gz'}), so that profile would stop; fix: leave it out for that architecture "
        "(profiling.ncu.by_architecture.sm80.metrics_remove, or by_phase.sample under it)")
    assert planned_settings(config, REPO, "h200", "sample")["metrics"]  # no gh100 list here: not checked
    write_list(tmp_path / "ga100.txt.gz", wanted)
    assert planned_settings(config, REPO, "a100", "sample")["metrics"] == wanted


def test_a_listing_gives_the_full_names_and_nothing_else():
    listing = """Device gh100
---------------------------------------------------------- ------------------------------------------
Metric Name                                                Metric Description
---------------------------------------------------------- ------------------------------------------
dram__bytes_read.sum                                       # of bytes read from DRAM
gpu__time_duration.sum                                     total duration in nanoseconds
sm__cycles_elapsed.avg.per_second                          # of cycles elapsed on SM per second
sm__cycles_elapsed.max                                     # of cycles elapsed on SM
==WARNING== a notice
"""
    assert parse_listing(listing) == ["dram__bytes_read.sum", "gpu__time_duration.sum",
                                      "sm__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.max"]


def test_the_writer_keeps_what_ncu_lists_and_leaves_out_a_chip_it_refuses(tmp_path):
    """An ncu stand-in lists two chips and refuses Volta as ncu 2025 does: two lists are written (with the ncu that
    wrote them), gv100's is not, and the terminal says why."""
    fake = tmp_path / "ncu"
    fake.write_text("""#!/bin/sh
case " $* " in
  *" --version "*) echo "NVIDIA (R) Nsight Compute Command Line Profiler"
                   echo "Version 2025.3.1.0 (build 1)"; exit 0 ;;
  *" gv100 "*) echo "==ERROR== Invalid chip gv100" >&2; exit 1 ;;
esac
echo "Metric Name    Metric Description"
echo "gpu__time_duration.sum    total duration"
echo "sm__cycles_elapsed.max    cycles"
""")
    fake.chmod(0o755)
    out = tmp_path / "lists"
    said = metric_lists.write_lists(str(fake), out, ["ga100", "gh100", "gv100"])
    assert gzip.decompress((out / "ga100.txt.gz").read_bytes()).decode() == (
        "# Version 2025.3.1.0 (build 1): ncu --query-metrics --query-metrics-mode all --chip ga100 (2 metrics)\n"
        "gpu__time_duration.sum\nsm__cycles_elapsed.max\n")
    assert metric_lists.read_list(out / "gh100.txt.gz") == {"gpu__time_duration.sum", "sm__cycles_elapsed.max"}
    assert not (out / "gv100.txt.gz").exists()
    first = (out / "ga100.txt.gz").read_bytes()  # no time stamp: written again, the same bytes
    metric_lists.write_lists(str(fake), out, ["ga100"])
    assert (out / "ga100.txt.gz").read_bytes() == first
    assert said["gv100"].startswith("not written: ncu exited 1 (==ERROR== Invalid chip gv100)")
    assert "Invalid chip gv100" in (out / "gv100.query.txt").read_text()


def test_the_set_check_fails_on_a_chip_list_that_lacks_a_metric(tmp_path, monkeypatch):
    """The check above, given a gh100 list written here without the wgmma count that by_architecture.sm90 adds,
    fails naming it; given every collected metric, it passes."""
    every = sorted({metric for metrics in collected("sm90").values() for metric in metrics})
    monkeypatch.setattr(metric_lists, "FOLDER", tmp_path)
    wgmma = "sm__inst_executed_pipe_tensor_op_gmma.sum"
    write_list(tmp_path / "gh100.txt.gz", [m for m in every if m != wgmma])
    with pytest.raises(AssertionError, match=r"sm__inst_executed_pipe_tensor_op_gmma\.sum"):
        test_every_metric_of_every_set_exists_on_the_chip("sm90")
    write_list(tmp_path / "gh100.txt.gz", every)
    test_every_metric_of_every_set_exists_on_the_chip("sm90")
