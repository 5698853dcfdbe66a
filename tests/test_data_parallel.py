"""Data-parallel training (the variant's `data_parallel` switch, medddpm.data_parallel): two gloo processes on the CPU
train the tiny U-Net from the same seed, one micro-batch of batch 1 each per optimizer step, and take the optimizer
steps of one process accumulating both micro-batches (train.gradient_accumulation 2)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import random_prepared_dataset
from tiny_training import DIFFUSION, JOB_TRAIN, MODEL, PAPER, SHAPE, training_job
from medddpm import data_parallel
from medddpm.build import ModelSpec
from medddpm.engine import Training
from medddpm.runs import Run
from medddpm.settings import TrainSettings
from medddpm.switches import Variant

STEPS = 3
# A learning rate at which three Adam steps move every weight well beyond float32 rounding (upstream's 1e-5 moves
# them by about 1e-5 per step too, but a larger one makes a wrong step stand out further).
SETTINGS = TrainSettings(seed=0, lr=1e-3, gradient_accumulation=2, ema_decay=0.995, ema_update_every=1,
                         ema_start_step=1)


def train_in_process(rank: int, size: int, rendezvous: Path, dataset: Path, out: Path,
                     settings: TrainSettings = SETTINGS) -> None:
    """One of `size` processes (or the only one) trains STEPS optimizer steps; process 0 saves every step's losses
    (all micro-batches'), the gradients the optimizer stepped with, and the final weights and EMA weights."""
    device = torch.device("cpu")
    processes = data_parallel.join(rank, size, rendezvous, device) if size > 1 else data_parallel.ONE_PROCESS
    variant = Variant.from_config("ddp" if size > 1 else "baseline", {**PAPER, "data_parallel": size})
    training = Training(ModelSpec.from_params(MODEL, DIFFUSION), settings, Run("cpu", variant, device, {}), dataset,
                        processes=processes)
    trainer = training.trainer
    stepped_with = []
    optimizer_step = trainer.optimizer.step

    def recording_step(*args, **kwargs):
        stepped_with.append([p.grad.detach().clone() for p in trainer.diffusion.parameters()])
        return optimizer_step(*args, **kwargs)

    trainer.optimizer.step = recording_step
    # The gradients' all-reduces of each micro-batch's backward (one per bucket of DDP's), counted by a communication
    # hook that then reduces as DDP's default does: the micro-batches under no_sync reduce nothing.
    reduced, per_micro_batch = [0], []
    if size > 1:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def counting_hook(state, bucket):
            reduced[0] += 1
            return allreduce_hook(state, bucket)

        trainer.loss_module.register_comm_hook(None, counting_hook)
        micro_batch = trainer.micro_batch

        def counted_micro_batch(index: int = 0) -> float:
            before = reduced[0]
            value = micro_batch(index)
            per_micro_batch.append(reduced[0] - before)
            return value

        trainer.micro_batch = counted_micro_batch
    losses = []
    for _ in range(STEPS):
        training.prepare()
        losses.append(data_parallel.gathered(training.step(), processes))
    if rank == 0:
        torch.save({"losses": losses, "gradients": stepped_with, "model": trainer.diffusion.state_dict(),
                    "ema": trainer.ema_model.state_dict(), "reduced_per_micro_batch": per_micro_batch}, out)
    data_parallel.leave()


def relative_difference(a: list[torch.Tensor] | dict, b: list[torch.Tensor] | dict) -> float:
    """The largest |a - b| of any tensor, relative to that tensor's largest |a|; `a` and `b` are lists of tensors
    (gradients) or state_dicts, of which the parameters are compared (the buffers are the diffusion's constants)."""
    if isinstance(a, dict):
        names = [name for name, _ in ModelSpec.from_params(MODEL, DIFFUSION).build(0).named_parameters()]
        a, b = [a[name] for name in names], [b[name] for name in names]
    return max(float((x.double() - y.double()).abs().max() / max(x.double().abs().max(), 1e-30))
               for x, y in zip(a, b))


def train_both_ways(tmp_path_factory, accumulation: int) -> tuple[dict, dict]:
    """(one process accumulating `accumulation` micro-batches per step, two processes sharing them), same seed."""
    settings = dataclasses.replace(SETTINGS, gradient_accumulation=accumulation)
    dataset = random_prepared_dataset(tmp_path_factory, SHAPE, cases=3, heldout=1)
    folder = tmp_path_factory.mktemp("data_parallel")
    train_in_process(0, 1, folder / "unused", dataset, folder / "one.pt", settings)
    data_parallel.spawn(train_in_process, 2, dataset, folder / "two.pt", settings)
    return torch.load(folder / "one.pt"), torch.load(folder / "two.pt")


def test_two_processes_take_the_accumulated_one_process_steps(tmp_path_factory):
    """Upstream's two micro-batches per step, one per process."""
    one, two = train_both_ways(tmp_path_factory, 2)
    # Every micro-batch's loss, in the one-process order: the same batches and the same random numbers.
    assert len(two["losses"]) == STEPS and all(len(step) == 2 for step in two["losses"])
    assert len({round(loss, 6) for step in one["losses"] for loss in step}) == 2 * STEPS  # none repeated
    differences = {
        "losses": max(abs(a - b) / abs(a) for x, y in zip(one["losses"], two["losses"]) for a, b in zip(x, y)),
        "gradients": max(relative_difference(x, y) for x, y in zip(one["gradients"], two["gradients"])),
        "weights": relative_difference(one["model"], two["model"]),
        "ema": relative_difference(one["ema"], two["ema"]),
    }
    # Measured on this CPU (torch 2.13, gloo): 0.0 for each, bit for bit. Each process computes its micro-batch as the
    # one process does (the same weights, batch, draws and thread count), and the two averages, g_a / 2 + g_b / 2
    # accumulated and (g_a + g_b) / 2 across processes, differ only by the order of exact power-of-two scalings. The
    # bound, one float32 rounding of each tensor's largest value, leaves room for a reduction that rounds otherwise;
    # a summed instead of averaged gradient is off by 100 %, a micro-batch with another's random numbers by percents.
    eps = torch.finfo(torch.float32).eps
    assert all(value <= eps for value in differences.values()), differences
    # The three steps moved the weights far beyond that bound: equal weights are not merely the initial ones.
    initial = ModelSpec.from_params(MODEL, DIFFUSION).build(SETTINGS.seed).state_dict()
    assert relative_difference(one["model"], initial) > 1e-3


def test_two_processes_of_two_micro_batches_each_take_the_accumulated_step(tmp_path_factory):
    """Four micro-batches per step, two per process: the first backward of each process's step under no_sync, the
    second process skipping the first two micro-batches' draws."""
    one, two = train_both_ways(tmp_path_factory, 4)
    assert all(len(step) == 4 for step in two["losses"])
    # The first step's gradients, from the same weights: measured 5.1e-8 of each tensor's largest value. The sum of
    # four terms is associated otherwise ((g0 + g1) + (g2 + g3) against ((g0 + g1) + g2) + g3), which float32 rounds
    # differently by an ulp or two of the largest term: below one float32 epsilon.
    assert relative_difference(one["gradients"][0], two["gradients"][0]) <= torch.finfo(torch.float32).eps
    # Every loss: measured 0.0 in the first two steps, 1.7e-7 in the third. Adam divides each gradient by its own
    # running size, so a rounding difference in a gradient near zero becomes a weight difference of up to twice the
    # learning rate: the weights are compared through the losses they give, not one by one.
    assert max(abs(a - b) / abs(a) for x, y in zip(one["losses"], two["losses"]) for a, b in zip(x, y)) <= 1e-6
    assert two["losses"][0] == one["losses"][0]
    # The gradients travel once per optimizer step: the first micro-batch of each process's pair reduces nothing
    # (no_sync), the second all of them (without no_sync both would, the same numbers at twice the traffic).
    counts = two["reduced_per_micro_batch"]
    assert len(counts) == 2 * STEPS and counts[0::2] == [0] * STEPS and min(counts[1::2]) >= 1, counts


def test_a_process_runs_its_own_share_of_the_micro_batches():
    assert [list(data_parallel.Processes(rank, 2).share(4)) for rank in range(2)] == [[0, 1], [2, 3]]
    assert list(data_parallel.ONE_PROCESS.share(2)) == [0, 1]
    with pytest.raises(ValueError, match="2 processes cannot share 3 micro-batches equally"):
        data_parallel.Processes(0, 2).share(3)


def test_more_processes_than_gpus_is_one_line_naming_the_variant_and_the_fix():
    with pytest.raises(data_parallel.ExpectedError) as error:
        data_parallel.check_gpus("frontier_ndhwc_ddp2", 2, 1)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("variant 'frontier_ndhwc_ddp2' trains with data_parallel 2 processes, one GPU each, but "
                              "this job sees 1 GPU(s)")
    assert "fix: run it where 2 GPUs of one node are free (--resources gpu=2" in message
    data_parallel.check_gpus("frontier_ndhwc_ddp2", 2, 2)


# --- the training job (medddpm.jobs.run_training) -------------------------------------------------------------------
@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> tuple[dict, dict, Path]:
    """The training job of the paper's switches on one process and on two, in the workflow's layout of a CPU label
    (results/wholehead/cpu/<variant>/): (one's outputs, two's, the label's folder)."""
    dataset = random_prepared_dataset(tmp_path_factory, SHAPE, cases=3, heldout=1)
    label = tmp_path_factory.mktemp("jobs") / "results" / "wholehead" / "cpu"
    label.mkdir(parents=True)
    one = training_job(PAPER, "baseline", dataset, label / "baseline")
    two = training_job({**PAPER, "data_parallel": 2}, "baseline_ddp2", dataset, label / "baseline_ddp2")
    return one, two, label


def test_the_data_parallel_job_writes_once_what_the_one_process_job_writes(jobs):
    one, two, _ = jobs
    assert two["files"] == one["files"] == ["checkpoint.pt", "train.json", "train_steps.csv"]
    assert (one["summary"]["data_parallel"], two["summary"]["data_parallel"]) == (1, 2)
    assert two["summary"]["provenance"]["switches"]["data_parallel"] == 2
    # Every micro-batch's loss, in the one-process order (process 1's gathered beside process 0's), and the weights.
    columns = ["step", "phase", "loss", "loss_micro_0", "loss_micro_1"]
    assert list(two["steps"].columns) == list(one["steps"].columns)
    assert two["steps"][columns].equals(one["steps"][columns])
    assert relative_difference(one["checkpoint"]["model"], two["checkpoint"]["model"]) <= torch.finfo(
        torch.float32).eps
    # One step time per measured step (each the slower process's), as the one-process job reports them.
    measured = two["steps"][two["steps"]["phase"] == "measured"]
    assert len(measured) == JOB_TRAIN["measured_steps"] and measured["step_ms"].gt(0).all()
    assert two["summary"]["step_time"]["n"] == JOB_TRAIN["measured_steps"]
    assert two["summary"]["bare_loop"]["step_time"]["n"] == JOB_TRAIN["bare_loop_steps"]


def test_the_bench_gives_the_data_parallel_runs_speed_up_and_scaling_efficiency_over_its_one_process_run(jobs):
    """Both jobs through the reader every table uses and the bench: the two-process run's row names its processes
    and its one-process run, its speed-up is the ratio of their times per sample and its efficiency that per
    process, and bench.md says so in words (two gloo processes on this CPU's cores: whatever they measure)."""
    from reporting.bench import bench_markdown, bench_rows
    from reporting.results import collect

    one, two, label = jobs
    runs = collect([label / "baseline" / "train.json", label / "baseline_ddp2" / "train.json"],
                   measured_labels=["cpu"])["runs"]
    rates = {"bf16_matmul_tflops": 1.0, "copy_gb_per_s": 10.0, "device_kind": "cpu", "note": None,
             "matmul": [{"n": 512, "time": {"n": 10}}]}
    bench = bench_rows(runs, {"cpu": rates}).set_index("variant")
    ms = {name: job["summary"]["train_ms_per_sample"] for name, job in (("baseline", one), ("baseline_ddp2", two))}
    assert bench.loc["baseline", "data_parallel"] == 1 and pd.isna(bench.loc["baseline", "data_parallel_speedup"])
    assert bench.loc["baseline_ddp2", "data_parallel"] == 2
    assert bench.loc["baseline_ddp2", "data_parallel_one_process"] == "baseline"
    assert bench.loc["baseline_ddp2", "data_parallel_speedup"] == pytest.approx(ms["baseline"] / ms["baseline_ddp2"])
    assert bench.loc["baseline_ddp2", "data_parallel_efficiency"] == pytest.approx(
        ms["baseline"] / ms["baseline_ddp2"] / 2)
    run = runs.iloc[0]
    text = bench_markdown(bench.reset_index(), "cpu", rates, {"device_name": "cpu"}, run)
    speedup = ms["baseline"] / ms["baseline_ddp2"]
    assert (f"Data parallel: baseline_ddp2 trains with 2 processes, one device each: {ms['baseline_ddp2']:.1f} ms per "
            f"sample against baseline's {ms['baseline']:.1f} on one: {speedup:.2f}x, a scaling efficiency of "
            f"{100 * speedup / 2:.0f} % (the speed-up over 2 processes).") in text
    # Without its one-process run, the bench says there is nothing to scale against.
    alone = bench_rows(runs[runs["variant"] == "baseline_ddp2"], {"cpu": rates})
    assert pd.isna(alone["data_parallel_speedup"]).all()
    assert ("baseline_ddp2 trains with 2 processes, one device each: "
            f"{ms['baseline_ddp2']:.1f} ms per sample; no run of the same switches on one process here, so no "
            "scaling efficiency.") in bench_markdown(alone, "cpu", rates, {"device_name": "cpu"}, run)


def refuse_in_process_one(rank: int, size: int, rendezvous: Path) -> None:
    if rank == 1:
        raise data_parallel.ExpectedError("process 1 refuses: one line naming the problem; fix: none needed")


def test_a_process_s_expected_error_is_its_one_line_in_the_job():
    with pytest.raises(data_parallel.ExpectedError) as error:
        data_parallel.spawn(refuse_in_process_one, 2)
    assert str(error.value) == "process 1 refuses: one line naming the problem; fix: none needed"


# --- the plan: the training job of a data-parallel rung takes its GPUs ---------------------------------------------
RUNG = "frontier_ndhwc_ddp2"
# tests/tiny.yaml on an emulated H200 label (no GPU needed to plan), the rung beside the baseline, upstream's two
# micro-batches per step (tiny.yaml trains one, which two processes cannot share).
OVERLAY = f"""gpus: [h200]
emulate_gpus_on_cpu: true
hardware: {{h200: {{profilers: [torch]}}}}
run_variants: [baseline, {RUNG}]
train: {{gradient_accumulation: 2}}
"""
TARGETS = [f"results/wholehead/h200/{variant}/train.json" for variant in ("baseline", RUNG)]


def test_the_rung_s_training_job_takes_two_gpus_and_every_other_job_one(workflow_copy):
    from conftest import planned_jobs, snakemake
    from train_job_requests import planned_train_jobs

    (workflow_copy / "ddp.yaml").write_text(OVERLAY)
    jobs = planned_train_jobs(workflow_copy, ["tests/tiny.yaml", "ddp.yaml"], TARGETS)
    assert {variant: job["gpu"] for variant, job in jobs.items()} == {"baseline": 1, RUNG: 2}
    # A local run: profiles/default allows one GPU, which the rung's job cannot start with; one line says so before
    # anything runs (Snakemake would refuse only when the job is due, naming pipes), and --resources gpu=2 plans it.
    refused = snakemake(workflow_copy, "-n", "--configfile", "tests/tiny.yaml", "ddp.yaml", "--", *TARGETS)
    assert refused.returncode != 0
    assert (f"config: run_variants lists '{RUNG}', whose training job takes 2 GPUs (data_parallel 2), but this local "
            "run allows 1 (--resources gpu=1, profiles/default); fix: run with --resources gpu=2") in refused.stdout + \
        refused.stderr
    planned = planned_jobs(workflow_copy, "--resources", "gpu=2", "--configfile", "tests/tiny.yaml", "ddp.yaml", "--",
                           *TARGETS)
    assert planned["train"] == 2


def test_a_cpu_label_takes_no_gpu_and_other_jobs_one():
    import yaml

    from conftest import REPO
    from planning.plan import Plan

    config = yaml.safe_load((REPO / "config.yaml").read_text())
    plan = Plan({**config, "gpus": ["cpu", "h200"], "run_variants": ["baseline", RUNG]})
    assert [plan.gpus("cpu", RUNG), plan.gpus("h200", RUNG), plan.gpus("h200", "baseline"), plan.gpus("h200")] == \
        [0, 2, 1, 1]
    assert plan.training_gpus() == {"baseline": 1, RUNG: 2}
    assert plan.local_gpu_problem(None) is None and plan.local_gpu_problem(2) is None
    assert plan.local_gpu_problem(1).startswith(f"config: run_variants lists '{RUNG}', whose training job takes 2 GPUs")
