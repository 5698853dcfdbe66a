"""fig11 (beyond the paper): the optimization ladder, from baseline to the fastest variant. Per hardware label:
training time per sample and sampling time per volume of every rung against the FLOP floor (the model's FLOPs at the
device's measured bf16 matrix-product rate), and what each rung changed in the training step's kernel mix."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiling.kernels import CLASS_NAMES

from ..bench import bench_on_runs
from ..panels import (CLASS_COLORS, OWN_SCALES, bars_height, class_legend, log_ticks, panel_title, rows_figure, say,
                      significant, variant_barh)
from ..results import preferred_tool

# The rungs' order, as ladder() builds it (the caption says so; tests/test_reporting.py checks the caption).
ORDER = "the configured run order (run_variants), then the other variants from slowest to fastest"


def ladder(bench: pd.DataFrame, configured: list[str]) -> list[str]:
    """The rungs: the configured run order, then any other variant from slowest to fastest."""
    present = list(bench["variant"])
    rest = bench[~bench["variant"].isin(configured)].sort_values("train_ms_per_sample", ascending=False)
    return [v for v in configured if v in present] + list(rest["variant"])


def _times(ax, run: pd.DataFrame, order: list[str], column: str, fraction: str, unit: str, what: str) -> None:
    values = run.loc[order, column].astype(float)
    variant_barh(ax, order, values, fmt=significant, log=True, axis_in=2.6)
    floors = (run.loc[order, column].astype(float) * run.loc[order, fraction].astype(float)).dropna()
    floor_text = ""
    if len(floors):
        floor = float(floors.median())  # the same FLOPs and rate for every rung
        ax.axvline(floor, color="black", linestyle="--", linewidth=1)
        low, high = ax.get_xlim()
        ax.set_xlim(min(low, floor / 1.5), high)
        floor_text = f"; dashed: FLOP floor {floor:.3g} {unit}"
    fastest = values.idxmin() if values.notna().any() else None
    if fastest is not None:
        bar = ax.patches[order.index(fastest)]
        bar.set_edgecolor("black")
        bar.set_linewidth(1.5)
    log_ticks(ax)
    ax.set_xlabel(f"{what} ({unit}, log scale){floor_text}")


def build(job):
    results = job.results
    # Times from each run's own train.json/sample.json, the bench's rate and FLOPs (the numbers of tab04 and tab07).
    bench, summaries = bench_on_runs(results.table("bench"), results.table("runs")), results.table("summaries")
    configured = list(job.settings.get("run_variants", []))
    labels = [g for g in results.labels() if len(bench) and (bench["gpu"] == g).any()] or results.labels()
    counts = [int((bench["gpu"] == g).sum()) if len(bench) else 0 for g in labels]
    fig, axes = rows_figure([panel_title(results, g) for g in labels], 3, width=5.4, ratios=[1.25, 1, 1],
                            height=[bars_height(n) for n in counts], caveat=OWN_SCALES)
    used = set()
    for gpu, (ax_train, ax_sample, ax_mix) in zip(labels, axes):
        ax_train.set_title("training per sample", loc="left")
        ax_sample.set_title("sampling per volume", loc="left")
        ax_mix.set_title("training step: kernel time by class", loc="left")
        run = bench[bench["gpu"] == gpu] if len(bench) else bench
        if run.empty:
            for ax in (ax_train, ax_sample, ax_mix):
                say(ax, f"no bench table for {gpu} (its bench.csv: `snakemake bench`)")
            continue
        order = ladder(run, configured)
        run = run.set_index("variant")
        _times(ax_train, run, order, "train_ms_per_sample", "train_fraction_of_bf16_rate", "ms", "per sample")
        if run["sample_volume_s"].notna().any():
            _times(ax_sample, run, order, "sample_volume_s", "sample_fraction_of_bf16_rate", "s", "per volume")
            ax_sample.set_yticklabels([])
        else:
            say(ax_sample, f"no sampling run for {gpu}")
        train = summaries[(summaries["gpu"] == gpu) & (summaries["phase"] == "train")] if len(summaries) else summaries
        train = preferred_tool(train) if len(train) else train
        profiled = [v for v in order if len(train) and (train["variant"] == v).any()]
        if not profiled:
            say(ax_mix, f"no training-step profile of these variants on {gpu}")
            continue
        left = np.zeros(len(profiled))
        for kernel_class in CLASS_NAMES:
            rows = train[train["kernel_class"] == kernel_class].set_index("variant")
            shares = np.array([float(rows["time_share"].get(v, 0.0)) * 100 for v in profiled])
            if shares.any():
                used.add(kernel_class)
                ax_mix.barh(range(len(profiled)), shares, left=left, height=0.7, color=CLASS_COLORS[kernel_class])
                left += shares
        ax_mix.set_yticks(range(len(profiled)), profiled, fontsize=8)
        ax_mix.set_ylim(len(profiled) - 0.5, -0.5)
        ax_mix.set_xlabel("share of the step's kernel time (%)")
        ax_mix.set_xlim(0, 100)
    class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig
