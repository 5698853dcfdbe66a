"""fig03: executed instructions by kind per variant, from Nsight Compute's SASS counters."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ..panels import absent_reason, has, ncu_rows, rows_figure, rows_with_data, say
from ..results import variant_order

MIX = [("tensor", "tensor (HMMA + GMMA)"), ("inst_global_ld", "global load"), ("inst_global_st", "global store"),
       ("inst_shared_ld", "shared load"), ("inst_shared_st", "shared store")]
MIX_COLORS = dict(zip([m for m, _ in MIX] + ["other"], plt.get_cmap("tab10").colors[:5] + ("#bbbbbb",)))


def instruction_mix(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per variant: warp instructions by kind (tensor, global/shared load/store), the remainder as 'other'."""
    rows = []
    for variant, run in kernels.groupby("variant"):
        total = float(run["warp_instructions"].sum())
        row = {"variant": variant}
        row["tensor"] = sum(float(run[c].fillna(0).sum())
                            for c in ("tensor_hmma_instructions", "tensor_gmma_instructions") if c in run)
        for column, _ in MIX[1:]:
            row[column] = float(run[column].fillna(0).sum()) if column in run else 0.0
        row["other"] = max(total - sum(row[c] for c, _ in MIX), 0.0)
        rows.append(row)
    return pd.DataFrame(rows)


def _has_mix(data: pd.DataFrame) -> bool:
    return has(data, ["warp_instructions"]) and any(has(data, [c]) for c, _ in MIX[1:])


def build(job):
    results = job.results
    kernels = results.kernels(["ncu"])
    what = "instruction-mix counters"
    rows, left_out = rows_with_data(results, lambda g, p: _has_mix(ncu_rows(kernels, g, p)), what)
    fig, axes = rows_figure([f"{results.panel_label(g)} - {p} step" for g, p in rows], 1, width=7.5, height=3.6,
                            left_out=left_out)
    for (gpu, phase), (ax,) in zip(rows, axes):
        ax.set_title("executed warp instructions by kind, Nsight Compute", loc="left")
        data = ncu_rows(kernels, gpu, phase)
        if not _has_mix(data):
            say(ax, absent_reason(results, gpu, phase, what))
            continue
        mix = instruction_mix(data).set_index("variant")
        order = variant_order(mix.index)
        left = np.zeros(len(order))
        for column, label in MIX + [("other", "other")]:
            values = mix.loc[order, column].to_numpy() / 1e9
            ax.barh(range(len(order)), values, left=left, color=MIX_COLORS[column], label=label)
            left += values
        for y, total in enumerate(left):
            ax.annotate(f"{total:,.1f}", (total, y), va="center", ha="left", fontsize=8, xytext=(3, 0),
                        textcoords="offset points")
        ax.set_yticks(range(len(order)), order)
        ax.invert_yaxis()
        ax.set_xlim(0, left.max() * 1.15)
        ax.set_xlabel("warp instructions executed in one step (billions)")
        ax.legend(fontsize=8, loc="lower right")
    return fig
