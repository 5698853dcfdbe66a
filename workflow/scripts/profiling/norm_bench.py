"""GroupNorm + SiLU at the U-Net's norm sites on one CUDA GPU: the NDHWC Triton kernels (medddpm.ndhwc_norm) over a
grid of tilings, against PyTorch's own GroupNorm on the same channels-last 5-D input and inductor's compiled function
on channels-last and contiguous inputs.

    PYTHONPATH=workflow/scripts python3 -m profiling.norm_bench --config config/paper.yaml --out norm_bench

Every number is device time of kernels (torch.profiler's CUDA activity, summed per call over `--repeats` calls after
warm-up), so the host's launch time, which a CUDA graph removes from the training step, is not in it. Each Triton pass
gets the bytes it must move (the activation and, backward, its gradient: read by the sums passes, read and written by
the apply passes) and its bandwidth against a device-to-device copy measured in the same process: the memory floor of
a norm site is one read of its inputs and one write of its output at the copy's bandwidth. Writes, under `--out`:
`sites.csv` (the norm sites, their shapes and how many times the U-Net has each), `sweep.csv` (the Triton passes'
time at the sweep's sites per tiling), `implementations.csv` (each implementation's forward and backward kernel time
per distinct site) and `summary.json` (the copy bandwidth, the best tiling found, each implementation's sum over the
U-Net's sites).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd
import torch

from medddpm import ndhwc_norm
from medddpm.build import unet_config
from medddpm.unet import GroupNormSiLU, UNet3D, fuse_norm_act, group_norm_silu

# The Triton kernels of one norm: (direction, pass, activation-sized tensors read, written).
TRITON_PASSES = {
    "_forward_sums": ("forward", "sums", 1, 0),
    "_forward_statistics": ("forward", "statistics", 0, 0),
    "_forward_apply": ("forward", "apply", 1, 1),
    "_backward_sums": ("backward", "sums", 2, 0),
    "_backward_coefficients": ("backward", "coefficients", 0, 0),
    "_backward_apply": ("backward", "apply", 2, 1),
}
# The least a norm must move, in activation-sized tensors: forward reads x and writes y, backward reads x and dy and
# writes dx (statistics and coefficients are a few numbers per group).
FLOOR_TENSORS = {"forward": 2, "backward": 3}
# The sweep's grid: the sums passes' tile and warps (the same for both directions in one setting; each direction's best
# is chosen on its own) and the sums programs; the apply passes' tile and warps. Tiles of 16384 elements and 16 warps
# were slower at every large site in the first sweep on an H200 (data/measurements/h200-2026-12-04-norm-tiles/), and
# Triton's pipelining stages of the sums loop (1 or 3) made no difference there.
SUMS_GRID = {"elements": (2048, 4096, 8192), "warps": (4, 8), "programs": (1024, 4096)}
APPLY_GRID = {"apply_elements": (2048, 4096, 8192, 16384), "apply_warps": (4, 8)}


def _sums_setting(base: ndhwc_norm.Tiling, elements: int, warps: int, programs: int) -> ndhwc_norm.Tiling:
    return replace(base, forward_sums_elements=elements, forward_sums_warps=warps, backward_sums_elements=elements,
                   backward_sums_warps=warps, programs=programs)


def norm_sites(model: dict, shape: tuple[int, int, int], batch: int = 1) -> list[tuple[int, ...]]:
    """The input shape (N, C, D, H, W) of every GroupNorm + SiLU of the U-Net, in the order the forward reaches them
    (a forward on meta tensors: no memory, no device)."""
    config = unet_config(model)
    with torch.device("meta"):
        unet = UNet3D(config)
    fuse_norm_act(unet)
    shapes: list[tuple[int, ...]] = []
    hooks = [module.register_forward_pre_hook(lambda _module, args: shapes.append(tuple(args[0].shape)))
             for module in unet.modules() if isinstance(module, GroupNormSiLU)]
    with torch.no_grad():
        unet(torch.empty(batch, config.in_channels, *shape, device="meta"),
             torch.zeros(batch, dtype=torch.long, device="meta"))
    for hook in hooks:
        hook.remove()
    return shapes


def site_counts(shapes: list[tuple[int, ...]]) -> pd.DataFrame:
    """Distinct norm sites, largest first, with how many times the U-Net has each and their elements."""
    counts = Counter(shapes)
    rows = [{"shape": "x".join(map(str, s)), "batch": s[0], "channels": s[1], "voxels": math.prod(s[2:]),
             "elements": math.prod(s), "count": n} for s, n in counts.items()]
    return pd.DataFrame(rows).sort_values(["elements", "channels"], ascending=False).reset_index(drop=True)


def pass_rows(kernels: pd.DataFrame, calls: int, elements: int, itemsize: int) -> list[dict]:
    """Per Triton pass of `kernels` (torch.profiler rows of `calls` forward and backward calls at one site): its
    kernel time per call, the bytes it must move and its bandwidth."""
    rows = []
    for name, (direction, step, read, written) in TRITON_PASSES.items():
        matching = kernels[kernels["name"] == name]
        if matching.empty:
            continue
        per_call_us = float(matching["duration_us"].sum()) / calls
        moved = (read + written) * elements * itemsize
        rows.append({"direction": direction, "pass": step, "kernel_us": per_call_us, "bytes": moved,
                     "gb_per_s": moved / per_call_us / 1e3 if moved and per_call_us > 0 else float("nan")})
    return rows


def floor_us(elements: int, itemsize: int, direction: str, copy_gb_per_s: float) -> float:
    """The memory floor of one direction of a norm at a site: its least bytes at the copy's bandwidth."""
    return FLOOR_TENSORS[direction] * elements * itemsize / copy_gb_per_s / 1e3


