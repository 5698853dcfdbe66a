"""fig08: training time per sample (with the interquartile range), sampling time per volume and peak memory per
variant, one row per hardware label (measured here and shipped)."""

from __future__ import annotations

import pandas as pd

from ..panels import rows_figure, say, variant_bars

PANELS = [
    ("train_ms_per_sample", "training time per sample (ms)"),
    ("sample_volume_s", "sampling time per volume (s)"),
    ("train_peak_memory_gib", "peak memory in training (GiB)"),
]


def _title(column: str, run: pd.DataFrame) -> str:
    if column == "sample_volume_s" and "sample_chain_complete" in run and not run["sample_chain_complete"].all():
        return "sampling per volume (median step x T)"
    return {"train_ms_per_sample": "training", "sample_volume_s": "sampling, full chain",
            "train_peak_memory_gib": "memory"}[column]


def build(job):
    results = job.results
    runs = results.table("runs")
    labels = results.labels()
    fig, axes = rows_figure([results.panel_label(g) for g in labels], 3, width=4.6, height=3.6)
    for gpu, row in zip(labels, axes):
        run = runs[runs["gpu"] == gpu].set_index("variant") if len(runs) else runs
        order = list(run.index)
        for (column, label), ax in zip(PANELS, row):
            if run.empty or column not in run or run[column].isna().all():
                ax.set_title(label.split(" (")[0], loc="left")
                say(ax, f"no {label.split(' (')[0]} measured for {gpu}")
                continue
            ax.set_title(_title(column, run), loc="left")
            values = run.loc[order, column].astype(float)
            variant_bars(ax, order, values, fmt="{:.4g}")
            if column == "train_ms_per_sample":
                # IQR of the optimizer-step time, scaled to one sample like the bar.
                scale = values / run.loc[order, "train_step_median_ms"].astype(float)
                low = values - run.loc[order, "train_step_q1_ms"].astype(float) * scale
                high = run.loc[order, "train_step_q3_ms"].astype(float) * scale - values
                ax.errorbar(range(len(order)), values, yerr=[low.clip(lower=0), high.clip(lower=0)], fmt="none",
                            color="black", capsize=3)
            ax.set_ylabel(label)
            ax.set_ylim(0, float(values.max()) * 1.18)
    return fig
