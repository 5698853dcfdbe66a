"""The result layout read back: every kind of path the layout writes, parsed to the values it was written from (the
collector's keys, the targets' checks and the export's README all read paths through layout.parse)."""

from pathlib import Path

import pytest
from planning import layout
from planning.layout import REFERENCE, RESULTS, Place, parse

WRITTEN = [
    (layout.run_file("train.json", "brats", "h200", "tf32"),
     Place(RESULTS, "brats", "h200", "tf32", kind="train.json")),
    (layout.run_file("train_steps.csv", "wholehead", "cpu", "baseline"),
     Place(RESULTS, "wholehead", "cpu", "baseline", kind="train_steps.csv")),
    (layout.run_file("sample_steps.csv", "wholehead", "cpu", "baseline"),  # written, not read by the figures
     Place(RESULTS, "wholehead", "cpu", "baseline")),
    (layout.sample_volume(2, "wholehead", "cpu", "baseline"), Place(RESULTS, "wholehead", "cpu", "baseline")),
    (layout.run_log("train.log", "wholehead", "cpu", "baseline"), Place(RESULTS, "wholehead", "cpu", "baseline")),
    (layout.profile_file("ncu_rules.csv", "wholehead", "h200", "tf32", "sample"),
     Place(RESULTS, "wholehead", "h200", "tf32", phase="sample", tool="ncu", kind="rules")),
    (layout.profile_file("torch_kernels.parquet", "wholehead", "h200", "tf32", "train"),
     Place(RESULTS, "wholehead", "h200", "tf32", phase="train", tool="torch", kind="kernels")),
    (layout.profile_file("nsys_summary.csv", "wholehead", "h200", "tf32", "train"),
     Place(RESULTS, "wholehead", "h200", "tf32", phase="train", tool="nsys", kind="summary")),
    (layout.profile_file("ncu_raw.csv", "wholehead", "h200", "tf32", "train"),
     Place(RESULTS, "wholehead", "h200", "tf32", phase="train")),
    (layout.study_file("comparison.json", "brats", "a100", "bf16", 3),
     Place(RESULTS, "brats", "a100", "bf16", study=True, seed=3, kind="study_comparison")),
    (layout.study_file("samples/sample_000.nii.gz", "brats", "a100", "bf16", 3),
     Place(RESULTS, "brats", "a100", "bf16", study=True, seed=3)),
    (layout.study_label_file("summary.md", "wholehead", "cpu"), Place(RESULTS, "wholehead", "cpu", study=True)),
    (layout.study_label_file("logs/baseline.log", "wholehead", "cpu"),
     Place(RESULTS, "wholehead", "cpu", study=True)),
    (layout.label_file("device_rates.json", "wholehead", "cpu"),
     Place(RESULTS, "wholehead", "cpu", kind="device_rates")),
    (layout.label_file("bench.csv", "wholehead", "cpu"), Place(RESULTS, "wholehead", "cpu")),
    (layout.label_file("comparison_groups/1.json", "wholehead", "cpu"), Place(RESULTS, "wholehead", "cpu")),
    (layout.label_log("device_rates.log", "wholehead", "cpu"), Place(RESULTS, "wholehead", "cpu")),
    (layout.dataset_dir("prepared", "brats"), Place(RESULTS, "brats")),
    (layout.collected_table("runs", "brats"), Place(RESULTS, "brats")),
    (layout.workload_log("bench.log", "brats"), Place(RESULTS, "brats")),
    (f"{layout.reference_dir('wholehead', 'h200')}/baseline/sample.json",
     Place(REFERENCE, "wholehead", "h200", "baseline", kind="sample.json")),
    (layout.reference_manifest("wholehead", "h200"), Place(REFERENCE, "wholehead", "h200")),
    ("paper/figures/all", Place()),
]


@pytest.mark.parametrize("path, place", WRITTEN, ids=[path for path, _ in WRITTEN])
def test_a_written_path_parses_to_what_it_was_written_from(path, place):
    assert parse(path) == place
    # in a checkout or a copy anywhere: the folders before results/ (data/reference/) do not count
    assert parse(Path("/home/someone/checkout") / path) == place


def test_a_label_or_variant_folder_is_named_only_by_what_lies_below_it():
    assert parse("results/wholehead/cpu") == Place(RESULTS, "wholehead", "cpu")
    assert parse("results/wholehead/cpu/tf64") == Place(RESULTS, "wholehead", "cpu")
    assert parse("results/wholehead/cpu/tf64/anything") == Place(RESULTS, "wholehead", "cpu", "tf64")
