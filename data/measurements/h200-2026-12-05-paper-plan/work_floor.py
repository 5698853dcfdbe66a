"""How much of config/paper.yaml's paper/figures/all is GPU work the content itself requires: the timed work of every
part as the H200 records measured it, with nothing for a job's start, compilation, CUDA graph capture, warm-up,
float64 checks, metrics or files. A lower bound of the GPU minutes on one H200 that no lever outside the content can
go under (plan.py gives the whole jobs).

Each row names its record. What is left out (so the sum stays a lower bound): every job's start; the sampling jobs'
throughput sweep; the quality jobs; the preflight and device rates; torch_defaults' training, sampling and paired
steps (no H200 record of their step time: PyTorch's defaults run cuDNN in TF32 like tf32, so they cost about as much);
the quality study's rerun's sampling and its float64 checks. Nsight Compute's jobs count their measured (or, for three,
estimated) time less the smallest job start the GPU records show.

    python3 data/measurements/h200-2026-12-05-paper-plan/work_floor.py > data/measurements/h200-2026-12-05-paper-plan/work_floor.md
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from snakemake.utils import update_config

from plan import MEASUREMENTS, NCU_ESTIMATED, NCU_ONCE, REPO, STUDY_SHIPPED, benchmark_seconds, sitting_seconds
from measurement.pairing import median_interval_ranks
from planning.configcheck import read_mapping

H200 = REPO / "data" / "reference" / "wholehead" / "h200"
# config/paper.yaml over the embedded default, as Snakemake merges them.
PAPER = read_mapping(REPO / "config.yaml", "embedded default")
update_config(PAPER, read_mapping(REPO / "config" / "paper.yaml", "overlay"))
SAMPLERS_RECORD = MEASUREMENTS / "h200-2026-12-03-samplers"
OPTIMIZER_STEPS = PAPER["train"]["warmup_steps"] + PAPER["train"]["measured_steps"] + PAPER["train"]["bare_loop_steps"]


def fewest_paired_rounds() -> int:
    """The fewest rounds whose sign-test interval reaches comparison.confidence (measurement.pairing): where a
    paired timing can stop at the earliest."""
    rounds = 1
    while median_interval_ranks(rounds, PAPER["comparison"]["confidence"]) is None:
        rounds += 1
    return rounds


def smallest_start(steps: dict[str, tuple[float, float, str]]) -> float:
    """The least a GPU job spent outside its timed work in the records: the timing chain's training jobs
    (../h200-2026-12-04-paper-sitting/jobs.csv) less their optimizer steps at the recorded step time."""
    jobs = sitting_seconds()
    return min(jobs[("train", variant)][0] - OPTIMIZER_STEPS * step
               for variant, (step, _, _) in steps.items() if ("train", variant) in jobs)


def step_seconds() -> dict[str, tuple[float, float, str]]:
    """Per variant of the paper's run_variants with an H200 record: (training optimizer step, U-Net evaluation) in
    seconds and the record: the paired rounds' medians (comparison_rounds.csv: ms per sample, two samples a step),
    else the variant's train.json and sample.json."""
    rounds = pd.read_csv(H200 / "comparison_rounds.csv").groupby(["phase", "variant"])["step_ms"].median()
    found = {}
    for variant in PAPER["run_variants"]:
        if ("train", variant) in rounds.index:
            found[variant] = (2 * rounds[("train", variant)] / 1e3, rounds[("sample", variant)] / 1e3,
                              "comparison_rounds.csv (medians)")
        elif (H200 / variant / "train.json").exists():
            train = json.loads((H200 / variant / "train.json").read_text())["step_time"]["median_ms"]
            sample = json.loads((H200 / variant / "sample.json").read_text())["step_time"]["median_ms"]
            found[variant] = (train / 1e3, sample / 1e3, f"{variant}/train.json, sample.json (medians)")
    return found


