"""Kernel-class tables across runs: the per-run summaries of the profiles, side by side."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

CONV_CLASSES = ("conv_fprop", "conv_dgrad", "conv_wgrad")


def run_of(summary_path: str | Path) -> dict:
    """results/<gpu>/<variant>/profile/<phase>/<tool>_summary.csv -> its keys."""
    path = Path(summary_path)
    return {"gpu": path.parents[3].name, "variant": path.parents[2].name, "phase": path.parent.name,
            "tool": path.name.removesuffix("_summary.csv")}


def class_table(summary_paths: list[str | Path]) -> pd.DataFrame:
    """Long table: one row per (gpu, variant, phase, tool, kernel class)."""
    frames = [pd.read_csv(p).assign(**run_of(p)) for p in summary_paths]
    frame = pd.concat(frames, ignore_index=True)
    keys = ["gpu", "variant", "phase", "tool"]
    return frame[keys + [c for c in frame.columns if c not in keys]]


def headline(classes: pd.DataFrame) -> pd.DataFrame:
    """One row per run: conv share, layout-conversion share, SM cycles, instructions, IPC, tensor utilisation."""
    rows = []
    for keys, run in classes.groupby(["gpu", "variant", "phase", "tool"], sort=True):
        total = run[run["kernel_class"] == "all"].iloc[0]
        conv = run[run["kernel_class"].isin(CONV_CLASSES)]["time_share"].sum()
        rows.append(
            {
                **dict(zip(["gpu", "variant", "phase", "tool"], keys)),
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
