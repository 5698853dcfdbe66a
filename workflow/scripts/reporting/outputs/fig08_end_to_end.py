"""fig08: training time per sample (with the interquartile range), sampling time per volume and peak memory per
variant, one row per hardware label (measured here and shipped)."""

from __future__ import annotations

import pandas as pd

from ..panels import OWN_SCALES, bars_height, panel_title, rows_figure, say, variant_barh
from ..prose import Context, join_words, num, speedup_words
from ..results import variant_order

PANELS = [
    ("train_ms_per_sample", "training per sample", "ms (median, quartiles)"),
    ("sample_volume_s", "sampling per volume", "s"),
    ("train_peak_memory_gib", "peak memory in training", "GiB"),
]
FORMATS = {"train_ms_per_sample": "{:,.0f}", "sample_volume_s": "{:.3g}", "train_peak_memory_gib": "{:.2f}"}


def _unit(column: str, unit: str, run: pd.DataFrame) -> str:
    """The axis label: the unit, and for sampling how the volume's time was had (every row's panel has one title)."""
    if column != "sample_volume_s":
        return unit
    complete = "sample_chain_complete" not in run or bool(run["sample_chain_complete"].all())
    how = "full chains" if complete else "median step \N{MULTIPLICATION SIGN} T"
    return f"{unit} ({how})"


def build(job):
    results = job.results
    runs = results.table("runs")
    labels = results.labels()
    counts = [int((runs["gpu"] == g).sum()) if len(runs) else 0 for g in labels]
    fig, axes = rows_figure([panel_title(results, g) for g in labels], 3, height=[bars_height(n) for n in counts],
                            ratios=[1, 1, 1], caveat=OWN_SCALES, sharey=True)
    for gpu, row in zip(labels, axes):
        run = runs[runs["gpu"] == gpu].set_index("variant") if len(runs) else runs
        order = variant_order(run.index) if len(run) else []
        for (column, title, unit), ax in zip(PANELS, row):
            ax.set_title(title, loc="left")
            if run.empty or column not in run or run[column].isna().all():
                say(ax, f"no {title} measured for {gpu}")
                continue
            values = run.loc[order, column].astype(float)
            errors = None
            if column == "train_ms_per_sample":
                # IQR of the optimizer-step time, scaled to one sample like the bar.
                scale = values / run.loc[order, "train_step_median_ms"].astype(float)
                low = values - run.loc[order, "train_step_q1_ms"].astype(float) * scale
                high = run.loc[order, "train_step_q3_ms"].astype(float) * scale - values
                errors = (low.clip(lower=0), high.clip(lower=0))
            variant_barh(ax, order, values, fmt=FORMATS[column], errors=errors, axis_in=1.9)
            ax.set_xlabel(_unit(column, unit, run))
    return fig


def describe(context: Context) -> str:
    inputs = context.inputs
    table, runs = context.verdicts(), inputs.result("runs")
    if runs.empty:
        return "No run was timed."
    said = []
    for gpu, rows in runs.groupby("gpu", sort=False):
        base = rows[rows["variant"] == "baseline"]
        if base.empty:
            continue
        base = base.iloc[0]
        mine = table[table["gpu"] == gpu]
        faster = mine[mine["verdict"] == "faster"]
        best = faster.loc[faster["speedup"].astype(float).idxmax()] if len(faster) else None
        text = (f"On {inputs.named(gpu)}, {inputs.workload(gpu)}, the baseline takes "
                f"{num(base['train_ms_per_sample'], 4)} ms per training sample, "
                f"{num(base['sample_step_median_ms'], 4)} ms per sampling step and "
                f"{num(base['train_peak_memory_gib'])} GiB at its peak")
        if best is not None:
            run = rows[rows["variant"] == best["variant"]].iloc[0]
            text += (f"; the fastest variant measured, {best['variant']}, trains {speedup_words(best)} "
                     f"({num(run['train_ms_per_sample'], 4)} ms) with a peak of "
                     f"{num(run['train_peak_memory_gib'])} GiB")
        else:
            text += "; no variant trains measurably faster"
        noise = mine[mine["verdict"].isin(["within noise", "no spread measured"])]
        if len(noise):
            text += f", and {join_words(list(noise['variant']))} cannot be told apart from the baseline"
        unsure = mine[mine["verdict"].isin(["not measurable under this load", "at the band's edge",
                                            "not measurable here"])]
        if len(unsure):
            text += "; " + join_words([f"{r['variant']} is {speedup_words(r)}" for _, r in unsure.iterrows()])
        slower = mine[mine["verdict"] == "slower"]
        if len(slower):
            text += "; " + join_words([f"{r['variant']} is {speedup_words(r)}" for _, r in slower.iterrows()])
        said.append(text + ".")
    return (" ".join(said) + " Rows of different workloads are not comparable with each other; each is read "
            "against its own baseline.")
