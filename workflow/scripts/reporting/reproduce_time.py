"""Time to reproduce a finished run: the GPU minutes of each part of the study, and the wall time the same jobs would
take on N GPUs of one node.

Every job of the run comes from Snakemake's own record of the outputs it made (`.snakemake/metadata/`, one JSON file
per output, named by the output's path in URL-safe base64: what `snakemake --summary` and `--report` read), which
holds the job's rule, its inputs and its start and end. A job's time is its end less its start, as it ran here; a job
that made an input of another ran before it. On N GPUs the same jobs are list-scheduled: a job of a GPU rule (one
that asks for the `gpu` resource) holds one GPU for its measured time, the other jobs run beside them on the node's
cores, and of the jobs whose inputs are made the one with the longest chain of jobs after it starts first (the
critical path's, the classic list-scheduling heuristic). With a GPU for every GPU job the wall time is the critical
path. What it leaves out: a data-parallel rung's training job counts as one GPU, a job runs as long as it ran here
(beside other jobs on this machine's cores), and CPU jobs are not limited by the node's cores.
"""

from __future__ import annotations

import base64
import heapq
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from jobio.errors import ExpectedError

# The parts of the study each rule's GPU time belongs to; a GPU rule not listed here is its own part.
PARTS = {
    "train": "training",
    "sample": "sampling (full chains)",
    "sample_fast": "fast samplers",
    "quality": "quality of the samples",
    "compare_group": "paired comparisons",
    "preflight": "preflight and device rates",
    "device_rates": "preflight and device rates",
    "profile_torch": "torch.profiler",
    "profile_ncu": "Nsight Compute",
    "profile_nsys": "Nsight Systems",
    "study_run": "quality study",
}
CPU_PART = "CPU jobs (data, extraction, collecting, rendering, article)"
# Seconds between the start stamps of one job's outputs at most (measured: microseconds).
JOB_START_SPREAD = 1.0


class RecordError(ExpectedError):
    """A run folder without Snakemake's record of its outputs, or a record that is not one."""


def _output_path(record: Path, folder: Path) -> str:
    """The output a record file is of: its path under the metadata folder, the parts a long name was split into (each
    but the last prefixed with "@") joined, decoded."""
    parts = [part.removeprefix("@") for part in record.relative_to(folder).parts]
    return base64.urlsafe_b64decode("".join(parts)).decode()


def recorded_jobs(workdir: str | Path) -> pd.DataFrame:
    """One row per job that made an output recorded in `workdir`'s `.snakemake/metadata`: job (a number), rule,
    start, end, seconds, outputs and inputs (tuples of paths). Outputs of a job that did not finish are left out."""
    folder = Path(workdir) / ".snakemake" / "metadata"
    if not folder.is_dir():
        raise RecordError(f"{folder}: no record of a run's outputs (Snakemake writes it when jobs finish); fix: run "
                          "the study in this folder first")
    records = []
    for record in sorted(path for path in folder.rglob("*") if path.is_file()):
        try:
            data = json.loads(record.read_text())
            output = _output_path(record, folder)
            rule, job_hash, start, end = data["rule"], data["job_hash"], data["starttime"], data["endtime"]
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
            raise RecordError(f"{record}: not a record of Snakemake's output metadata ({type(error).__name__}: "
                              f"{error}); fix: remove the folder's .snakemake/metadata and run the study again"
                              ) from None
        if not data.get("incomplete") and start is not None and end is not None:  # else a job that did not finish
            records.append((rule, job_hash, float(start), float(end), output, data.get("input") or ()))
    # A job's outputs share its rule and hash, and their start times differ by microseconds (Snakemake stamps them
    # one after the other as the job starts); their end is each file's modification time, so they differ. The same job
    # run again (a rerun) has the same hash and starts later: a record that starts more than JOB_START_SPREAD seconds
    # after the previous one of its rule and hash begins another job.
    jobs: list[dict] = []
    last: dict[tuple, tuple[dict, float]] = {}  # (rule, hash) -> its latest job and that job's latest start stamp
    for rule, job_hash, start, end, output, inputs in sorted(records, key=lambda r: r[:3]):
        job, stamped = last.get((rule, job_hash), (None, None))
        if job is None or start - stamped > JOB_START_SPREAD:
            job = {"rule": rule, "start": start, "end": end, "outputs": set(), "inputs": set()}
            jobs.append(job)
        last[(rule, job_hash)] = (job, start)
        job["end"] = max(job["end"], end)
        job["outputs"].add(output)
        job["inputs"].update(inputs)
    rows = sorted(jobs, key=lambda job: (job["start"], job["rule"]))
    frame = pd.DataFrame([{**job, "outputs": tuple(sorted(job["outputs"])), "inputs": tuple(sorted(job["inputs"]))}
                          for job in rows], columns=["rule", "start", "end", "outputs", "inputs"])
    frame.insert(0, "job", range(len(frame)))
    frame["seconds"] = frame["end"] - frame["start"]
    return frame


def dependencies(jobs: pd.DataFrame) -> dict[int, set[int]]:
    """For each job, the jobs that made one of its inputs."""
    maker = {output: job for job, outputs in zip(jobs["job"], jobs["outputs"]) for output in outputs}
    return {job: {maker[path] for path in inputs if path in maker and maker[path] != job}
            for job, inputs in zip(jobs["job"], jobs["inputs"])}


