"""What the padded first convolution changed in the kernels: frontier_edges (edges/) against frontier_input (this
folder), both profiled on the same kind of H100. Writes first_conv.md beside this script.

Per sampling evaluation (4 profiled): cuDNN's layout conversions (nchwToNhwc, nhwcToNchw, nhwcAddPadding) and the
pre-Hopper sm80 kernels, then the conversions of one evaluation in launch order, each with the kernel before it and the
convolution after it, which names the convolution they serve. Per training sample (one step of two profiled): the
same totals. The traces replay CUDA graphs, so no operator shapes are recorded; the neighbours name the sites."""

import gzip
import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
PROFILES = {"frontier_edges": HERE / "edges/frontier_edges/profile", "frontier_input": HERE / "frontier_input/profile"}
UNITS = {"sample": (4, "evaluation"), "train": (2, "training sample")}
CONVERSIONS = ("nchwToNhwc", "nhwcToNchw", "nhwcAddPadding")


def short(name: str, width: int = 48) -> str:
    name = name.removeprefix("void ").removeprefix("cudnn::engines_precompiled::")
    return name if len(name) <= width else name[: width - 3] + "..."


def totals(phase: str) -> list[str]:
    count, unit = UNITS[phase]
    lines = [f"### {phase}: per {unit} ({count} profiled)", "",
             "| rung | all kernels (ms) | conversions | conversions (us) | sm80 kernels | sm80 (us) |",
             "|---|---:|---:|---:|---:|---:|"]
    for rung, folder in PROFILES.items():
        kernels = pd.read_parquet(folder / phase / "torch_kernels.parquet")
        conversions = kernels[kernels.short_name.str.contains("|".join(CONVERSIONS))]
        sm80 = kernels[kernels.short_name.str.startswith("sm80")]
        lines.append(f"| {rung} | {kernels.duration_ns.sum() / 1e6 / count:.2f} | {len(conversions) / count:g} | "
                     f"{conversions.duration_ns.sum() / 1e3 / count:.0f} | {len(sm80) / count:g} | "
                     f"{sm80.duration_ns.sum() / 1e3 / count:.0f} |")
    return lines + [""]


def is_conversion(event: dict) -> bool:
    return any(c in event["name"] for c in CONVERSIONS)


def conversions_in_order(rung: str) -> list[str]:
    """Each convolution of one evaluation with cuDNN conversions beside it: the kernel before those conversions
    (which names the convolution's input), the conversions before and after it, and the convolution itself."""
    trace = json.load(gzip.open(PROFILES[rung] / "sample/torch_trace.json.gz"))
    kernels = sorted((e for e in trace["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    per_evaluation = len(kernels) // UNITS["sample"][0]
    lines = [f"### {rung}: one sampling evaluation's convolutions with conversions beside them (us)", "",
             "| launch | kernel before | conversions before | convolution | conversions after |", "|---:|---|---|---|---|"]
    for at in range(per_evaluation):
        if "xmma" not in kernels[at]["name"]:
            continue
        first = at
        while first > 0 and is_conversion(kernels[first - 1]):
            first -= 1
        last = at
        while last + 1 < len(kernels) and is_conversion(kernels[last + 1]):
            last += 1
        if first == at and last == at:
            continue
        before = " + ".join(f"{short(e['name'], 16)} {e['dur']:.0f}" for e in kernels[first:at]) or "-"
        after = " + ".join(f"{short(e['name'], 16)} {e['dur']:.0f}" for e in kernels[at + 1:last + 1]) or "-"
        conv = kernels[at]
        lines.append(f"| {at} | {short(kernels[first - 1]['name'])} | {before} | {short(conv['name'], 36)} "
                     f"{conv['dur']:.0f} | {after} |")
    return lines + [""]


def main() -> None:
    lines = ["# The first convolution padded to 8 input channels (frontier_input) against frontier_edges (H100)", ""]
    for phase in ("sample", "train"):
        lines += totals(phase)
    for rung in PROFILES:
        lines += conversions_in_order(rung)
    (HERE / "first_conv.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
