"""The training job of a variant whose optimizer step stacks its micro-batches into one batch (the
`stacked_micro_batches` switch; the step itself against upstream's one-by-one loop: tests/test_graphs_on_cpu.py):
the job writes what the one-by-one job writes, each micro-batch's loss in its column."""

from __future__ import annotations

from conftest import random_prepared_dataset
from tiny_training import PAPER, SHAPE, training_job


def test_the_stacked_job_writes_what_the_one_by_one_job_writes(tmp_path_factory):
    dataset = random_prepared_dataset(tmp_path_factory, SHAPE, cases=3, heldout=1)
    folder = tmp_path_factory.mktemp("stacked")
    switches = PAPER
    one = training_job(switches, "one_by_one", dataset, folder / "one")
    stacked = training_job({**switches, "stacked_micro_batches": True}, "stacked", dataset, folder / "stacked")
    assert stacked["files"] == one["files"] == ["checkpoint.pt", "train.json", "train_steps.csv"]
    assert stacked["summary"]["provenance"]["switches"]["stacked_micro_batches"] is True
    # Every micro-batch's loss in its own column, as the one-by-one loop's: the same batches and random numbers, to
    # float32 rounding of another order of sums (measured 7.8e-8 at most).
    columns = ["loss_micro_0", "loss_micro_1"]
    difference = (stacked["steps"][columns] - one["steps"][columns]).abs() / one["steps"][columns].abs()
    assert float(difference.max().max()) < 1e-5
    assert list(stacked["steps"]["phase"]) == list(one["steps"]["phase"])
    # The same checkpoint keys; the FLOPs per training sample are the model's either way.
    assert stacked["checkpoint"]["model"].keys() == one["checkpoint"]["model"].keys()
    assert stacked["summary"]["flops"] == one["summary"]["flops"]