def _profiled(run, calls: int):
    """Kernel rows of `calls` runs of `run`, after two warm-up runs."""
    from .torchprof import kernel_rows

    for _ in range(2):
        run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    return kernel_rows(prof)


def _site_tensors(shape: tuple[int, ...], layout, dtype, seed: int = 0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(shape, device="cuda", generator=generator) * 2 + 0.5).to(dtype).contiguous(memory_format=layout)
    weight = torch.randn(shape[1], device="cuda", generator=generator)
    bias = torch.randn(shape[1], device="cuda", generator=generator)
    dy = torch.randn(shape, device="cuda", generator=generator).to(dtype).contiguous(memory_format=layout)
    return x.requires_grad_(True), weight.requires_grad_(True), bias.requires_grad_(True), dy


def _dims(shape: str) -> tuple[int, ...]:
    """A site's shape from its sites.csv text (N x C x D x H x W)."""
    return tuple(int(v) for v in shape.split("x"))


def _runs(implementation, shape, layout, dtype):
    """Forward, and forward and backward, of `implementation(x, weight, bias, 32, 1e-5)` at one site."""
    x, weight, bias, dy = _site_tensors(shape, layout, dtype)

    def forward():
        return implementation(x, weight, bias, 32, 1e-5)

    def forward_backward():
        torch.autograd.grad(forward(), (x, weight, bias), dy)

    return forward, forward_backward


def time_directions(implementation, shape, layout, dtype, calls: int) -> dict:
    """Forward and backward kernel time per call (us) of `implementation(x, weight, bias, 32, 1e-5)` at one site: the
    forward profiled alone, the backward as the rest of forward and backward together."""
    forward, forward_backward = _runs(implementation, shape, layout, dtype)
    forward_us = float(_profiled(forward, calls)["duration_us"].sum()) / calls
    total_us = float(_profiled(forward_backward, calls)["duration_us"].sum()) / calls
    return {"forward_us": forward_us, "backward_us": total_us - forward_us}


def aten_group_norm_silu(x, weight, bias, groups, eps):
    """PyTorch's own GroupNorm (ATen's CUDA kernels, whatever they do with a channels-last input) then SiLU, in
    upstream's dtypes (statistics in float32, the result cast back before SiLU)."""
    compute = torch.promote_types(x.dtype, torch.float32)
    normed = torch.nn.functional.group_norm(x.to(compute), groups, weight, bias, eps).to(x.dtype)
    return torch.nn.functional.silu(normed)


def _with_tiling(tiling: ndhwc_norm.Tiling):
    def kernels(x, weight, bias, groups, eps):
        ndhwc_norm.TILING = tiling
        return ndhwc_norm.group_norm_silu_ndhwc(x, weight, bias, groups, eps)
    return kernels


