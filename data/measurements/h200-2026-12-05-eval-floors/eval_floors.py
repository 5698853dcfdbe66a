"""What holds frontier_graphed's sampling evaluation and how far each kernel class is from its floor (H200 records).

The evaluation's profile (../h200-2026-12-04-sample-profile/: torch.profiler over evaluations replayed from a CUDA
graph) has each kernel's time but no operator shapes (a replay launches kernels without operators), so
profiling.argument_bytes has nothing to attribute there. These floors need no shapes from the trace:

- Convolutions and matrix products together: the model's forward FLOPs (medddpm.flops, PyTorch's FLOP counter on meta
  tensors) at the measured bf16 rate. Together, because cuDNN runs some 1x1 convolutions with cuBLAS-style kernels
  (the profile has 48 convolution launches per evaluation for the forward's 65 convolutions and 1-D projections).
- The NDHWC GroupNorm + SiLU kernels: the model's 35 norm sites (profiling.norm_bench.norm_sites), each at one read of
  its input and one write of its output at the measured copy bandwidth (norm_bench.floor_us).
- The first and the last convolution on their own: the first and the last convolution launch of each evaluation are
  the forward's first (3 input channels) and last (1 output channel) convolution, each with the layout conversions
  launched beside it.
The element-wise, layout and cast kernels get no floor here: their bytes are their tensors, which the replay does not
record.

    PYTHONPATH=workflow/scripts python3 data/measurements/h200-2026-12-05-eval-floors/eval_floors.py > eval_floors.md

Another rung's sampling profile of the same kind (the `profile_torch` job's sample phase): its torch_kernels.parquet,
the rung's name and, for another device, its device_rates.json as arguments, e.g. `eval_floors.py
results/wholehead/h200/frontier_edges/profile/sample/torch_kernels.parquet frontier_edges`.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import conv_flop_count

from medddpm.build import unet_config
from medddpm.flops import unet_flops
from medddpm.unet import UNet3D
from profiling.errors import ProfilingError
from profiling.evaluations import evaluation_count, first_and_last_convolution
from profiling.norm_bench import floor_us, norm_sites, site_counts

ROOT = Path(__file__).resolve().parents[3]
PROFILE = ROOT / "data/measurements/h200-2026-12-04-sample-profile/torch_kernels.parquet"
RATES = ROOT / "data/reference/wholehead/h200/device_rates.json"
SHAPE = (128, 128, 128)
TARGET_MS = 12.0  # issue 44's target for one evaluation


def model_settings() -> dict:
    """config.yaml's model section under config/paper.yaml's, as the workflow merges them."""
    return {**yaml.safe_load((ROOT / "config.yaml").read_text())["model"],
            **(yaml.safe_load((ROOT / "config/paper.yaml").read_text()).get("model") or {})}


class _Convolutions(TorchDispatchMode):
    """Every aten.convolution of a forward, in order: its input and weight shapes and FLOPs."""

    def __init__(self):
        super().__init__()
        self.rows: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.convolution.default:
            x, w = args[0], args[1]
            self.rows.append({"input": "x".join(map(str, x.shape)), "weight": "x".join(map(str, w.shape)),
                              "flop": conv_flop_count(list(x.shape), list(w.shape), list(out.shape),
                                                      transposed=bool(args[6]))})
        return out


def forward_convolutions(model: dict) -> pd.DataFrame:
    config = unet_config(model)
    with torch.device("meta"):
        unet = UNet3D(config)
    mode = _Convolutions()
    with torch.no_grad(), mode:
        unet(torch.empty(1, config.in_channels, *SHAPE, device="meta"), torch.zeros(1, dtype=torch.long, device="meta"))
    return pd.DataFrame(mode.rows)


def edge_launches(kernels: pd.DataFrame, profile: Path) -> list[pd.DataFrame]:
    """The kernels of the first evaluation from the one before the first convolution's layout conversions through
    the first convolution's output conversion, and likewise around the last convolution."""
    launches = kernels["launch"]
    picked = []
    for launch in first_and_last_convolution(kernels, str(profile)):
        near = kernels[(launches >= launch - 5) & (launches <= launch + 1)]
        picked.append(near[near["kernel_class"].isin(["conv_fprop", "layout_conversion"])])
    return picked


