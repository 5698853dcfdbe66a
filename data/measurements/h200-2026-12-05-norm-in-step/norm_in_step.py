"""frontier_graphed's NDHWC norm kernels inside its profiled training step, site by site, against the memory floor the
norm bench gives each site (profiling.norm_bench: one read of the inputs and one write of the output at the copy's
bandwidth) and against the same kernels timed alone in the bench.

The step's Nsight Compute export (data/reference/wholehead/h200/frontier_graphed/profile/train/, 2026-12-02) holds no
DRAM bytes and names no layer. Each norm runs as three launches in order (sums, statistics or coefficients, apply),
so the export's launches fall into triples; the forward triples of a micro-batch are the U-Net's norm sites in the
order its forward reaches them (norm_bench.norm_sites, a forward on meta tensors), and the backward triples, matched by
the apply pass's grid, the same sites. Each triple's apply grid is checked against the one ndhwc_norm's tiling gives
the site's shape: a triple that does not match stops the script.

    python3 data/measurements/h200-2026-12-05-norm-in-step/norm_in_step.py > data/measurements/h200-2026-12-05-norm-in-step/norm_in_step.md
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import triton
from snakemake.utils import update_config

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "workflow" / "scripts"))

from medddpm import ndhwc_norm  # noqa: E402
from planning.configcheck import read_mapping  # noqa: E402
from profiling.norm_bench import FLOOR_TENSORS, TRITON_PASSES, floor_us, norm_sites  # noqa: E402

EXPORT = REPO / "data" / "reference" / "wholehead" / "h200" / "frontier_graphed" / "profile" / "train" / "ncu_kernels.parquet"
BENCH = REPO / "data" / "measurements" / "h200-2026-12-04-norm-tiles"
ITEMSIZE = 2  # bfloat16 activations
MICRO_BATCHES = 2


def apply_grid(shape: tuple[int, ...], tiling: ndhwc_norm.Tiling = ndhwc_norm.TILING) -> int:
    """The apply pass's programs for an (N, C, D, H, W) activation: N x its tiles of `apply_elements` (the rows
    ndhwc_norm gives a tile of all channels)."""
    batch, channels, voxels = shape[0], shape[1], math.prod(shape[2:])
    return batch * triton.cdiv(voxels, ndhwc_norm._rows(tiling.apply_elements, triton.next_power_of_2(channels), voxels))


def triples(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per norm launch triple of the step, in launch order: direction, the three durations, the apply grid, and
    the sums and apply passes' launch numbers."""
    norm = kernels[kernels["short_name"].isin(TRITON_PASSES)].sort_values("launch")
    rows, pending = [], []
    for row in norm.itertuples():
        direction, step, _, _ = TRITON_PASSES[row.short_name]
        pending.append((direction, step, float(row.duration_ns), int(row.launch_grid_size), int(row.launch)))
        if step == "apply":
            if len(pending) != 3 or {p[0] for p in pending} != {direction}:
                raise SystemExit(f"launch {row.launch}: a norm's launches out of order: {pending}")
            rows.append({"direction": direction, "sums_ns": pending[0][2], "middle_ns": pending[1][2],
                         "apply_ns": pending[2][2], "grid": pending[2][3], "sums_launch": pending[0][4],
                         "apply_launch": pending[2][4]})
            pending = []
    return pd.DataFrame(rows)


def sites_of(found: pd.DataFrame, shapes: list[tuple[int, ...]]) -> pd.Series:
    """The site shape of each triple: forward triples in the forward's order, micro-batch after micro-batch; backward
    triples by their apply grid among the sites of their micro-batch not matched yet."""
    names = []
    forward_seen = backward_left = 0
    left: list[tuple[int, ...]] = []
    for row in found.itertuples():
        if row.direction == "forward":
            shape = shapes[forward_seen % len(shapes)]
            forward_seen += 1
        else:
            if not left:
                left = list(shapes)
            candidates = [s for s in left if apply_grid(s) == row.grid]
            if not candidates:
                raise SystemExit(f"backward triple {backward_left}: no site left with apply grid {row.grid}")
            # Sites of one grid have one shape, or shapes of equal elements: either is the same floor.
            shape = candidates[-1]
            left.remove(shape)
            backward_left += 1
        if apply_grid(shape) != row.grid:
            raise SystemExit(f"{row.direction} triple at site {shape}: apply grid {row.grid}, "
                             f"the tiling gives {apply_grid(shape)}")
        names.append("x".join(map(str, shape)))
    return pd.Series(names, index=found.index)