def sweep(sites: pd.DataFrame, dtype, calls: int, deadline: float) -> pd.DataFrame:
    """The Triton passes' kernel time at `sites` for each tiling of the apply grid (sums passes at the default), then
    of the sums grid (apply passes at the default), until `deadline` (time.monotonic())."""
    base = ndhwc_norm.Tiling()
    tilings = [replace(base, **dict(zip(APPLY_GRID, values))) for values in itertools.product(*APPLY_GRID.values())]
    tilings += [_sums_setting(base, *values) for values in itertools.product(*SUMS_GRID.values())]
    rows = []
    for tiling in dict.fromkeys(tilings):
        if time.monotonic() > deadline:
            print(f"norm_bench: the sweep's time ran out after {len(rows)} rows", file=sys.stderr)
            break
        for site in sites.itertuples():
            # Each Triton kernel is its own pass: one profile of forward and backward gives them all.
            _, forward_backward = _runs(_with_tiling(tiling), _dims(site.shape), torch.channels_last_3d, dtype)
            for row in pass_rows(_profiled(forward_backward, calls), calls, site.elements, dtype.itemsize):
                rows.append({**asdict(tiling), "shape": site.shape, **row})
    ndhwc_norm.TILING = base
    return pd.DataFrame(rows)


def _pass_settings(rows: pd.DataFrame, direction: str, step: str) -> pd.DataFrame:
    """The settings that shape one tile pass, by row: the sums pass's tile, warps and programs of its direction, or
    the apply passes' tile and warps."""
    if step == "sums":
        return pd.DataFrame({"elements": rows[f"{direction}_sums_elements"], "warps": rows[f"{direction}_sums_warps"],
                             "programs": rows["programs"]})
    return pd.DataFrame({"elements": rows["apply_elements"], "warps": rows["apply_warps"], "programs": math.nan})


def best_tiling(swept: pd.DataFrame) -> ndhwc_norm.Tiling:
    """The tiling of the sweep whose forward sums pass takes least time over the swept sites, with the backward sums
    pass's and the apply passes' likewise; the sums programs those of the fastest sums passes of both directions. A
    setting timed more than once (the default sums passes beside each apply tiling) counts its median."""

    def fastest(rows: pd.DataFrame, keys: list[str]) -> dict:
        per_site = rows.groupby(keys + ["shape", "direction"])["kernel_us"].median()
        best = per_site.groupby(level=list(range(len(keys)))).sum().idxmin()
        # As Python ints: Triton cannot specialize a kernel on numpy's.
        return dict(zip(keys, (int(v) for v in (best if isinstance(best, tuple) else (best,)))))

    sums = swept[swept["pass"] == "sums"]
    settings = pd.concat([_pass_settings(rows, direction, "sums") for direction, rows in sums.groupby("direction")])
    sums = sums.assign(elements=settings["elements"], warps=settings["warps"])
    chosen = {"programs": fastest(sums, ["elements", "warps", "programs"])["programs"]}
    for direction in ("forward", "backward"):
        rows = sums[(sums["direction"] == direction) & (sums["programs"] == chosen["programs"])]
        best = fastest(rows, ["elements", "warps"])
        chosen.update({f"{direction}_sums_elements": best["elements"], f"{direction}_sums_warps": best["warps"]})
    chosen.update(fastest(swept[swept["pass"] == "apply"], list(APPLY_GRID)))
    return ndhwc_norm.Tiling(**chosen)


def pass_summary(swept: pd.DataFrame, shape: str, chosen: ndhwc_norm.Tiling) -> pd.DataFrame:
    """Per tile pass at one swept site: the fastest setting of that pass in the sweep (its tile, warps and, for a
    sums pass, programs), its time and bandwidth, and the time of the chosen tiling's setting for the pass (the median
    where the sweep timed it more than once)."""
    rows = []
    for (direction, step), group in swept[(swept["shape"] == shape) & swept["pass"].isin(["sums", "apply"])].groupby(
            ["direction", "pass"], sort=False):
        settings = _pass_settings(group, direction, step)
        best = group.loc[group["kernel_us"].idxmin()]
        best_settings = settings.loc[best.name]
        mine = _pass_settings(pd.DataFrame([asdict(chosen)]), direction, step).iloc[0]
        same = (settings["elements"] == mine["elements"]) & (settings["warps"] == mine["warps"])
        if step == "sums":
            same &= settings["programs"] == mine["programs"]
        tile = f"{int(best_settings['elements'])} x {int(best_settings['warps'])} warps"
        if step == "sums":
            tile += f", {int(best_settings['programs'])} programs"
        rows.append({"pass": f"{direction} {step}", "fastest tile": tile, "us": float(best["kernel_us"]),
                     "TB/s": float(best["gb_per_s"]) / 1e3,
                     "chosen tiling's us": float(group.loc[same, "kernel_us"].median()) if same.any() else math.nan})
    return pd.DataFrame(rows)


