"""tab03: one row per profiled run (measured here and shipped): kernels, time, conv and layout-conversion shares,
SM cycles, instructions, IPC and tensor-pipe utilisation; beside it, every kernel class of every run (CSV)."""

from __future__ import annotations

import pandas as pd

from ..derived import CONV_CLASSES
from ..prose import Context, PAPER_VARIANTS, num, pct
from ..render import Table

RUN_KEYS = ["gpu", "variant", "phase", "tool"]


def headline(classes: pd.DataFrame) -> pd.DataFrame:
    """One row per run of the per-class summaries."""
    rows = []
    for keys, run in classes.groupby(RUN_KEYS, sort=False):
        total = run[run["kernel_class"] == "all"].iloc[0]
        rows.append({
            **dict(zip(RUN_KEYS, keys)),
            "origin": total["origin"], "device": total["device"],
            "kernels": int(total["kernels"]),
            "kernel_time_ms": total["time_ns"] / 1e6,
            "conv_share": run[run["kernel_class"].isin(CONV_CLASSES)]["time_share"].sum(),
            "layout_conversion_share": total["layout_conversion_share"],
            "sm_cycles": total["sm_cycles"],
            "warp_instructions": total["warp_instructions"],
            "ipc": total["ipc"],
            "tensor_pipe_pct": total["tensor_pipe_pct"],
        })
    return pd.DataFrame(rows)


def build(job) -> Table:
    classes = job.results.table("summaries")
    classes = classes[RUN_KEYS + [c for c in classes.columns if c not in RUN_KEYS]]
    return Table(headline(classes),
                 "Kernels per run (measured here and shipped references): conv and layout-conversion time shares, SM "
                 "cycles, warp instructions, IPC and tensor-pipe utilisation (time-weighted); empty where the "
                 "profiler does not measure it", extra={"classes": classes})


# The article's table shows these columns, with these headers (the CSV keeps them all).
ARTICLE_COLUMNS = [("gpu", "label"), ("variant", "variant"), ("phase", "phase"), ("tool", "tool"),
                   ("kernels", "kernels"), ("kernel_time_ms", "kernel ms"), ("conv_share", "conv %"),
                   ("layout_conversion_share", "layout %"), ("sm_cycles", "SM cycles"),
                   ("warp_instructions", "warp instr."), ("ipc", "IPC"), ("tensor_pipe_pct", "tensor %")]
# Shown as percentages (fractions in the CSV).
ARTICLE_PERCENT_COLUMNS = {"conv_share", "layout_conversion_share"}


def describe(context: Context) -> str:
    inputs = context.inputs
    table = inputs.table("tab03_kernels")
    if table.empty:
        return "No kernel profile was collected."
    said = []
    for row in table[(table["phase"] == "train") & (table["variant"].isin(["baseline", *PAPER_VARIANTS]))] \
            .drop_duplicates(["gpu", "variant"]).itertuples():
        said.append(f"{row.variant} on {row.gpu} launches {int(row.kernels):,} kernels "
                    f"({num(row.kernel_time_ms, 4)} ms, convolutions {pct(row.conv_share)}, layout conversion "
                    f"{pct(row.layout_conversion_share)})")
    return ("Per run and phase, the kernel count and time with the convolution and layout-conversion shares and, "
            "where Nsight Compute ran, the step's totals. Training steps: " + "; ".join(said) + ".")
