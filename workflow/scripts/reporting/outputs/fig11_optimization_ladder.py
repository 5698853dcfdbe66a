"""fig11 (beyond the paper): the optimization ladder, from baseline to the fastest variant. Per hardware label:
training time per sample and sampling time per volume of every rung against the FLOP floor (the model's FLOPs at the
device's measured bf16 matrix-product rate), and what each rung changed in the training step's kernel mix."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, NullFormatter

from profiling.kernels import CLASS_NAMES

from ..bench import bench_on_runs
from ..panels import CLASS_COLORS, class_legend, rows_figure, say, variant_color, xticks
from ..results import preferred_tool


def ladder(bench: pd.DataFrame, configured: list[str]) -> list[str]:
    """The rungs: the configured run order, then any other variant from slowest to fastest."""
    present = list(bench["variant"])
    rest = bench[~bench["variant"].isin(configured)].sort_values("train_ms_per_sample", ascending=False)
    return [v for v in configured if v in present] + list(rest["variant"])


def _times(ax, run: pd.DataFrame, order: list[str], column: str, fraction: str, unit: str, scale: float) -> None:
    values = run.loc[order, column].astype(float) * scale
    ax.bar(range(len(order)), values, color=[variant_color(v, k) for k, v in enumerate(order)])
    for x, value in enumerate(values):
        if not pd.isna(value):
            ax.annotate(f"{value:.3g}", (x, value), ha="center", va="bottom", fontsize=7)
    floors = (run.loc[order, column].astype(float) * run.loc[order, fraction].astype(float) * scale).dropna()
    if len(floors):
        floor = float(floors.median())  # the same FLOPs and rate for every rung
        ax.axhline(floor, color="black", linestyle="--", linewidth=1)
        ax.annotate(f"FLOP floor {floor:.3g} {unit} (measured bf16 rate)", (0.02, floor),
                    xycoords=("axes fraction", "data"), ha="left", va="bottom", fontsize=7)
    fastest = values.idxmin() if values.notna().any() else None
    if fastest is not None:
        ax.patches[order.index(fastest)].set_edgecolor("black")
        ax.patches[order.index(fastest)].set_linewidth(1.5)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel(f"{unit} (log scale)")
    xticks(ax, order)


def build(job):
    results = job.results
    # Times from each run's own train.json/sample.json, the bench's rate and FLOPs (the numbers of tab04 and tab07).
    bench, summaries = bench_on_runs(results.table("bench"), results.table("runs")), results.table("summaries")
    configured = list(job.settings.get("run_variants", []))
    labels = [g for g in results.labels() if len(bench) and (bench["gpu"] == g).any()] or results.labels()
    fig, axes = rows_figure([results.panel_label(g) for g in labels], 3, width=5.4, height=4.2, ratios=[1, 1, 1.2])
    used = set()
    for gpu, (ax_train, ax_sample, ax_mix) in zip(labels, axes):
        ax_train.set_title("training per sample (ms, log)", loc="left")
        ax_sample.set_title("sampling per volume (s, log)", loc="left")
        ax_mix.set_title("training step: kernel time by class", loc="left")
        run = bench[bench["gpu"] == gpu] if len(bench) else bench
        if run.empty:
            for ax in (ax_train, ax_sample, ax_mix):
                say(ax, f"no bench table for {gpu} (its bench.csv: `snakemake bench`)")
            continue
        order = ladder(run, configured)
        run = run.set_index("variant")
        _times(ax_train, run, order, "train_ms_per_sample", "train_fraction_of_bf16_rate", "ms", 1.0)
        if run["sample_volume_s"].notna().any():
            _times(ax_sample, run, order, "sample_volume_s", "sample_fraction_of_bf16_rate", "s", 1.0)
        else:
            say(ax_sample, f"no sampling run for {gpu}")
        train = summaries[(summaries["gpu"] == gpu) & (summaries["phase"] == "train")] if len(summaries) else summaries
        train = preferred_tool(train) if len(train) else train
        profiled = [v for v in order if len(train) and (train["variant"] == v).any()]
        if not profiled:
            say(ax_mix, f"no training-step profile of these variants on {gpu}")
            continue
        bottom = np.zeros(len(profiled))
        for kernel_class in CLASS_NAMES:
            rows = train[train["kernel_class"] == kernel_class].set_index("variant")
            shares = np.array([float(rows["time_share"].get(v, 0.0)) * 100 for v in profiled])
            if shares.any():
                used.add(kernel_class)
                ax_mix.bar(range(len(profiled)), shares, bottom=bottom, color=CLASS_COLORS[kernel_class])
                bottom += shares
        xticks(ax_mix, profiled)
        ax_mix.set_ylabel("share of the step's kernel time (%)")
        ax_mix.set_ylim(0, 100)
    class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig
