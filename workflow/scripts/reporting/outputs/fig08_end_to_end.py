"""fig08: training time per sample (with the interquartile range), sampling time per volume and peak memory per
variant, one row per hardware label (measured here and shipped)."""

from __future__ import annotations

import pandas as pd

from ..panels import OWN_SCALES, bars_height, panel_title, rows_figure, say, variant_barh
from ..results import variant_order

PANELS = [
    ("train_ms_per_sample", "training time per sample (ms)"),
    ("sample_volume_s", "sampling time per volume (s)"),
    ("train_peak_memory_gib", "peak memory in training (GiB)"),
]
FORMATS = {"train_ms_per_sample": "{:,.0f}", "sample_volume_s": "{:.3g}", "train_peak_memory_gib": "{:.2f}"}


def _title(column: str, run: pd.DataFrame) -> str:
    if column == "sample_volume_s" and "sample_chain_complete" in run and not run["sample_chain_complete"].all():
        return "sampling per volume (median step x T)"
    return {"train_ms_per_sample": "training", "sample_volume_s": "sampling, full chain",
            "train_peak_memory_gib": "memory"}[column]


def build(job):
    results = job.results
    runs = results.table("runs")
    labels = results.labels()
    counts = [int((runs["gpu"] == g).sum()) if len(runs) else 0 for g in labels]
    fig, axes = rows_figure([panel_title(results, g) for g in labels], 3, width=5.2,
                            height=[bars_height(n) for n in counts], ratios=[1.25, 1, 1], caveat=OWN_SCALES)
    for gpu, row in zip(labels, axes):
        run = runs[runs["gpu"] == gpu].set_index("variant") if len(runs) else runs
        order = variant_order(run.index) if len(run) else []
        for k, ((column, label), ax) in enumerate(zip(PANELS, row)):
            if run.empty or column not in run or run[column].isna().all():
                ax.set_title(label.split(" (")[0], loc="left")
                say(ax, f"no {label.split(' (')[0]} measured for {gpu}")
                continue
            ax.set_title(_title(column, run), loc="left")
            values = run.loc[order, column].astype(float)
            errors = None
            if column == "train_ms_per_sample":
                # IQR of the optimizer-step time, scaled to one sample like the bar.
                scale = values / run.loc[order, "train_step_median_ms"].astype(float)
                low = values - run.loc[order, "train_step_q1_ms"].astype(float) * scale
                high = run.loc[order, "train_step_q3_ms"].astype(float) * scale - values
                errors = (low.clip(lower=0), high.clip(lower=0))
            variant_barh(ax, order, values, fmt=FORMATS[column], errors=errors, axis_in=2.6)
            if k:  # the variants' names once, on the row's first panel
                ax.set_yticklabels([])
            ax.set_xlabel(label)
    return fig
