"""config/paper.yaml's paper/figures/all on H200s, planned from its parts' records before one run of it has finished:
the GPU minutes per part and the wall time on 1, 2, 4 and 8 GPUs of one node (reporting.reproduce_time's list
scheduler, the one paper/time_to_reproduce.md uses after a run).

Jobs and their order: `paper_dag.dot`, Snakemake's own plan of the target (README.md has the command). Each job's
seconds: `job_seconds` below, from the record of that job on an H200 (the file it names), or an estimate that says
what it is made of. CPU jobs come from `cpu_jobs.csv`, the same jobs of the embedded default's run on a 2-core CPU
machine (their outputs are the paper's figures and tables of a smaller study; on a 16-core GPU host they run beside
the GPU jobs, and only those after the last GPU job add to the wall time).

    python3 data/measurements/h200-2026-12-05-paper-plan/plan.py > data/measurements/h200-2026-12-05-paper-plan/plan.md
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
MEASUREMENTS = HERE.parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "workflow" / "scripts"))

from reporting.reproduce_time import PARTS, list_schedule, parts  # noqa: E402

SITTING = MEASUREMENTS / "h200-2026-12-04-paper-sitting" / "jobs.csv"
NCU_ONCE = MEASUREMENTS / "h200-2026-12-05-ncu-once-paper"
STUDY_SHIPPED = REPO / "data" / "reference" / "wholehead" / "h200" / "study"


def benchmark_seconds(path: Path) -> float:
    """Snakemake's benchmark of a job: its wall seconds (column `s`)."""
    return float(pd.read_csv(path, sep="\t")["s"].iloc[-1])


def dag(path: Path) -> pd.DataFrame:
    """The planned jobs (job, rule, variant, phase) and for each the jobs it waits for (`after`)."""
    nodes, edges = {}, []
    for line in path.read_text().splitlines():
        node = re.match(r'\s*(\d+)\[label = "([^"]*)"', line)
        edge = re.match(r"\s*(\d+) -> (\d+)", line)
        if node:
            rule, *fields = node.group(2).split("\\n")
            wildcards = dict(field.split(": ", 1) for field in fields)
            nodes[int(node.group(1))] = {"job": int(node.group(1)), "rule": rule, **wildcards}
        elif edge:
            edges.append((int(edge.group(1)), int(edge.group(2))))
    jobs = pd.DataFrame(list(nodes.values()))
    after = {job: set() for job in jobs["job"]}
    for maker, follower in edges:
        after[follower].add(maker)
    # Snakemake's plan names no variant on the sample and quality jobs of a variant (their wildcards are the same
    # but for it): theirs is the one training job they wait for, directly or through their sample job (a quality job
    # of another variant also waits for the baseline's training and samples).
    variant = dict(zip(jobs["job"], jobs.get("variant")))
    rule = dict(zip(jobs["job"], jobs["rule"]))

    def trained(job: int) -> set[str]:
        return {variant[m] for m in after[job] if rule[m] == "train"}

    for job in jobs["job"]:
        if rule[job] == "sample":
            [variant[job]] = trained(job)
    for job in jobs["job"]:
        if rule[job] == "quality":
            named = trained(job)
            [variant[job]] = named - {"baseline"} if len(named) > 1 else named
    jobs["variant"] = jobs["job"].map(variant)
    return jobs, after


def sitting_seconds() -> dict[tuple[str, str], tuple[float, str]]:
    """The 128^3 timing chain's jobs as one run of the README's command ran them."""
    jobs = pd.read_csv(SITTING)
    found = {}
    for row in jobs.itertuples():
        parts_ = row.output.split("/")
        variant = parts_[3] if row.rule in ("train", "sample", "quality") else ""
        found[(row.rule, variant)] = (float(row.seconds), str(SITTING.relative_to(REPO)))
    return found


