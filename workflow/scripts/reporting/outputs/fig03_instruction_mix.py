"""fig03: executed instructions by kind per variant (FP32 arithmetic, tensor math, FP16/BF16, integer, memory,
control, conversion, other), from Nsight Compute's SASS counters (profiling.instructions), in thread instructions.

The paper's "dynamic instructions 100x lower" is FP32 FMAs turning into tensor instructions: here the FP32 segment
shrinks and the tensor segment appears. What a profile's counters cannot split is drawn as such, never guessed.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from profiling.instructions import CATEGORIES, UNIT, mix_by_class

from ..panels import absent_reason, ncu_rows, rows_figure, rows_with_data, say
from ..results import variant_order

SPLIT = [name for name, _ in CATEGORIES if name != "not_split"]
COLORS = dict(zip(SPLIT, plt.get_cmap("tab10").colors)) | {"not_split": "#d9d9d9"}


def instruction_mix(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per variant: the run's mix (profiling.instructions.mix_by_class, the 'all' row), one column per category."""
    rows = []
    for variant, run in kernels.groupby("variant"):
        total = mix_by_class(run.reset_index(drop=True)).set_index("kernel_class").loc["all"]
        rows.append({"variant": variant, **{name: float(total[f"mix_{name}"]) for name, _ in CATEGORIES},
                     "total": float(total["mix_total"]), "warp_instructions": float(run["warp_instructions"].sum())})
    return pd.DataFrame(rows)


def has_mix(data: pd.DataFrame) -> bool:
    """True when the counters split at least one category off the total."""
    if data.empty:
        return False
    mix = instruction_mix(data)
    return bool(mix[SPLIT].fillna(0).to_numpy().sum() > 0)


def build(job):
    results = job.results
    kernels = results.kernels(["ncu"])
    what = "instruction-mix counters"
    rows, left_out = rows_with_data(results, lambda g, p: has_mix(ncu_rows(kernels, g, p)), what)
    fig, axes = rows_figure([f"{results.panel_label(g)} - {p} step" for g, p in rows], 1, width=8.5, height=3.8,
                            left_out=left_out)
    for (gpu, phase), (ax,) in zip(rows, axes):
        ax.set_title(f"executed instructions by kind, Nsight Compute ({UNIT})", loc="left")
        data = ncu_rows(kernels, gpu, phase)
        if not has_mix(data):
            say(ax, absent_reason(results, gpu, phase, what))
            continue
        mix = instruction_mix(data).set_index("variant")
        order = variant_order(mix.index)
        left = np.zeros(len(order))
        for name, label in CATEGORIES:
            values = mix.loc[order, name].fillna(0).to_numpy() / 1e9
            if values.any():
                ax.barh(range(len(order)), values, left=left, color=COLORS[name], label=label,
                        hatch="//" if name == "not_split" else None, edgecolor="white", linewidth=0.5)
                left += values
        for y, variant in enumerate(order):
            warp = mix.loc[variant, "warp_instructions"] / 1e9
            ax.annotate(f"{left[y]:,.0f} ({warp:,.1f} G warp inst.)", (left[y], y), va="center", ha="left",
                        fontsize=8, xytext=(3, 0), textcoords="offset points")
        ax.set_yticks(range(len(order)), order)
        ax.invert_yaxis()
        ax.set_xlim(0, left.max() * 1.35)
        ax.set_xlabel("thread instructions executed in one step (billions, predicated on)")
        ax.legend(fontsize=7, loc="lower right", ncol=2)
    return fig
