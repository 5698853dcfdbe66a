"""The `paper` stage's expanded raw pages (each repeated operator profiled once, the repeats' rows copied) against
the shipped every-kernel raw pages of the same step (data/reference/wholehead/h200/tf32/profile/<phase>/): kernel
count, names and launch shapes in order, and each kernel class's time and warp instructions.

    PYTHONPATH=workflow/scripts python3 data/measurements/h200-2026-12-04-ncu-operators/compare_pages.py \
        STAGE_DIR [REFERENCE_DIR]
STAGE_DIR holds <phase>_ncu_raw.csv.gz as run.sh packs them.
"""

import gzip
import sys
from pathlib import Path

import pandas as pd

from profiling import kernels, ncu

SHAPE = ["kernel_name", "block_size", "grid_size"]
INSTRUCTIONS = "smsp__inst_executed.sum"


def page(path: Path) -> pd.DataFrame:
    return ncu.parse_raw(gzip.decompress(path.read_bytes()).decode(), str(path))


def compare(phase: str, once: pd.DataFrame, every: pd.DataFrame) -> None:
    print(f"## {phase}: {len(once)} kernels expanded, {len(every)} profiled every time")
    same = len(once) == len(every) and (once[SHAPE].to_numpy() == every[SHAPE].to_numpy()).all()
    if not same:
        rows = min(len(once), len(every))
        differ = (once[SHAPE].iloc[:rows].to_numpy() != every[SHAPE].iloc[:rows].to_numpy()).any(axis=1)
        first = int(differ.nonzero()[0][0]) if differ.any() else rows
        print(f"names and launch shapes differ from kernel {first} on ({differ.sum()} of the first {rows} rows)")
    else:
        print("names, blocks and grids: the same, in the same order")
    classes = [frame["kernel_name"].map(kernels.classify) for frame in (once, every)]
    # Time moves from run to run; the warp instructions a kernel executes do not (the same work on the same data).
    for metric, unit, scale in ((ncu.DURATION, "us", 1e3), (INSTRUCTIONS, "G instructions", 1e9)):
        table = pd.DataFrame({
            f"once ({unit})": once.groupby(classes[0])[metric].sum() / scale,
            f"every ({unit})": every.groupby(classes[1])[metric].sum() / scale,
        }).fillna(0.0).rename_axis("class")
        table.loc["all"] = table.sum()
        table["once/every"] = table.iloc[:, 0] / table.iloc[:, 1]
        print(table.round(4).to_markdown())
        print()


def main() -> None:
    stage = Path(sys.argv[1])
    reference = Path(sys.argv[2] if len(sys.argv) > 2 else "data/reference/wholehead/h200/tf32/profile")
    for phase in ("sample", "train"):
        compare(phase, page(stage / f"{phase}_ncu_raw.csv.gz"), page(reference / phase / "ncu_raw.csv.gz"))


if __name__ == "__main__":
    main()
