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

from ..palette import INSTRUCTION_COLORS as COLORS
from ..panels import (NOTE_CHARS_PER_INCH, absent_reason, fit, mark_as, panel_title, rows_figure,
                      rows_with_data, say)
from ..prose import Context, num, present
from ..results import rows_at, variant_order
from ..style import PRINT_WIDTH_IN

SPLIT = [name for name, _ in CATEGORIES if name != "not_split"]
# Counter groups whose absence leaves a run's instructions (partly) not split, as the note under a panel says.
COUNTER_GROUPS = (("SASS instruction families", ("thread_inst_integer", "thread_inst_memory", "thread_inst_control")),
                  ("tensor-op counters", ("tensor_ops_tf32",)),
                  ("predicated-on total", ("thread_instructions_pred_on",)))


def instruction_mix(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per variant: the run's mix (profiling.instructions.mix_by_class, the 'all' row), one column per category."""
    rows = []
    for variant, positions in kernels.groupby("variant").indices.items():
        run = rows_at(kernels, positions)
        total = mix_by_class(run.reset_index(drop=True)).set_index("kernel_class").loc["all"]
        rows.append({"variant": variant, **{name: float(total[f"mix_{name}"]) for name, _ in CATEGORIES},
                     "total": float(total["mix_total"]), "warp_instructions": float(run["warp_instructions"].sum())})
    return pd.DataFrame(rows)


def split_mix(data: pd.DataFrame) -> pd.DataFrame | None:
    """instruction_mix of a row's kernels by variant, or None when the counters split no category off the total."""
    if data.empty:
        return None
    mix = instruction_mix(data)
    return mix.set_index("variant") if mix[SPLIT].fillna(0).to_numpy().sum() > 0 else None


def missing_counters(run: pd.DataFrame) -> list[str]:
    """The counter groups (COUNTER_GROUPS) a run's profile lacks."""
    return [name for name, columns in COUNTER_GROUPS
            if not all(c in run.columns and run[c].notna().any() for c in columns)]


def unsplit_note(data: pd.DataFrame, mix: pd.DataFrame, order: list[str]) -> str:
    """One line per variant with instructions not split: its share, the counters its profile lacks and, where it ran
    no tensor math, that its tensor segment is nonetheless known to be empty."""
    lines = []
    for variant in order:
        share = mix.loc[variant, "not_split"] / mix.loc[variant, "total"] if mix.loc[variant, "total"] else 0
        if not share > 0.005:
            continue
        run = data[data["variant"] == variant]
        hmma = float(run["tensor_hmma_instructions"].fillna(0).sum()) if "tensor_hmma_instructions" in run else None
        no_tensor = "; no tensor math in it (FP32 kernels)" if hmma is not None and not run["precision"].isin(
            ("tf32", "bf16", "f16")).any() else ""
        lines.append(f"not split: {variant}, {share:.0%} of its instructions (its profile lacks: "
                     f"{', '.join(missing_counters(run)) or 'some counters'}{no_tensor})")
    return "\n".join(lines)


def build(job):
    results = job.results
    kernels = results.kernels(["ncu"])
    what = "instruction-mix counters"
    mixes = {}  # each row's mix, computed once (a groupby over every metric column of its kernels)

    def mix_of(gpu, phase):
        if (gpu, phase) not in mixes:
            mixes[gpu, phase] = split_mix(results.ncu_rows(gpu, phase))
        return mixes[gpu, phase]

    rows, left_out = rows_with_data(results, lambda g, p: mix_of(g, p) is not None, what)
    counts = [len(set(results.ncu_rows(g, p)["variant"])) if len(kernels) else 1 for g, p in rows]
    notes = {}
    for gpu, phase in rows:
        mix = mix_of(gpu, phase)
        notes[gpu, phase] = fit(unsplit_note(results.ncu_rows(gpu, phase), mix, variant_order(mix.index)),
                                PRINT_WIDTH_IN - 0.3, NOTE_CHARS_PER_INCH) if mix is not None else ""
    fig, axes = rows_figure([panel_title(results, g, p) for g, p in rows], 1,
                            height=[1.4 + 0.3 * n + 0.15 * (notes[row].count("\n") + bool(notes[row]))
                                    for row, n in zip(rows, counts)], left_out=left_out)
    drawn = []
    for (gpu, phase), (ax,) in zip(rows, axes):
        ax.set_title("executed instructions by kind, Nsight Compute", loc="left")
        mix = mix_of(gpu, phase)
        if mix is None:
            say(ax, absent_reason(results, gpu, phase, what))
            continue
        order = variant_order(mix.index)
        left = np.zeros(len(order))
        for name, label in CATEGORIES:
            values = mix.loc[order, name].fillna(0).to_numpy() / 1e9
            if values.any():
                bars = ax.barh(range(len(order)), values, left=left, height=0.7, color=COLORS[name], label=label,
                               hatch="//" if name == "not_split" else None, edgecolor="white", linewidth=0.5)
                mark_as(bars, "kind", name)
                left += values
                drawn.append(name)
        for y, variant in enumerate(order):
            warp = mix.loc[variant, "warp_instructions"] / 1e9
            ax.annotate(f"{left[y]:,.0f} ({warp:,.1f} G warp inst.)", (left[y], y), va="center", ha="left",
                        fontsize=8, xytext=(3, 0), textcoords="offset points")
        ax.set_yticks(range(len(order)), order)
        ax.set_ylim(len(order) - 0.5, -0.5)
        ax.set_xlim(0, left.max() * 1.3)
        ax.set_xlabel(f"{UNIT} executed in one {phase} step (billions)")
        if notes[gpu, phase]:
            ax.set_xlabel(ax.get_xlabel() + "\n" + notes[gpu, phase], loc="left")
    labels = {name: label for name, label in CATEGORIES}
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=COLORS[n], hatch="//" if n == "not_split" else None,
                             edgecolor="white") for n in dict.fromkeys(drawn)]
    if handles:
        fig.legend(handles, [labels[n] for n in dict.fromkeys(drawn)], loc="outside lower center", ncol=2,
                   title=f"instruction kind, in {UNIT}")
    return fig


def describe(context: Context) -> str:
    inputs = context.inputs
    rows = inputs.class_rows("sample")
    rows = rows[(rows["kernel_class"] == "all") & rows["warp_instructions"].notna()] if len(rows) else rows
    if rows.empty:
        return "No sampling step was profiled with Nsight Compute's instruction counters."
    said = [f"{row.variant} on {row.gpu} {num(row.warp_instructions / 1e9)} G warp instructions"
            + (f", {num(row.fp32_flop / 1e12)} TFLOP in FP32 arithmetic" if present(row.fp32_flop) else "")
            for row in rows.itertuples()]
    return ("A sampling step (one U-Net evaluation) executes: " + "; ".join(said) + ". With TF32 the "
            "convolutions' FP32 multiply-adds move to the Tensor Cores, which is why the FP32 share of the "
            "instruction mix falls; what the counters could not split is drawn as such.")