def step_triples(kernels: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple[int, ...]]]:
    """The norm triples (`triples`) of the step's kernel table with each one's site shape, and the U-Net's site shapes
    (config.yaml with config/paper.yaml, as Snakemake merges them)."""
    paper = read_mapping(REPO / "config.yaml", "embedded default")
    update_config(paper, read_mapping(REPO / "config" / "paper.yaml", "overlay"))
    shapes = norm_sites(paper["model"], tuple(paper["dataset"]["shape"]))
    found = triples(kernels)
    if len(found) != 2 * MICRO_BATCHES * len(shapes):
        raise SystemExit(f"{len(found)} norm triples in the step, expected {2 * MICRO_BATCHES * len(shapes)}")
    found["shape"] = sites_of(found, shapes)
    return found, shapes


def main() -> None:
    found, shapes = step_triples(pd.read_parquet(EXPORT))
    found["step_us"] = (found["sums_ns"] + found["middle_ns"] + found["apply_ns"]) / 1e3
    copy = json.loads((BENCH / "summary.json").read_text())["copy_gb_per_s"]
    bench = pd.read_csv(BENCH / "implementations.csv")
    bench = bench[bench["implementation"] == "ndhwc kernels (default)"].set_index(["shape", "direction"])
    per_site = (found.groupby(["shape", "direction"], sort=False)
                .agg(launches=("step_us", "size"), step_us=("step_us", "mean"), apply_us=("apply_ns", "mean"),
                     sums_us=("sums_ns", "mean")).reset_index())
    per_site["apply_us"] /= 1e3
    per_site["sums_us"] /= 1e3
    per_site["elements"] = per_site["shape"].map(lambda s: math.prod(map(int, s.split("x"))))
    per_site["floor_us"] = [floor_us(e, ITEMSIZE, d, copy) for d, e in zip(per_site["direction"], per_site["elements"])]
    per_site["bench_us"] = [bench.at[(s, d), "kernel_us"] for s, d in zip(per_site["shape"], per_site["direction"])]
    per_site["count"] = per_site["launches"] // MICRO_BATCHES
    per_site = per_site.sort_values(["elements", "direction"], ascending=[False, False], kind="stable")

    step_ms = float((per_site["step_us"] * per_site["launches"]).sum()) / 1e3
    floor_ms = float((per_site["floor_us"] * per_site["launches"]).sum()) / 1e3
    bench_ms = float((per_site["bench_us"] * per_site["launches"]).sum()) / 1e3
    # The passes' own bytes over the floor's, per direction (sums read the activation once, apply again and write).
    two_pass = {direction: sum(read + written for d, _, read, written in TRITON_PASSES.values() if d == direction)
                / FLOOR_TENSORS[direction] for direction in FLOOR_TENSORS}
    two_pass_ms = float(sum(per_site["floor_us"] * per_site["launches"] * per_site["direction"].map(two_pass))) / 1e3
    print(f"Copy bandwidth {copy:,.0f} GB/s (the norm bench's, {BENCH.name}/summary.json); bfloat16 activations; "
          f"{len(shapes)} norm sites, {MICRO_BATCHES} micro-batches.\n")
    print("| | ms per optimizer step (two samples) | times the floor |\n|---|---:|---:|")
    print(f"| the NDHWC norm kernels in the profiled step (Nsight Compute, each kernel alone, cold L2) | {step_ms:.2f} | "
          f"{step_ms / floor_ms:.2f} |")
    print(f"| the same kernels at the same sites in the norm bench (warm, back to back) | {bench_ms:.2f} | "
          f"{bench_ms / floor_ms:.2f} |")
    print(f"| two passes over the activation at the copy's bandwidth (sums, then apply) | {two_pass_ms:.2f} | "
          f"{two_pass_ms / floor_ms:.2f} |")
    print(f"| the floor: one read of the inputs, one write of the output | {floor_ms:.2f} | 1.00 |\n")
    print("| site (N x C x D x H x W) | sites | direction | in the step (us) | sums / apply (us) | bench (us) | "
          "floor (us) | step / floor | step's share of the norms |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in per_site.itertuples():
        share = row.step_us * row.launches / 1e3 / step_ms
        print(f"| {row.shape} | {row.count} | {row.direction} | {row.step_us:.1f} | {row.sums_us:.1f} / "
              f"{row.apply_us:.1f} | {row.bench_us:.1f} | {row.floor_us:.1f} | {row.step_us / row.floor_us:.2f} | "
              f"{100 * share:.1f} % |")


if __name__ == "__main__":
    main()
