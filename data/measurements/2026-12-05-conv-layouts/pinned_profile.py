"""What pinning the first and the stride-2 convolutions' inputs to NDHWC changed in frontier_edges's kernels on an
H100: its profiles before (../h100-2026-12-05-frontier-input/edges/, the code of 62f9ab2) and after (h100-pinned/),
both made by the workflow's profile jobs on the same kind of card. Writes pinned_profile.md beside this script.

Per sampling evaluation (4 profiled) and per training sample (one step of two profiled): all kernels, cuDNN's layout
conversions (nchwToNhwc, nhwcToNchw, nhwcAddPadding), the pre-Hopper sm80 kernels, and the kernels inductor names
after the pinning's prim (inductor_force_stride_order). Those are not copies added: they are the producers of the
pinned inputs (the residual sums fused with the convolution's bias, and the U-Net input's bfloat16 cast), which write
NDHWC now and carry the prim in their names."""

from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
PROFILES = {"before (62f9ab2)": HERE.parent / "h100-2026-12-05-frontier-input/edges/frontier_edges/profile",
            "pinned": HERE / "h100-pinned/frontier_edges/profile"}
UNITS = {"sample": (4, "evaluation"), "train": (2, "training sample")}
KINDS = {"cuDNN conversions": "nchwToNhwc|nhwcToNchw|nhwcAddPadding", "sm80 kernels": "^sm80",
         "pinned producers": "force_stride"}


def table(phase: str) -> list[str]:
    count, unit = UNITS[phase]
    lines = [f"## {phase}: per {unit} ({count} profiled)", "",
             "| profile | all kernels (ms) | " + " | ".join(f"{k} (n) | {k} (us)" for k in KINDS) + " |",
             "|---|---:|" + "---:|---:|" * len(KINDS)]
    for label, folder in PROFILES.items():
        kernels = pd.read_parquet(folder / phase / "torch_kernels.parquet")
        cells = [f"{kernels.duration_ns.sum() / 1e6 / count:.2f}"]
        for pattern in KINDS.values():
            chosen = kernels[kernels.short_name.str.contains(pattern)]
            cells += [f"{len(chosen) / count:g}", f"{chosen.duration_ns.sum() / 1e3 / count:.0f}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines + [""]


def main() -> None:
    lines = ["# frontier_edges's kernels before and after the input pinning (H100)", ""]
    for phase in UNITS:
        lines += table(phase)
    out = HERE / "pinned_profile.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