@dataclass(frozen=True)
class Schedule:
    seconds: float  # the wall time


def list_schedule(jobs: pd.DataFrame, after: dict[int, set[int]], gpu_rules: set[str],
                  gpus: int | None) -> Schedule:
    """The wall time of `jobs` (their `seconds`) on `gpus` GPUs (None: a GPU for every GPU job), each job starting
    once every job in `after[job]` has ended; GPU jobs take one GPU each, the others none; of the ready jobs the one
    with the longest chain of jobs after it starts first."""
    seconds = dict(zip(jobs["job"], jobs["seconds"]))
    on_gpu = {job: rule in gpu_rules for job, rule in zip(jobs["job"], jobs["rule"])}
    waiting_for = {job: set(after.get(job, ())) for job in seconds}
    followers: dict[int, list[int]] = {job: [] for job in seconds}
    for job, makers in waiting_for.items():
        for maker in makers:
            followers[maker].append(job)
    chain = {job: 0.0 for job in seconds}
    for job in reversed(_topological(waiting_for, followers)):
        chain[job] = seconds[job] + max((chain[follower] for follower in followers[job]), default=0.0)
    ready = [(-chain[job], job) for job, makers in waiting_for.items() if not makers]
    heapq.heapify(ready)
    running: list[tuple[float, int]] = []  # (end, job)
    free = len(seconds) if gpus is None else gpus
    now = 0.0
    while ready or running:
        blocked = []
        while ready:
            item = heapq.heappop(ready)
            if on_gpu[item[1]]:
                if free == 0:
                    blocked.append(item)
                    continue
                free -= 1
            heapq.heappush(running, (now + seconds[item[1]], item[1]))
        for item in blocked:
            heapq.heappush(ready, item)
        now, job = heapq.heappop(running)
        free += on_gpu[job]
        for follower in followers[job]:
            waiting_for[follower].discard(job)
            if not waiting_for[follower]:
                heapq.heappush(ready, (-chain[follower], follower))
    return Schedule(now)


def _topological(waiting_for: dict[int, set[int]], followers: dict[int, list[int]]) -> list[int]:
    """Jobs in an order where every job comes after the jobs it waits for (Kahn's algorithm)."""
    left = {job: len(makers) for job, makers in waiting_for.items()}
    order = [job for job, count in left.items() if count == 0]
    for job in order:  # the list grows while it is walked
        for follower in followers[job]:
            left[follower] -= 1
            if left[follower] == 0:
                order.append(follower)
    if len(order) != len(left):
        raise RecordError("the recorded jobs wait for each other in a cycle: not one run's record")
    return order


def parts(jobs: pd.DataFrame, gpu_rules: set[str]) -> pd.DataFrame:
    """Per part of the study: jobs and minutes, GPU parts first (longest first), then the CPU jobs."""
    part = [PARTS.get(rule, rule) if rule in gpu_rules else CPU_PART for rule in jobs["rule"]]
    table = (jobs.assign(part=part, gpu=[rule in gpu_rules for rule in jobs["rule"]])
             .groupby(["gpu", "part"], as_index=False).agg(jobs=("job", "size"), minutes=("seconds", "sum")))
    table["minutes"] = table["minutes"] / 60
    return table.sort_values(["gpu", "minutes"], ascending=[False, False]).reset_index(drop=True)


def time_to_reproduce(workdir: str | Path, gpu_rules: set[str], node_gpus=(1, 2, 4, 8)) -> dict:
    """{"parts": per-part minutes, "wall": minutes on each number of GPUs and on a GPU per job, "jobs": the jobs}."""
    jobs = recorded_jobs(workdir)
    if jobs.empty:
        raise RecordError(f"{Path(workdir) / '.snakemake' / 'metadata'}: no finished job recorded; fix: run the "
                          "study in this folder first")
    after = dependencies(jobs)
    wall = pd.DataFrame([{"gpus": "critical path" if count is None else str(count),
                          "minutes": list_schedule(jobs, after, gpu_rules, count).seconds / 60}
                         for count in (*node_gpus, None)])
    return {"parts": parts(jobs, gpu_rules), "wall": wall, "jobs": jobs}


def markdown(result: dict, title: str) -> str:
    """The two tables as Markdown under `title`, with what they are."""
    parts_table, wall = result["parts"], result["wall"]
    gpu_minutes = parts_table.loc[parts_table["gpu"], "minutes"].sum()
    lines = [f"# {title}", "",
             f"{len(result['jobs'])} jobs recorded by Snakemake; the jobs that hold the device (a GPU rule's) "
             f"{gpu_minutes:.1f} minutes in all.", "",
             "| part | holds the device | jobs | minutes |", "|---|---|---:|---:|"]
    lines += [f"| {row.part} | {'yes' if row.gpu else 'no'} | {row.jobs} | {row.minutes:.1f} |"
              for row in parts_table.itertuples()]
    lines += ["", "Wall time of the same jobs on N GPUs of one node (list-scheduled, the longest remaining chain "
              "first; reporting/reproduce_time.py says what it leaves out):", "", "| GPUs | minutes |", "|---|---:|"]
    lines += [f"| {row.gpus} | {row.minutes:.1f} |" for row in wall.itertuples()]
    return "\n".join(lines) + "\n"
