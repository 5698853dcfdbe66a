"""tab04: per hardware label and variant, training and sampling cost, speed-up over baseline, and the Nsight
Compute ratios to baseline where the training step was profiled."""

from __future__ import annotations

import pandas as pd

from ..derived import ncu_headline, relative_to, speedup
from ..render import Table

CAPTION = ("Optimization impact per variant and device: training time per sample, speed-up over baseline, sampling "
           "step, peak memory; Nsight Compute SM cycles, warp instructions and IPC of the training step relative to "
           "baseline, tensor-pipe utilisation (%)")


def optimization_table(runs: pd.DataFrame, summaries: pd.DataFrame) -> pd.DataFrame:
    if runs.empty:
        return pd.DataFrame()
    table = runs[["gpu", "variant", "origin", "device", "train_ms_per_sample", "sample_step_median_ms",
                  "train_peak_memory_gib"]].copy()
    table.insert(5, "train_speedup_vs_baseline", speedup(runs).to_numpy())
    head = ncu_headline(summaries)
    rel = relative_to(head, ["sm_cycles", "warp_instructions", "ipc"]).rename(
        columns={"sm_cycles": "sm_cycles_rel", "warp_instructions": "warp_instructions_rel", "ipc": "ipc_rel"})
    table = table.merge(rel, on=["gpu", "variant"], how="left")
    for column in ("sm_cycles_rel", "warp_instructions_rel", "ipc_rel", "tensor_pipe_pct"):
        table[column] = table[column].astype(float)
    return table


def build(job) -> Table:
    return Table(optimization_table(job.results.table("runs"), job.results.table("summaries")), CAPTION)