def study_seconds(variant: str) -> tuple[float, str]:
    """A quality-study job: its benchmark where a record has the whole job as config/paper.yaml runs it now, else the
    shipped run's last seed's wall time (from the job's start of work to that run's files) and the seconds a job spends
    around it (process start, the study's dataset read, the last files): the mean of three records' benchmark less
    their last run's wall time."""
    whole = {"baseline": MEASUREMENTS / "h200-2026-12-03-samplers" / "study_baseline.benchmark.tsv",
             "frontier": MEASUREMENTS / "h200-2026-12-03-samplers" / "study_frontier.benchmark.tsv"}
    if variant in whole:
        return benchmark_seconds(whole[variant]), str(whole[variant].relative_to(REPO))
    around = statistics.mean(around_study_work())
    last = max(json.loads(path.read_text())["wall_seconds"] for path in (STUDY_SHIPPED / variant).glob("seed*/run.json"))
    return last + around, (f"{(STUDY_SHIPPED / variant).relative_to(REPO)} (last seed's wall_seconds {last:.1f}) + "
                           f"{around:.1f} s around the work")


def around_study_work() -> list[float]:
    """Benchmark less the last run's wall time, for the records that hold both of one job."""
    fp32 = MEASUREMENTS / "h200-2026-12-05-study-fp32" / "baseline"
    last = max(json.loads(path.read_text())["wall_seconds"] for path in fp32.glob("seed*.json"))
    values = [benchmark_seconds(fp32 / "baseline.benchmark.tsv") - last]
    sharing = MEASUREMENTS / "h200-2026-12-04-study-sharing" / "sequential"
    for variant in ("tf32", "bf16"):
        first = json.loads((sharing / f"{variant}-seed0-run.json").read_text())
        shipped = {int(p.parent.name.removeprefix("seed")): json.loads(p.read_text())["wall_seconds"]
                   for p in (STUDY_SHIPPED / variant).glob("seed*/run.json")}
        # That job's last run ended where the shipped job's did, shifted by their first runs' difference.
        values.append(benchmark_seconds(sharing / f"{variant}.benchmark.tsv")
                      - (shipped[max(shipped)] + first["wall_seconds"] - shipped[0]))
    return values


# Nsight Compute's three profiles that the record of 2026-12-05 did not reach: its estimates (README there), from the
# kernels of the shipped pages and the cost per profiled kernel it measured.
NCU_ESTIMATED = {("sample", "baseline"): 85.0, ("sample", "channels_last"): 130.0, ("train", "torch_defaults"): 53.0}
ESTIMATES = {
    # config/paper.yaml: a round of every sampler and the 250-step chain about 46 s of an H200, six rounds, and a
    # job's start (the timing chain's jobs: 10-17 s beyond their timed work).
    "sample_fast": (6 * 46.0 + 15.0, "estimate: six rounds of 46 s (config/paper.yaml) and 15 s of job start"),
    # docs/cluster.md: 10-12 s a job at 32^3 (h200-2026-12-04-ncu-per-config) and its warm-up steps at 128^3.
    "profile_torch": (18.0, "estimate: docs/cluster.md's 3 GPU-minutes for ten jobs"),
    # A copy and a bf16 matrix product timed for a few seconds each, and a job's start.
    "device_rates": (20.0, "estimate: two timed kernels and a job's start"),
}