def print_floor_rows(rows: list[tuple[str, float, float, str]], heading: str = "kernels") -> None:
    """The table of kernel classes against their floors: (name, ms, floor ms or nan, what the floor is from)."""
    print(f"| {heading} | ms | floor (ms) | floor from | time / floor | above floor (ms) |")
    print("|---|---|---|---|---|---|")
    for name, ms, floor, what in rows:
        known = floor == floor
        print(f"| {name} | {ms:.2f} | {f'{floor:.2f}' if known else '-'} | {what} | "
              f"{f'{ms / floor:.2f}' if known else '-'} | {f'{ms - floor:.2f}' if known else '-'} |")


def main(argv: list[str]) -> None:
    profile = Path(argv[0]) if argv else PROFILE
    variant = argv[1] if len(argv) > 1 else "frontier_graphed"
    kernels = pd.read_parquet(profile).sort_values("launch", kind="stable")
    rates = json.loads((Path(argv[2]) if len(argv) > 2 else RATES).read_text())
    tflops, copy = rates["bf16_matmul_tflops"], rates["copy_gb_per_s"]
    model = model_settings()
    convs = forward_convolutions(model)
    flops = unet_flops(unet_config(model), SHAPE, "none")["forward"]
    evaluations = evaluation_count(kernels, str(profile))
    sites = site_counts(norm_sites(model, SHAPE))
    itemsize = torch.bfloat16.itemsize
    norm_floor = float((sites["count"] * sites["elements"].map(
        lambda n: floor_us(n, itemsize, "forward", copy))).sum()) / 1e3
    per_class = kernels.groupby("kernel_class")["duration_ns"].sum() / evaluations / 1e6
    total = float(per_class.sum())
    products = float(per_class.get("conv_fprop", 0.0) + per_class.get("gemm", 0.0))
    product_floor = flops["total"] / (tflops * 1e12) * 1e3
    rows = [("convolutions and matrix products", products, product_floor, "forward FLOPs at the bf16 rate"),
            ("normalization", float(per_class["normalization"]), norm_floor,
             f"{int(sites['count'].sum())} sites, one read and one write at the copy bandwidth")]
    rows += [(name, float(ms), math.nan, "not recorded (graph replay: no tensors)")
             for name, ms in per_class.sort_values(ascending=False).items()
             if name not in ("conv_fprop", "gemm", "normalization")]

    print(f"# {variant}'s sampling evaluation at 128^3 against its floors "
          f"({rates['provenance'].get('device_name', 'device')})\n")
    print(f"{evaluations} evaluations profiled, {total:.2f} ms of kernels each; bf16 rate {tflops:.1f} TFLOP/s, copy "
          f"{copy / 1e3:.2f} TB/s (device_rates.json); the forward's {len(convs)} convolutions and 1-D projections "
          f"hold {flops['total'] / 1e12:.2f} TFLOP. Target {TARGET_MS:g} ms.\n")
    print_floor_rows(rows)
    others = total - products - float(per_class["normalization"])
    allowed = TARGET_MS - norm_floor
    print(f"\nWith the norm kernels at their floor and every kernel without a floor ({others:.2f} ms now) at zero, "
          f"the convolutions and matrix products could take {allowed:.2f} ms for the target: "
          f"{allowed / product_floor:.2f}x their floor, against {products / product_floor:.2f}x now. As they run, they "
          f"alone take {products:.2f} ms.\n")
    switches = yaml.safe_load((ROOT / "config.yaml").read_text())["variants"].get(variant, {})
    if switches.get("edge_gemms"):
        # The rung's first and last convolution launches are then other convolutions: the edges are matrix products.
        print("The first and the last convolution run as matrix products (`edge_gemms`): their gathers, products and "
              "sums are counted above among the element-wise kernels and the matrix products.")
        return
    print("The first and the last convolution of an evaluation, with the layout conversions beside them (us):\n")
    print("| convolution | input | weight | FLOP floor (us) | kernels (us) | all (us) |")
    print("|---|---|---|---|---|---|")
    for (where, row), launches in zip((("first", convs.iloc[0]), ("last", convs.iloc[-1])),
                                      edge_launches(kernels, profile)):
        listed = ", ".join(f"{k.short_name[:24]} {k.duration_ns / 1e3:.0f}" for k in launches.itertuples())
        print(f"| {where} | {row['input']} | {row['weight']} | {row['flop'] / (tflops * 1e12) * 1e6:.1f} | {listed} | "
              f"{launches['duration_ns'].sum() / 1e3:.0f} |")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ProfilingError as error:
        raise SystemExit(str(error)) from None
