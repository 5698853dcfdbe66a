"""Why the NDHWC norm kernels' backward sums pass stays below 3 TB/s: the four activation passes at the two largest
sites of frontier_graphed's profiled training step, with what Nsight Compute counted for each launch.

Per pass and site (the launches of one site agree to within a percent; the median is printed): its bytes (the
activation-sized tensors it reads and writes, norm_bench.TRITON_PASSES, in bfloat16), time and bandwidth; the thread
instructions it executed per element of the activation (smsp__thread_inst_executed.sum); its warp instructions per SM
per active cycle (sm__inst_executed.avg.per_cycle_active: an SM issues at most 4, one per scheduler) and the resident
warps its registers allow (launch__registers_per_thread, launch__occupancy_limit_registers); and two floors:

  memory floor  its bytes at the copy bandwidth (4,250 GB/s, the norm bench's)
  issue floor   its warp instructions (smsp__inst_executed.sum) at 4 per SM per cycle on all SMs, at the SM clock the
                launch ran at (sm__cycles_elapsed.max over its duration)

A pass whose issue floor is near its memory floor cannot reach the copy's bandwidth without fewer instructions or
near-perfect issue; one far below it is held by memory (latency or bandwidth).

    python3 data/measurements/h200-2026-12-05-norm-in-step/norm_issue.py > data/measurements/h200-2026-12-05-norm-in-step/norm_issue.md
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from norm_in_step import BENCH, EXPORT, ITEMSIZE, step_triples  # noqa: E402
from profiling.norm_bench import TRITON_PASSES  # noqa: E402

ISSUE_PER_SM = 4  # warp instructions an SM can issue per cycle: four schedulers, one each
LARGEST = ("1x128x128x128x128", "1x64x128x128x128")


def pass_rows(copy: float) -> list[dict]:
    """One row per activation pass and LARGEST site: what the step's export counted for it (medians over its
    launches) and its two floors at `copy` GB/s."""
    kernels = pd.read_parquet(EXPORT)
    found, _ = step_triples(kernels)
    kernels = kernels.set_index("launch")
    rows = []
    for shape in LARGEST:
        elements = math.prod(map(int, shape.split("x")))
        mine = found[found["shape"] == shape]
        for direction in ("forward", "backward"):
            side = mine[mine["direction"] == direction]
            for step, column in (("sums", "sums_launch"), ("apply", "apply_launch")):
                name = f"_{direction}_{step}"
                launches = kernels.loc[side[column]]
                assert (launches["short_name"] == name).all(), name
                read, written = TRITON_PASSES[name][2:]
                moved = (read + written) * elements * ITEMSIZE
                duration = float(launches["duration_ns"].median())
                clock_ghz = float((launches["sm_cycles"] / launches["duration_ns"]).median())
                sms = float(launches["launch_sm_count"].median())
                issue_ns = float(launches["warp_instructions"].median()) / (ISSUE_PER_SM * sms) / clock_ghz
                warps = float(launches["launch_occupancy_limit_registers"].median()
                              * launches["launch_block_size"].median() / 32)
                rows.append({
                    "site": shape, "pass": f"{direction} {step}", "launches": len(launches),
                    "time_us": duration / 1e3, "tb_per_s": moved / duration / 1e3,
                    "per_element": float(launches["thread_instructions"].median()) / elements,
                    "ipc": float(launches["ipc"].median()),
                    "registers": int(launches["launch_registers_per_thread"].median()), "warps": warps,
                    "memory_floor_us": moved / copy / 1e3, "issue_floor_us": issue_ns / 1e3,
                })
    return rows


def main() -> None:
    copy = json.loads((BENCH / "summary.json").read_text())["copy_gb_per_s"]
    rows = pass_rows(copy)
    print(f"frontier_graphed's profiled training step ({EXPORT.relative_to(EXPORT.parents[6])}); copy bandwidth "
          f"{copy:,.0f} GB/s; an SM issues at most {ISSUE_PER_SM} warp instructions per cycle.\n")
    print("| site | pass | launches | time (us) | TB/s | thread instructions per element | warp IPC (of 4) | "
          "registers per thread | resident warps per SM (registers) | memory floor (us) | issue floor (us) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['site']} | {row['pass']} | {row['launches']} | {row['time_us']:.1f} | {row['tb_per_s']:.2f} | "
              f"{row['per_element']:.1f} | {row['ipc']:.2f} | {row['registers']} | {row['warps']:.0f} | "
              f"{row['memory_floor_us']:.1f} | {row['issue_floor_us']:.1f} |")


if __name__ == "__main__":
    main()
