"""What the figures draw from the tf32 sampling step under the new settings and under the shipped ones (two runs of
those, the second on the same host right after the new), through the figures' own functions. Output: compare.txt.

    PYTHONPATH=workflow/scripts python3 data/measurements/h200-2026-12-04-ncu-cost/compare.py
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd

from profiling import ncu, tables
from reporting.derived import weighted_mean
from reporting.outputs.fig03_instruction_mix import instruction_mix
from reporting.outputs.fig04_memory_system import memory_by_class
from reporting.outputs.fig05_warp_states import warp_states
from reporting.outputs.fig06_priority_scores import priority_scores

HERE = Path(__file__).resolve().parent
RUNS = {"shipped, run 1": "sample_shipped_run1", "shipped, run 2": "sample_shipped", "new": "sample"}


def load(prefix: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    kernels = tables.from_ncu(ncu.parse_raw(gzip.open(HERE / f"{prefix}_ncu_raw.csv.gz", "rt").read()))
    rules = pd.read_csv(HERE / f"{prefix}_ncu_rules.csv.gz")
    return kernels.assign(variant="tf32"), rules.assign(variant="tf32")


FIGURES = {
    "tab03/fig07 (summary, all kernels)": lambda k, r: tables.summarise(k).set_index("kernel_class").loc[
        "all", ["time_ns", "sm_cycles", "warp_instructions", "ipc", "tensor_pipe_pct", "dram_bytes", "tensor_flop",
                "fp32_flop"]].astype(float),
    "fig03 (instructions by kind)": lambda k, r: instruction_mix(k).drop(columns="variant").iloc[0].astype(float),
    "fig04 (DRAM GB, L2 and L1 hit %, by class)": lambda k, r: memory_by_class(k).drop(columns="variant").set_index(
        "kernel_class").stack(),
    "fig05 (stalls per issued instruction; occupancy %)": lambda k, r: pd.concat([
        warp_states(k, top=100).set_index("reason")["value"],
        pd.Series({"achieved occupancy": weighted_mean(k, "achieved_occupancy_pct")})]),
    "fig06 (estimated saving, % of step time)": lambda k, r: priority_scores(r, k).groupby("rule")["saving_pct"].sum(),
}


def main() -> None:
    runs = {name: load(prefix) for name, prefix in RUNS.items()}
    out = []
    pd.set_option("display.width", 200)
    for title, draw in FIGURES.items():
        frame = pd.DataFrame({name: draw(*run) for name, run in runs.items()})
        frame["run 1 vs 2 (%)"] = (frame["shipped, run 1"] / frame["shipped, run 2"] - 1) * 100
        frame["new vs run 2 (%)"] = (frame["new"] / frame["shipped, run 2"] - 1) * 100
        out += [f"## {title}", frame.to_string(float_format=lambda v: f"{v:.6g}"), ""]
    types = {name: run[1].groupby(["section", "rule"])["speedup_type"].agg(lambda s: "/".join(sorted(set(
        s.dropna())))) for name, run in runs.items()}
    out += ["## rules and their speedup types", pd.DataFrame(types).fillna("(not run)").to_string()]
    (HERE / "compare.txt").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
