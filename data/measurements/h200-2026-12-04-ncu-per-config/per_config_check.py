"""Would Nsight Compute's `--filter-mode per-launch-config --launch-count 1` (each kernel name, block and grid size
profiled once) give the step's totals once each profiled launch is weighted by how often its configuration ran?
Checked on the shipped full exports (every launch profiled): per kernel class, the weighted first launches against
the sum over all launches. Run from the repository root:
    PYTHONPATH=workflow/scripts python3 data/measurements/h200-2026-12-04-ncu-per-config/per_config_check.py
"""

import gzip
import io
from pathlib import Path

import pandas as pd

from profiling import ncu, tables

SHIPPED = Path("data/reference/wholehead/h200")
COLUMNS = ["duration_ns", "sm_cycles", "warp_instructions"]

for variant, phase in [("baseline", "sample"), ("baseline", "train"), ("tf32", "sample"), ("tf32", "train")]:
    text = gzip.open(SHIPPED / variant / "profile" / phase / "ncu_raw.csv.gz", "rt").read()
    full = tables.from_ncu(ncu.parse_raw(text, source=f"{variant}/{phase}")).reset_index(drop=True)
    launch = pd.read_csv(io.StringIO(text), usecols=["Kernel Name", "Block Size", "Grid Size"], skiprows=[1])
    full["config"] = (launch["Kernel Name"] + "|" + launch["Block Size"].astype(str) + "|"
                      + launch["Grid Size"].astype(str)).to_numpy()
    first = full.groupby("config", sort=False).head(1)
    weight = first["config"].map(full.groupby("config").size())
    weighted = first[COLUMNS].mul(weight, axis=0).assign(kernel_class=first["kernel_class"])
    by_class = weighted.groupby("kernel_class")[COLUMNS].sum() / full.groupby("kernel_class")[COLUMNS].sum() - 1
    total = weighted[COLUMNS].sum() / full[COLUMNS].sum() - 1
    print(f"{variant}/{phase}: {len(full)} launches, {len(first)} configurations; weighted over full, per class (%):")
    print((100 * by_class).round(1).to_string())
    print("whole step (%):", (100 * total).round(1).to_dict(), "\n")
