"""The time to reproduce a finished run (reporting.reproduce_time): its jobs from Snakemake's record of the tiny run,
the list schedule on N GPUs, the rule's table, and the one-line refusals."""

import base64
import json

import pandas as pd
import pytest

from conftest import TINY, copy_run, job_stats, snakemake
from reporting.reproduce_time import (CPU_PART, RecordError, dependencies, list_schedule, parts, recorded_jobs,
                                      time_to_reproduce)

TINY_GPU_RULES = {"compare_group", "device_rates", "preflight", "profile_torch", "quality", "sample", "sample_fast",
                  "study_run", "train"}


def jobs_frame(rows):
    """(job, rule, seconds, outputs, inputs) rows as recorded_jobs gives them."""
    return pd.DataFrame([{"job": job, "rule": rule, "seconds": seconds, "outputs": tuple(outputs),
                          "inputs": tuple(inputs)} for job, rule, seconds, outputs, inputs in rows])


# A (GPU, 10 s) makes a and c's input; B (GPU, 5 s) reads a; C (GPU, 8 s) reads a, makes c; D (CPU, 3 s) reads c.
# The chains after each: A 10 + max(5, 8 + 3) = 21, B 5, C 11, D 3.
DIAMOND = jobs_frame([
    (0, "train", 10.0, ["a"], []),
    (1, "sample", 5.0, ["b"], ["a"]),
    (2, "profile_torch", 8.0, ["c"], ["a"]),
    (3, "collect_results", 3.0, ["d"], ["c"]),
])


def test_dependencies_are_the_jobs_that_made_an_input():
    assert dependencies(DIAMOND) == {0: set(), 1: {0}, 2: {0}, 3: {2}}


@pytest.mark.parametrize("gpus, seconds", [
    # One GPU: A, then C before B (its chain is longer), D beside B on the CPU: 10 + 8 + 5.
    (1, 23.0),
    # Two GPUs: B and C together after A, D after C: the critical path, 10 + 8 + 3.
    (2, 21.0),
    (None, 21.0),
])
def test_the_list_schedule_runs_the_longest_chain_first_and_gpu_jobs_one_per_gpu(gpus, seconds):
    schedule = list_schedule(DIAMOND, dependencies(DIAMOND), {"train", "sample", "profile_torch"}, gpus)
    assert schedule.seconds == pytest.approx(seconds)


def test_cpu_jobs_wait_for_no_gpu():
    """Two CPU jobs and two GPU jobs, nothing between them, on one GPU: the GPU jobs one after the other, the CPU jobs
    beside them."""
    jobs = jobs_frame([(0, "train", 4.0, ["a"], []), (1, "train", 4.0, ["b"], []),
                       (2, "collect_results", 6.0, ["c"], []), (3, "article", 7.0, ["d"], [])])
    assert list_schedule(jobs, dependencies(jobs), {"train"}, 1).seconds == pytest.approx(8.0)


def test_parts_add_up_to_every_jobs_time():
    table = parts(DIAMOND, {"train", "sample", "profile_torch"})
    assert table["minutes"].sum() == pytest.approx(DIAMOND["seconds"].sum() / 60)
    assert list(table["part"]) == ["training", "torch.profiler", "sampling (full chains)", CPU_PART]  # longest first


@pytest.mark.workflow
def test_the_tiny_runs_record_holds_every_job_of_its_dag_in_order(finished_run):
    """Every job the tiny run's DAG has (its job stats, planned again with everything forced) is in Snakemake's record,
    each after the jobs that made its inputs; its sampling after its training. (The run is shared: tests that build
    other targets there, or build some of its outputs again, add their jobs to its record, quality_study's or a
    figure's; so every planned job is recorded at least once.)"""
    jobs = recorded_jobs(finished_run)
    planned = job_stats(snakemake(finished_run, "-n", "--forceall", *TINY, "paper/figures/all"))
    recorded = jobs["rule"].value_counts().to_dict()
    assert all(recorded.get(rule, 0) >= count for rule, count in planned.items()), (recorded, planned)
    after = dependencies(jobs)
    start, end = dict(zip(jobs["job"], jobs["start"])), dict(zip(jobs["job"], jobs["end"]))
    assert all(end[maker] <= start[job] for job, makers in after.items() for maker in makers)
    by_output = {output: job for job, outputs in zip(jobs["job"], jobs["outputs"]) for output in outputs}
    for variant in ("baseline", "channels_last"):
        sample = by_output[f"results/wholehead/cpu/{variant}/sample.json"]
        assert by_output[f"results/wholehead/cpu/{variant}/checkpoint.pt"] in after[sample]
    result = time_to_reproduce(finished_run, TINY_GPU_RULES)
    wall = dict(zip(result["wall"]["gpus"], result["wall"]["minutes"]))
    gpu_minutes = jobs.loc[jobs["rule"].isin(TINY_GPU_RULES), "seconds"].sum() / 60
    assert wall["critical path"] <= wall["8"] <= wall["4"] <= wall["2"] <= wall["1"]
    assert gpu_minutes <= wall["1"] <= jobs["seconds"].sum() / 60


