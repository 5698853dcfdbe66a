"""frontier_edges against frontier_graphed in the kernels of one H100's torch.profiler jobs: each kernel class's time
per profiled step, and the kernels that run the U-Net's first and last convolutions in sampling (the first and the
last convolution launch of each evaluation, with the layout conversions beside them).

    PYTHONPATH=workflow/scripts python3 data/measurements/h100-2026-12-05-ndhwc-edges/edges_profile.py > edges_profile.md
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from profiling.evaluations import first_and_last_convolution

HERE = Path(__file__).resolve().parent
RUNGS = ("frontier_graphed", "frontier_edges")


def kernels(rung: str, phase: str) -> pd.DataFrame:
    return pd.read_parquet(HERE / rung / phase / "torch_kernels.parquet").sort_values("launch", kind="stable")


def class_table(phase: str) -> pd.DataFrame:
    table = pd.DataFrame({rung: kernels(rung, phase).groupby("kernel_class")["duration_ns"].sum() / 1e6
                          for rung in RUNGS}).fillna(0.0)
    table["difference"] = table["frontier_edges"] - table["frontier_graphed"]
    table.loc["all"] = table.sum()
    return table


def edge_kernels(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The launches from the one before the first convolution's layout conversions to the first convolution's
    output conversion, and from the last activation's conversions to the last convolution's, in the first evaluation
    (a sampling profile replays the same graph once per evaluation)."""
    first, last = first_and_last_convolution(table)
    around = lambda launch: table[(table["launch"] >= launch - 4) & (table["launch"] <= launch + 1)]  # noqa: E731
    return around(first), around(last)


def markdown() -> str:
    lines = ["# frontier_edges against frontier_graphed: kernel time by class (one H100, torch.profiler)", ""]
    for phase, what in (("train", "one optimizer step: two 128^3 samples"), ("sample", "four U-Net evaluations")):
        lines += [f"## {phase} ({what}), ms", "", "| kernel class | frontier_graphed | frontier_edges | difference |",
                  "|---|---|---|---|"]
        for name, row in class_table(phase).iterrows():
            lines.append(f"| {name} | {row['frontier_graphed']:.2f} | {row['frontier_edges']:.2f} | "
                         f"{row['difference']:+.2f} |")
        lines.append("")
    lines += ["## Sampling: the kernels around the first and the last convolution of one evaluation, us", ""]
    for rung in RUNGS:
        table = kernels(rung, "sample")
        edges = edge_kernels(table)
        for where, rows in zip(("first", "last"), edges):
            lines.append(f"{rung}, {where} convolution: " + ", ".join(
                f"{row.short_name[:40]} {row.duration_ns / 1e3:.0f}" for row in rows.itertuples()))
            lines.append("")
        # The other layout conversions of the first evaluation: cuDNN's transposes around the other convolutions.
        first, last = edges
        between = table[(table["launch"] > first["launch"].max()) & (table["launch"] < last["launch"].min() - 4)]
        others = between[between["kernel_class"] == "layout_conversion"]
        lines.append(f"{rung}, layout conversions between them: {len(others)} launches, "
                     f"{others['duration_ns'].sum() / 1e3:.0f} us")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