def implementations(tilings: dict[str, ndhwc_norm.Tiling]) -> dict:
    """Name -> (function, layout of its input)."""
    compiled = torch.compile(group_norm_silu, dynamic=False, fullgraph=True)
    chosen = {f"ndhwc kernels ({name})": (_with_tiling(tiling), torch.channels_last_3d)
              for name, tiling in tilings.items()}
    return {**chosen,
            "aten GroupNorm, channels-last input": (aten_group_norm_silu, torch.channels_last_3d),
            "inductor, channels-last input": (compiled, torch.channels_last_3d),
            "inductor, contiguous input": (compiled, torch.contiguous_format)}


def compare(sites: pd.DataFrame, tilings: dict[str, ndhwc_norm.Tiling], dtype, calls: int,
            copy_gb_per_s: float) -> pd.DataFrame:
    """Each implementation's forward and backward kernel time at every distinct site, beside the site's floor."""
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 4 * len(sites))
    rows = []
    for name, (function, layout) in implementations(tilings).items():
        for site in sites.itertuples():
            timed = time_directions(function, _dims(site.shape), layout, dtype, calls)
            for direction in ("forward", "backward"):
                rows.append({"implementation": name, "shape": site.shape, "count": site.count, "direction": direction,
                             "kernel_us": timed[f"{direction}_us"],
                             "floor_us": floor_us(site.elements, dtype.itemsize, direction, copy_gb_per_s)})
    ndhwc_norm.TILING = ndhwc_norm.Tiling()
    return pd.DataFrame(rows)


def totals(compared: pd.DataFrame) -> pd.DataFrame:
    """Per implementation and direction: kernel time and floor summed over the U-Net's norm sites (each distinct
    site times its count), in ms."""
    weighted = compared.assign(kernel_ms=compared["kernel_us"] * compared["count"] / 1e3,
                               floor_ms=compared["floor_us"] * compared["count"] / 1e3)
    return weighted.groupby(["implementation", "direction"], sort=False)[["kernel_ms", "floor_ms"]].sum().reset_index()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="config/paper.yaml", help="the config whose `model` section (over config.yaml's) is the network")
    parser.add_argument("--out", required=True, type=Path, help="folder for the CSV and JSON files")
    parser.add_argument("--shape", type=int, nargs=3, default=(128, 128, 128), help="the volume (D H W)")
    parser.add_argument("--calls", type=int, default=10, help="profiled calls per site and implementation")
    parser.add_argument("--sweep-sites", type=int, default=2, help="the largest sites the tilings are swept at")
    parser.add_argument("--sweep-seconds", type=float, default=180.0, help="time for the sweep, at most")
    args = parser.parse_args(argv)
    if not Path(args.config).is_file():
        print(f"norm_bench: {args.config}: no such config file", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("norm_bench: needs a CUDA GPU (the Triton kernels and the device times are the GPU's)", file=sys.stderr)
        return 1
    import yaml

    from measurement.rates import copy_bandwidth

    model = {**yaml.safe_load(Path("config.yaml").read_text())["model"],
             **(yaml.safe_load(Path(args.config).read_text()).get("model") or {})}
    args.out.mkdir(parents=True, exist_ok=True)
    sites = site_counts(norm_sites(model, tuple(args.shape)))
    sites.to_csv(args.out / "sites.csv", index=False)
    copy = copy_bandwidth(torch.device("cuda"), 1024, 3, 15)["gb_per_s"]
    dtype = torch.bfloat16
    swept = sweep(sites.head(args.sweep_sites), dtype, args.calls, time.monotonic() + args.sweep_seconds)
    swept.to_csv(args.out / "sweep.csv", index=False)
    tilings = {"default": ndhwc_norm.Tiling()}
    if not swept.empty:
        tilings["best of the sweep"] = best_tiling(swept)
    compared = compare(sites, tilings, dtype, args.calls, copy)
    compared.to_csv(args.out / "implementations.csv", index=False)
    summed = totals(compared)
    summary = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "dtype": str(dtype),
               "copy_gb_per_s": copy, "tilings": {name: asdict(t) for name, t in tilings.items()},
               "totals_ms": summed.to_dict(orient="records")}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"copy bandwidth {copy:.0f} GB/s; {len(sites)} distinct norm sites, {int(sites['count'].sum())} in all")
    print(summed.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if not swept.empty:
        largest = sites["shape"].iloc[0]
        print(f"the tile passes at {largest}, the fastest of the sweep beside the chosen tiling's:")
        print(pass_summary(swept, largest, tilings.get("best of the sweep", tilings["default"])).to_string(
            index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
