"""tab04: per hardware label and variant, training and sampling cost, speed-up over baseline with its interval and
verdict from the label's paired comparison (reporting.derived.speedup_verdict; unpaired, from the step-time quartiles,
for a shipped set of before the comparisons, and marked so), and the Nsight Compute ratios to baseline where the
training step was profiled.

Times are the run's own train.json and sample.json, the numbers every table and figure shows."""

from __future__ import annotations

import pandas as pd

from ..derived import ncu_headline, relative_to, speedup_verdict, verdict_notes
from ..prose import Context, num
from ..render import Table

CAPTION = ("Optimization impact per variant and device: training time per sample; speed-up over baseline from paired "
           "rounds (the median of the rounds' ratios, low-high its interval; faster or slower where the whole "
           "interval lies beyond the comparison's band, within noise where it lies inside, at the band's edge where a "
           "narrow one lies across its edge, not measurable under this load otherwise; paired = no marks a set of separately timed jobs); the sampling step with its speed-up and "
           "verdict the same way; peak memory; Nsight Compute SM cycles, warp instructions and IPC of the training "
           "step relative to baseline, tensor-pipe utilisation (%)")


def optimization_table(runs: pd.DataFrame, summaries: pd.DataFrame) -> pd.DataFrame:
    if runs.empty:
        return pd.DataFrame()
    table = runs[["gpu", "variant", "origin", "device", "train_ms_per_sample", "sample_step_median_ms",
                  "train_peak_memory_gib"]].copy()
    phases = ["train"]
    if "sample_step_median_ms" in runs and runs["sample_step_median_ms"].notna().any():
        phases.append("sample")
    for phase in phases:
        verdict = speedup_verdict(runs, phase)
        position = table.columns.get_loc("train_ms_per_sample" if phase == "train" else "sample_step_median_ms") + 1
        for k, (column, name) in enumerate((("speedup", f"{phase}_speedup_vs_baseline"), ("low", f"{phase}_speedup_low"),
                                            ("high", f"{phase}_speedup_high"), ("verdict", f"{phase}_verdict"))):
            table.insert(position + k, name, verdict[column].to_numpy())
    table.insert(table.columns.get_loc("train_verdict") + 1, "paired",
                 speedup_verdict(runs)["paired"].map({True: "yes", False: "no"}).to_numpy())
    head = ncu_headline(summaries)
    rel = relative_to(head, ["sm_cycles", "warp_instructions", "ipc"]).rename(
        columns={"sm_cycles": "sm_cycles_rel", "warp_instructions": "warp_instructions_rel", "ipc": "ipc_rel"})
    table = table.merge(rel, on=["gpu", "variant"], how="left")
    for column in ("sm_cycles_rel", "warp_instructions_rel", "ipc_rel", "tensor_pipe_pct"):
        table[column] = table[column].astype(float)
    return table


def build(job) -> Table:
    results = job.results
    runs = results.table("runs")
    limit = job.settings["comparison"]["load_difference_cores"]
    return Table(optimization_table(runs, results.table("summaries")), CAPTION,
                 notes=verdict_notes(runs, load_difference_cores=limit))


# The article's table shows these columns, with these headers (the CSV keeps them all).
ARTICLE_COLUMNS = [("gpu", "label"), ("variant", "variant"), ("train_ms_per_sample", "train ms/sample"),
                   ("train_speedup_vs_baseline", "speed-up"), ("sample_step_median_ms", "sample step ms"),
                   ("train_peak_memory_gib", "peak GiB"), ("sm_cycles_rel", "SM cycles rel."),
                   ("warp_instructions_rel", "instr. rel."), ("ipc_rel", "IPC rel."), ("tensor_pipe_pct", "tensor %")]


def describe(context: Context) -> str:
    inputs = context.inputs
    table = inputs.table("tab04_optimization")
    rows = table[table["sm_cycles_rel"].notna()] if len(table) and "sm_cycles_rel" in table else pd.DataFrame()
    said = []
    for gpu, runs in rows.groupby("gpu", sort=False) if len(rows) else []:
        for row in runs[runs["variant"] != "baseline"].itertuples():
            said.append(f"{row.variant} on {gpu} runs a training step in {num(row.sm_cycles_rel)} of the "
                        f"baseline's SM cycles and {num(row.warp_instructions_rel)} of its warp instructions at "
                        f"{num(row.ipc_rel)} of its IPC, with the Tensor pipe busy {num(row.tensor_pipe_pct)} % "
                        "of the time")
    text = ("The same numbers as a table, with the Nsight Compute totals of the training step relative to the "
            "baseline where the step was profiled. ")
    return text + (("; ".join(said) + ".") if said else "No training step was profiled with Nsight Compute.")