def study_rows() -> list[dict]:
    rows = []
    for variant in PAPER["quality_study"]["variants"]:
        runs = [json.loads(p.read_text()) for p in sorted((STUDY_SHIPPED / variant).glob("seed*/run.json"))]
        source = str((STUDY_SHIPPED / variant).relative_to(REPO))
        rows.append({"part": "quality study: training", "what": variant, "seconds": runs[0]["training"]["job_seconds"],
                     "source": f"{source} (training.job_seconds)"})
        rows.append({"part": "quality study: 250-step chains", "what": variant,
                     "seconds": sum(run["sampling"]["seconds"] for run in runs),
                     "source": f"{source} (sampling.seconds of {len(runs)} runs)"})
    for variant in PAPER["fast_sampling"]["study_variants"]:
        folder = STUDY_SHIPPED / variant
        runs = [json.loads(p.read_text()) for p in sorted(folder.glob("seed*/run.json"))]
        if not any(run.get("samplers") for run in runs):  # frontier's shipped runs predate its samplers' judgement
            folder = SAMPLERS_RECORD / f"study-{variant}"
            runs = [json.loads(p.read_text()) for p in sorted(folder.glob("seed*/run.json"))]
        masks = PAPER["quality_study"]["masks"]
        rows.append({"part": "quality study: fast samplers", "what": variant,
                     "seconds": sum(s["seconds_per_volume"] * masks for run in runs for s in run["samplers"]),
                     "source": f"{folder.relative_to(REPO)} (samplers' seconds_per_volume x {masks} masks)"})
    return rows


def ncu_rows(start: float) -> list[dict]:
    rows = []
    for variant in PAPER["run_variants"]:
        for phase in ("train", "sample"):
            path = NCU_ONCE / variant / phase / f"profile_{phase}_ncu.benchmark.tsv"
            if path.exists():
                seconds, source = benchmark_seconds(path), str(path.relative_to(REPO))
            else:
                seconds, source = NCU_ESTIMATED[(phase, variant)], f"estimate: {(NCU_ONCE / 'README.md').relative_to(REPO)}"
            rows.append({"part": "Nsight Compute", "what": f"{variant} {phase}", "seconds": seconds - start,
                         "source": f"{source}, less {start:.1f} s of start"})
    return rows


def timing_chain_rows(steps: dict[str, tuple[float, float, str]]) -> list[dict]:
    timesteps = PAPER["diffusion"]["timesteps"]
    profiled = PAPER["profiling"]["warmup_steps"] + 1
    rows = []
    for variant, (step, evaluation, source) in steps.items():
        rows.append({"part": "timing chain: training", "what": variant, "seconds": OPTIMIZER_STEPS * step,
                     "source": f"{OPTIMIZER_STEPS} optimizer steps x {step:.3f} s ({source})"})
        rows.append({"part": "timing chain: 250-step chain", "what": variant, "seconds": timesteps * evaluation,
                     "source": f"{timesteps} evaluations x {evaluation * 1e3:.1f} ms ({source})"})
        rows.append({"part": "torch.profiler", "what": variant, "seconds": profiled * (step + evaluation),
                     "source": f"{profiled} training steps and {profiled} evaluations, the last profiled ({source})"})
    paired = sum(step + evaluation for step, evaluation, _ in steps.values())
    min_rounds = PAPER["comparison"]["min_rounds"]
    rows.append({"part": "paired comparisons", "what": ", ".join(steps), "seconds": min_rounds * paired,
                 "source": f"{min_rounds} rounds (comparison.min_rounds) of a step and an evaluation each"})
    evaluations = timesteps + sum(steps_ for counts in PAPER["fast_sampling"]["samplers"].values() for steps_ in counts)
    tf32 = steps["tf32"][1]
    fewest = fewest_paired_rounds()
    rows.append({"part": "fast samplers' timing", "what": "tf32, batch 1", "seconds": fewest * evaluations * tf32,
                 "source": f"{fewest} rounds (the sign test's fewest) of {evaluations} evaluations x "
                           f"{tf32 * 1e3:.1f} ms"})
    return rows


def main() -> None:
    steps = step_seconds()
    rows = pd.DataFrame(study_rows() + ncu_rows(smallest_start(steps)) + timing_chain_rows(steps))
    by_part = rows.groupby("part", sort=False)["seconds"].sum() / 60
    print("| part | GPU-minutes of work |\n|---|---:|")
    for part, minutes in by_part.items():
        print(f"| {part} | {minutes:.1f} |")
    print(f"| **all** | **{by_part.sum():.1f}** |\n")
    print("| part | what | seconds | record |\n|---|---|---:|---|")
    for row in rows.itertuples():
        print(f"| {row.part} | {row.what} | {row.seconds:.1f} | {row.source} |")


if __name__ == "__main__":
    main()
