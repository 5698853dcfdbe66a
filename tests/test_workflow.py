"""The workflow end to end in a temporary copy: the DAG runs, outputs are listed with their hashes, reruns."""

import json

import pytest

from conftest import snakemake
from reporting.manifest import read_manifest, sha256

pytestmark = pytest.mark.workflow


def test_tiny_run_end_to_end_then_nothing_to_do(workflow_copy):
    done = snakemake(workflow_copy, "--cores", "2", "--configfile", "tests/tiny.yaml", "--", "paper/figures/all")
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = read_manifest(workflow_copy / "paper/figures/all")
    expected = {f"paper/figures/{n}.{e}" for n in ("fig08_end_to_end", "fig09_quality") for e in ("pdf", "png")}
    expected |= {f"paper/tables/{n}.{e}" for n in ("tab02_workload", "tab06_quality") for e in ("csv", "tex", "md")}
    assert set(manifest) == expected
    for name, digest in manifest.items():
        path = workflow_copy / name
        assert path.stat().st_size > 0 and sha256(path) == digest

    train = json.loads((workflow_copy / "results/cpu/channels_last/train.json").read_text())
    assert train["provenance"]["switches"]["channels_last"] is True
    assert train["step_time"]["n"] == 2 and train["step_time"]["median_ms"] > 0
    quality = json.loads((workflow_copy / "results/cpu/baseline/quality.json").read_text())
    assert quality["vs_baseline"]["identical"] is True
    assert quality["numeric"]["forward_relative_error"] < 1e-4

    again = snakemake(workflow_copy, "-n", "--configfile", "tests/tiny.yaml", "--", "paper/figures/all")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_gpu_label_on_a_machine_without_it_fails_in_one_line(workflow_copy):
    run = snakemake(workflow_copy, "--cores", "1", "--configfile", "tests/tiny.yaml", "--config", "gpus=[h200]",
                    "--", "results/h200/baseline/train.json")
    assert run.returncode != 0
    assert "error: label 'h200' needs a CUDA GPU matching 'H200', but no CUDA device is visible" in run.stderr
    assert not (workflow_copy / "results/h200/baseline/train.json").exists()


@pytest.mark.parametrize(
    "overlay, message",
    [
        ("dataset: {shape: [30, 32, 32]}", "must be divisible by 16"),
        ("run_variants: [baseline, fp8]", "'fp8', which is not defined under 'variants'"),
        ("gpus: [mi300]", "'mi300', which is not defined under 'hardware'"),
        ("train: {warmup_steps: 0}", "0 is less than the minimum of 1"),
    ],
)
def test_wrong_config_is_named(workflow_copy, overlay, message):
    (workflow_copy / "bad.yaml").write_text(overlay + "\n")
    run = snakemake(workflow_copy, "-n", "--configfile", "bad.yaml")
    assert run.returncode != 0
    assert message in run.stderr + run.stdout
