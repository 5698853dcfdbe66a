"""What holds a rung's training step and how far each kernel class is from its floor, per 128^3 training sample.

The training phase of the `profile_torch` job (one optimizer step of two micro-batches of one sample, replayed from
its CUDA graph: kernel times, no operator shapes) against floors that need no shapes from the trace, as
../h200-2026-12-05-eval-floors/eval_floors.py does for a sampling evaluation:

- Convolutions (forward, data and weight gradients) and matrix products together: one training micro-batch's FLOPs
  (medddpm.flops on meta tensors, no recomputation) at the measured bf16 rate.
- The NDHWC GroupNorm + SiLU kernels: the model's 35 norm sites, each with its forward's least bytes (one read, one
  write) and its backward's (two reads, one write) at the measured copy bandwidth (profiling.norm_bench.floor_us).
The other classes get no floor: their bytes are their tensors, which the replay does not record.

    PYTHONPATH=workflow/scripts python3 data/measurements/2026-12-06-fastest/train_floors.py \
        <torch_kernels.parquet> <rung> <device_rates.json> > train_floors.md
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import torch

from medddpm.build import unet_config
from medddpm.flops import unet_flops
from profiling.norm_bench import floor_us, norm_sites, site_counts

ROOT = Path(__file__).resolve().parents[3]
# The sampling evaluation's script: the model's settings as the workflow merges them, and the floors' table.
sys.path.insert(0, str(ROOT / "data/measurements/h200-2026-12-05-eval-floors"))
from eval_floors import model_settings, print_floor_rows  # noqa: E402
SHAPE = (128, 128, 128)
SAMPLES_PER_STEP = 2  # upstream's two accumulated micro-batches of one sample: the profiled optimizer step
TARGET_MS = 46.0  # issue 44's target per training sample (goal 40)
PRODUCTS = ("conv_fprop", "conv_dgrad", "conv_wgrad", "gemm")


def main(argv: list[str]) -> None:
    profile, variant, rates_file = Path(argv[0]), argv[1], Path(argv[2])
    kernels = pd.read_parquet(profile)
    rates = json.loads(rates_file.read_text())
    tflops, copy = rates["bf16_matmul_tflops"], rates["copy_gb_per_s"]
    model = model_settings()
    flops = unet_flops(unet_config(model), SHAPE, "none")["train_micro_batch"]["total"]
    sites = site_counts(norm_sites(model, SHAPE))
    itemsize = torch.bfloat16.itemsize
    norm_floor = sum(float((sites["count"] * sites["elements"].map(
        lambda n, d=direction: floor_us(n, itemsize, d, copy))).sum()) for direction in ("forward", "backward")) / 1e3
    per_class = kernels.groupby("kernel_class")["duration_ns"].sum() / SAMPLES_PER_STEP / 1e6
    total = float(per_class.sum())
    products = float(sum(per_class.get(name, 0.0) for name in PRODUCTS))
    product_floor = flops / (tflops * 1e12) * 1e3
    rows = [("convolutions (forward, data and weight gradients) and matrix products", products, product_floor,
             "training FLOPs at the bf16 rate"),
            ("normalization", float(per_class["normalization"]), norm_floor,
             f"{int(sites['count'].sum())} sites, forward 2 and backward 3 tensors at the copy bandwidth")]
    rows += [(name, float(ms), math.nan, "not recorded (graph replay: no tensors)")
             for name, ms in per_class.sort_values(ascending=False).items()
             if name not in PRODUCTS and name != "normalization"]
    print(f"# {variant}'s training step at 128^3 against its floors "
          f"({rates['provenance'].get('device_name', 'device')})\n")
    print(f"One optimizer step of {SAMPLES_PER_STEP} samples profiled, {total:.2f} ms of kernels per sample; bf16 rate "
          f"{tflops:.1f} TFLOP/s, copy {copy / 1e3:.2f} TB/s (device_rates.json); a training sample holds "
          f"{flops / 1e12:.2f} TFLOP. Target {TARGET_MS:g} ms per sample.\n")
    print_floor_rows(rows, "kernels, per sample")
    print("\n| convolution kernels, per sample | ms |\n|---|---|")
    for name in PRODUCTS:
        print(f"| {name} | {float(per_class.get(name, 0.0)):.2f} |")
    norm = float(per_class["normalization"])
    print(f"\nThe kernels take {total:.2f} ms per sample against the target's {TARGET_MS:g}. With the norm kernels at "
          f"their floor they would take {total - norm + norm_floor:.2f} ms; with the convolutions and matrix products "
          f"at theirs, {total - products + product_floor:.2f} ms.")


if __name__ == "__main__":
    main(sys.argv[1:])
