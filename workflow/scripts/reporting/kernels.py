"""Kernel-class tables across runs: the per-run summaries of the profiles, side by side."""

from __future__ import annotations

import pandas as pd

CONV_CLASSES = ("conv_fprop", "conv_dgrad", "conv_wgrad")
RUN_KEYS = ["gpu", "variant", "phase", "tool"]


def headline(classes: pd.DataFrame) -> pd.DataFrame:
    """One row per run of a long per-class table (Sources.summaries): where its data came from, conv share,
    layout-conversion share, SM cycles, instructions, IPC, tensor utilisation."""
    rows = []
    for keys, run in classes.groupby(RUN_KEYS, sort=True):
        total = run[run["kernel_class"] == "all"].iloc[0]
        conv = run[run["kernel_class"].isin(CONV_CLASSES)]["time_share"].sum()
        rows.append(
            {
                **dict(zip(RUN_KEYS, keys)),
                "origin": total.get("origin", ""),
                "device": total.get("device", ""),
                "kernels": int(total["kernels"]),
                "kernel_time_ms": total["time_ns"] / 1e6,
                "conv_share": conv,
                "layout_conversion_share": total["layout_conversion_share"],
                "sm_cycles": total["sm_cycles"],
                "warp_instructions": total["warp_instructions"],
                "ipc": total["ipc"],
                "tensor_pipe_pct": total["tensor_pipe_pct"],
            }
        )
    return pd.DataFrame(rows)
