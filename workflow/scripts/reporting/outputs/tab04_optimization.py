"""tab04: per hardware label and variant, training and sampling cost, speed-up over baseline with its range from the
step-time quartiles (and "within noise" where they overlap the baseline's), and the Nsight Compute ratios to
baseline where the training step was profiled.

Times are the run's own train.json and sample.json, the numbers every table and figure shows."""

from __future__ import annotations

import pandas as pd

from ..derived import ncu_headline, relative_to, speedup_verdict
from ..prose import Context, num
from ..render import Table

CAPTION = ("Optimization impact per variant and device: training time per sample, speed-up over baseline (low-high: "
           "the same ratio between the two runs' step-time quartiles; 'within noise' where they overlap, so the "
           "direction is not measured), sampling step with its speed-up and verdict, peak memory; Nsight Compute SM cycles, warp instructions and "
           "IPC of the training step relative to baseline, tensor-pipe utilisation (%)")


def optimization_table(runs: pd.DataFrame, summaries: pd.DataFrame) -> pd.DataFrame:
    if runs.empty:
        return pd.DataFrame()
    table = runs[["gpu", "variant", "origin", "device", "train_ms_per_sample", "sample_step_median_ms",
                  "train_peak_memory_gib"]].copy()
    verdict = speedup_verdict(runs)
    for k, column in enumerate(("speedup", "low", "high", "verdict")):
        name = "train_speedup_vs_baseline" if column == "speedup" else f"train_speedup_{column}"
        name = "train_verdict" if column == "verdict" else name
        table.insert(5 + k, name, verdict[column].to_numpy())
    if "sample_step_median_ms" in runs and runs["sample_step_median_ms"].notna().any():
        sampling = speedup_verdict(runs, "sample")
        position = table.columns.get_loc("sample_step_median_ms") + 1
        table.insert(position, "sample_speedup_vs_baseline", sampling["speedup"].to_numpy())
        table.insert(position + 1, "sample_verdict", sampling["verdict"].to_numpy())
    head = ncu_headline(summaries)
    rel = relative_to(head, ["sm_cycles", "warp_instructions", "ipc"]).rename(
        columns={"sm_cycles": "sm_cycles_rel", "warp_instructions": "warp_instructions_rel", "ipc": "ipc_rel"})
    table = table.merge(rel, on=["gpu", "variant"], how="left")
    for column in ("sm_cycles_rel", "warp_instructions_rel", "ipc_rel", "tensor_pipe_pct"):
        table[column] = table[column].astype(float)
    return table


def build(job) -> Table:
    results = job.results
    return Table(optimization_table(results.table("runs"), results.table("summaries")), CAPTION)


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