@pytest.mark.workflow
def test_the_rule_writes_the_tables_of_the_finished_run(finished_run, tmp_path):
    """`snakemake ... paper/time_to_reproduce.md` after the study runs that one job and writes a row per part and a
    row per number of GPUs, and the jobs as CSV."""
    workdir = copy_run(finished_run, tmp_path / "wf")
    done = snakemake(workdir, "--cores", "1", *TINY, "paper/time_to_reproduce.md")
    assert done.returncode == 0, done.stderr[-3000:]
    assert job_stats(done) == {"time_to_reproduce": 1}
    text = (workdir / "paper/time_to_reproduce.md").read_text()
    assert text.startswith("# Time to reproduce the wholehead study on cpu\n")
    for part in ("| training | yes | 2 |", "| quality study | yes | 2 |", "| torch.profiler | yes | 4 |",
                 f"| {CPU_PART} | no |"):
        assert part in text, text
    for gpus in ("1", "2", "4", "8", "critical path"):
        assert f"\n| {gpus} | " in text, text
    table = pd.read_csv(workdir / "paper/time_to_reproduce.csv")
    # Every job recorded in the copy before this one, whose own record Snakemake writes once it has ended.
    recorded = recorded_jobs(workdir)
    assert len(table) == len(recorded) - 1 and list(recorded["rule"])[-1] == "time_to_reproduce"
    assert (table["seconds"] > 0).all()


def test_a_folder_without_a_record_is_refused_in_one_line(tmp_path):
    with pytest.raises(RecordError, match=r"\.snakemake/metadata: no record of a run's outputs .*fix: run the study"):
        recorded_jobs(tmp_path)


def test_a_record_that_is_not_snakemakes_names_its_file(tmp_path):
    folder = tmp_path / ".snakemake" / "metadata"
    folder.mkdir(parents=True)
    name = base64.urlsafe_b64encode(b"results/x.json").decode()
    (folder / name).write_text(json.dumps({"input": []}))
    with pytest.raises(RecordError, match=rf"{name}: not a record of Snakemake's output metadata \(KeyError"):
        recorded_jobs(tmp_path)


def test_a_long_output_name_split_into_folders_is_read_whole(tmp_path):
    """Snakemake splits a record's name longer than the file system allows into folders, each but the last prefixed
    with "@"."""
    output = "results/" + "v" * 300 + "/train.json"
    encoded = base64.urlsafe_b64encode(output.encode()).decode()
    folder = tmp_path / ".snakemake" / "metadata" / ("@" + encoded[:254])
    folder.mkdir(parents=True)
    record = {"rule": "train", "job_hash": 1, "starttime": 10.0, "endtime": 12.5, "input": ["data/x"],
              "incomplete": False}
    (folder / encoded[254:]).write_text(json.dumps(record))
    jobs = recorded_jobs(tmp_path)
    assert list(jobs["outputs"]) == [(output,)] and list(jobs["seconds"]) == [2.5]


def _record(folder, output: str, **fields) -> None:
    record = {"rule": "profile_torch", "job_hash": 7, "input": ["data/x"], "incomplete": False, **fields}
    (folder / base64.urlsafe_b64encode(output.encode()).decode()).write_text(json.dumps(record))


def test_a_jobs_outputs_with_different_ends_are_one_job_and_its_rerun_another(tmp_path):
    """Snakemake stamps a job's outputs with one start (microseconds apart) and each with its own file's modification
    time as the end: one job, from its start to its last output. The same job run again later (same hash) is another."""
    folder = tmp_path / ".snakemake" / "metadata"
    folder.mkdir(parents=True)
    _record(folder, "results/trace.json", starttime=100.0, endtime=103.0)
    _record(folder, "results/conditions.json", starttime=100.0001, endtime=103.004)
    _record(folder, "results/again/trace.json", starttime=160.0, endtime=161.5)
    jobs = recorded_jobs(tmp_path)
    assert list(jobs["outputs"]) == [("results/conditions.json", "results/trace.json"), ("results/again/trace.json",)]
    assert list(jobs["seconds"]) == pytest.approx([3.004, 1.5])