def job_seconds(jobs: pd.DataFrame, cpu: pd.DataFrame) -> pd.DataFrame:
    sitting = sitting_seconds()
    cpu_rule = cpu.groupby("rule")["seconds"].median()
    seconds, sources = [], []
    for row in jobs.itertuples():
        variant = row.variant if isinstance(row.variant, str) else ""
        phase = getattr(row, "phase", "")
        phase = phase if isinstance(phase, str) else ""
        if (row.rule, variant) in sitting:
            value, source = sitting[(row.rule, variant)]
        elif row.rule == "study_run":
            value, source = study_seconds(variant)
        elif row.rule == "profile_ncu":
            path = NCU_ONCE / variant / phase / f"profile_{phase}_ncu.benchmark.tsv"
            if path.exists():
                value, source = benchmark_seconds(path), str(path.relative_to(REPO))
            else:
                value = NCU_ESTIMATED[(phase, variant)]
                source = f"estimate: {(NCU_ONCE / 'README.md').relative_to(REPO)}"
        elif row.rule == "extract_ncu_rules" or (row.rule == "extract_profile" and getattr(row, "tool", "") == "ncu"):
            # A 128^3 sampling profile's extraction, both pages, started and ended within 2 s of the run's end there.
            value, source = 2.0, str((MEASUREMENTS / "h200-2026-12-04-ncu-operators" / "paper" / "snakemake.log")
                                     .relative_to(REPO))
        elif row.rule in ESTIMATES:
            value, source = ESTIMATES[row.rule]
        elif row.rule in cpu_rule.index and row.rule not in PARTS:
            value, source = float(cpu_rule[row.rule]), "cpu_jobs.csv (the embedded default's run, its median)"
        else:
            raise SystemExit(f"no record or estimate for {row.rule} {variant} {phase}")
        seconds.append(value)
        sources.append(source)
    return jobs.assign(seconds=seconds, source=sources)


def critical_path(jobs: pd.DataFrame, after: dict[int, set[int]]) -> list[int]:
    """The chain of jobs, each waiting for the one before, whose seconds add up to the most."""
    seconds = dict(zip(jobs["job"], jobs["seconds"]))
    best: dict[int, tuple[float, list[int]]] = {}

    def longest(job: int) -> tuple[float, list[int]]:
        if job not in best:
            before = max((longest(maker) for maker in after[job]), default=(0.0, []), key=lambda item: item[0])
            best[job] = (before[0] + seconds[job], before[1] + [job])
        return best[job]

    return max((longest(job) for job in seconds), key=lambda item: item[0])[1]


def main() -> None:
    jobs, after = dag(HERE / "paper_dag.dot")
    cpu = pd.read_csv(HERE / "cpu_jobs.csv")
    jobs = job_seconds(jobs, cpu)
    gpu_rules = set(PARTS) & set(jobs["rule"])
    table = parts(jobs, gpu_rules)
    print("| part | holds the GPU | jobs | minutes |\n|---|---|---:|---:|")
    for row in table.itertuples():
        print(f"| {row.part} | {'yes' if row.gpu else 'no'} | {row.jobs} | {row.minutes:.1f} |")
    gpu_minutes = table.loc[table["gpu"], "minutes"].sum()
    print(f"\nGPU jobs: {int(table.loc[table['gpu'], 'jobs'].sum())}, {gpu_minutes:.1f} GPU-minutes; "
          f"estimated: {(jobs['source'].str.startswith('estimate') & jobs['rule'].isin(gpu_rules)).sum()} of them, "
          f"{jobs.loc[jobs['source'].str.startswith('estimate') & jobs['rule'].isin(gpu_rules), 'seconds'].sum() / 60:.1f}"
          " minutes.\n")
    print("| GPUs of one node | wall minutes |\n|---|---:|")
    for count in (1, 2, 4, 8, None):
        minutes = list_schedule(jobs, after, gpu_rules, count).seconds / 60
        print(f"| {'a GPU per GPU job (critical path)' if count is None else count} | {minutes:.1f} |")
    path = critical_path(jobs, after)
    named = jobs.set_index("job")
    print("\nThe critical path: " + " -> ".join(
        f"{named.at[job, 'rule']}{'' if pd.isna(named.at[job, 'variant']) else ' ' + named.at[job, 'variant']}"
        f" ({named.at[job, 'seconds']:.0f} s)" for job in path))
    jobs.drop(columns=[c for c in ("workload", "gpu", "tool", "group") if c in jobs]).to_csv(
        HERE / "plan_jobs.csv", index=False)


if __name__ == "__main__":
    main()
