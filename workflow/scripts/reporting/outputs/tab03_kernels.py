"""tab03: one row per profiled run (measured here and shipped): kernels, time, conv and layout-conversion shares,
SM cycles, instructions, IPC and tensor-pipe utilisation; beside it, every kernel class of every run (CSV)."""

from __future__ import annotations

import pandas as pd

from ..derived import CONV_CLASSES
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
