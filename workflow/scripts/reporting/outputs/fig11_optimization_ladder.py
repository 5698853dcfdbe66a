"""fig11 (beyond the paper): the optimization ladder, from baseline to the fastest variant. Per hardware label:
training time per sample and sampling time per volume of every rung against the FLOP floor (the model's FLOPs at the
device's measured bf16 matrix-product rate) and, where it binds, the rung's memory floor (its profiled step's DRAM
bytes at the measured copy bandwidth, reporting.bench), the volumes per hour each rung samples (at its best batch size,
and at batch 1) against the FLOP ceiling, and what each rung changed in the training step's kernel mix."""

from __future__ import annotations

import numpy as np
import pandas as pd

from profiling.kernels import CLASS_NAMES
from measurement.throughput import single_size_sweep

from ..bench import rate_text
from ..panels import (BAR_LABEL_SIZE, LABEL_BOX, OWN_SCALES, bars_height, class_legend, label_room, log_ticks,
                      panel_title, rows_figure, say, significant, stacked_shares, variant_barh)
from ..prose import Context, num, pct, present, speedup_words
from ..results import preferred_tool

# The rungs' order, as ladder() builds it (the caption says so; tests/test_reporting.py checks the caption).
ORDER = "the configured run order (run_variants), then the other variants from slowest to fastest"


def ladder(bench: pd.DataFrame, configured: list[str]) -> list[str]:
    """The rungs: the configured run order, then any other variant from slowest to fastest."""
    present = list(bench["variant"])
    rest = bench[~bench["variant"].isin(configured)].sort_values("train_ms_per_sample", ascending=False)
    return [v for v in configured if v in present] + list(rest["variant"])


def _times(ax, run: pd.DataFrame, order: list[str], column: str, fraction: str, unit: str,
           memory_floors: pd.Series) -> None:
    """Every rung's time on a log scale, the fastest's in bold, and the FLOP floor dashed where it is one: below every
    rung's time (a CPU's bf16 rate, without bf16 matrix units, is slower than its fp32 work: no floor then). A rung
    whose memory floor (`memory_floors`, in the bars' unit) lies above the FLOP floor, which it then replaces as the
    rung's limit, has it marked on its bar (a white diamond)."""
    values = run.loc[order, column].astype(float)
    written = variant_barh(ax, order, values, fmt=significant, log=True, axis_in=1.4, neutral=True)
    floors = (run.loc[order, column].astype(float) * run.loc[order, fraction].astype(float)).dropna()
    floor_text, floor = "", np.nan
    if len(floors):
        floor = float(floors.median())  # the same FLOPs and rate for every rung
        if floor <= float(values.min()):
            ax.axvline(floor, color="black", linestyle="--", linewidth=1)
            low, high = ax.get_xlim()
            ax.set_xlim(min(low, floor / 1.5), high)
            floor_text = f"; floor {floor:.3g}"
        else:
            floor_text, floor = "; no FLOP floor", np.nan
    memory = memory_floors.reindex(order).astype(float).to_numpy()
    binding = np.isfinite(memory) & ~(memory <= floor)  # above the FLOP floor, or no FLOP floor to bound the rung
    if binding.any():
        ax.scatter(memory[binding], np.arange(len(order))[binding], marker="D", s=22, facecolor="white",
                   edgecolor="black", linewidths=0.8, zorder=3)
        low, high = ax.get_xlim()
        ax.set_xlim(min(low, float(memory[binding].min()) / 1.5), high)
        floor_text += "\n\u25c7 memory floor"  # a line of its own: the panels are narrow
    if values.notna().any():
        written[values.idxmin()].set_fontweight("bold")
    log_ticks(ax)
    ax.set_xlabel(f"{unit} (log){floor_text}")


def _column(run: pd.DataFrame, name: str) -> pd.Series:
    """A bench column as floats, NaN throughout where the bench has none (one collected before the memory floor)."""
    return run[name].astype(float) if name in run else pd.Series(np.nan, index=run.index)


def _throughput(ax, run: pd.DataFrame, order: list[str], gpu: str) -> None:
    """Volumes per hour of every rung: a bar at its best batch size (the size after the rate), a black line across it
    at batch 1, the FLOP ceiling dashed (the model's FLOPs of a full chain at the measured bf16 rate, whatever the
    batch) where it is one. Rungs without a throughput sweep say "not measured"; nothing is derived from their time
    per volume."""
    column = lambda name: run.loc[order, name].astype(float) if name in run else pd.Series(np.nan, order)  # noqa: E731
    best, one, batch = (column(name) for name in ("sample_volumes_per_hour_best", "sample_volumes_per_hour_b1",
                                                  "sample_best_batch"))
    if best.isna().all() and one.isna().all():
        say(ax, f"volumes per hour not measured on {gpu}: its sampling runs predate the throughput sweep "
                "(sample.batch_sizes)")
        return
    alone = pd.Series([single_size_sweep(b1, top) for b1, top in zip(one, best)], index=best.index)
    bar = best.mask(alone, one)  # a sweep of batch 1 alone: its bar is that rate, labelled as such
    variant_barh(ax, order, bar, log=True, neutral=True)
    y = np.arange(len(order))
    measured = np.isfinite(one.to_numpy())
    ax.vlines(one.to_numpy()[measured], y[measured] - 0.35, y[measured] + 0.35, color="black", linewidth=2, zorder=3)
    texts, ends = [], []
    for yi, rate, size, single, only in zip(y, bar, batch, one, alone):
        if np.isfinite(rate):
            texts.append(f"{rate_text(rate)} (b{1 if only else int(size)})")
            ends.append(max(rate, single if np.isfinite(single) else rate))
            ax.annotate(texts[-1], (ends[-1], yi), xytext=(4, 0), textcoords="offset points", va="center", ha="left",
                        fontsize=BAR_LABEL_SIZE, bbox=LABEL_BOX, zorder=4)  # over the ceiling's line
        else:
            ax.annotate("not measured", (0.02, yi), xycoords=("axes fraction", "data"), va="center", ha="left",
                        fontsize=BAR_LABEL_SIZE, color="0.35")
    floors = (run.loc[order, "sample_volume_s"].astype(float)
              * run.loc[order, "sample_fraction_of_bf16_rate"].astype(float)).dropna()
    ceiling_text = ""
    if len(floors):
        ceiling = 3600 / float(floors.median())  # volumes per hour with every evaluation at the FLOP floor
        if ceiling >= float(np.nanmax(np.concatenate([bar.to_numpy(), one.to_numpy()]))):
            ax.axvline(ceiling, color="black", linestyle="--", linewidth=1, zorder=2)
            ends.append(ceiling)
            ceiling_text = f"; ceiling {rate_text(ceiling)}"
        else:
            ceiling_text = "; no FLOP ceiling"
    low = float(np.nanmin(np.concatenate([bar.to_numpy(), one.to_numpy()])))
    ax.set_xlim(low / 1.5, max(ends) * 1.05)
    label_room(ax, ends, texts, log=True, axis_in=1.4)
    log_ticks(ax)
    ax.set_xlabel(f"volumes/h (log){ceiling_text}")


def _mix(ax, summaries: pd.DataFrame, order: list[str], gpu: str) -> set:
    """The training step's kernel time by class of every profiled rung, on the rungs' rows ("not profiled" on the
    others). Returns the classes drawn."""
    train = summaries[(summaries["gpu"] == gpu) & (summaries["phase"] == "train")] if len(summaries) else summaries
    train = preferred_tool(train) if len(train) else train
    train = train[(train["kernel_class"] != "all") & train["variant"].isin(order)] if len(train) else train
    if train.empty:
        say(ax, f"no training-step profile of these rungs on {gpu}")
        return set()
    shares = train.pivot_table(index="variant", columns="kernel_class", values="time_share", aggfunc="sum") * 100
    used = set(stacked_shares(ax, order, shares))
    for y, variant in enumerate(order):
        if variant not in shares.index:
            ax.annotate("not profiled", (2, y), va="center", ha="left", fontsize=BAR_LABEL_SIZE, color="0.35")
    ax.set_xlabel("% of kernel time")
    return used


def build(job):
    results = job.results
    # Times from each run's own train.json/sample.json, the bench's rate and FLOPs (the numbers of tab04 and tab07).
    bench, summaries = results.table("bench"), results.table("summaries")
    configured = list(job.settings.get("run_variants", []))
    labels = [g for g in results.labels() if len(bench) and (bench["gpu"] == g).any()] or results.labels()
    counts = [int((bench["gpu"] == g).sum()) if len(bench) else 0 for g in labels]
    # One y axis of rung names per row; the rungs' bars in one neutral colour (their names say which is which), so
    # that the only colours of the figure are the kernel classes'.
    fig, axes = rows_figure([panel_title(results, g) for g in labels], 4, ratios=[1, 1, 1.15, 1],
                            height=[bars_height(n, base=1.5) for n in counts], caveat=OWN_SCALES, sharey=True)
    used = set()
    for gpu, (ax_train, ax_sample, ax_rate, ax_mix) in zip(labels, axes):
        ax_train.set_title("training per sample", loc="left")
        ax_sample.set_title("sampling per volume", loc="left")
        ax_rate.set_title("volumes per hour", loc="left")
        ax_mix.set_title("training kernel mix", loc="left")
        run = bench[bench["gpu"] == gpu] if len(bench) else bench
        if run.empty:
            for ax in (ax_train, ax_sample, ax_rate, ax_mix):
                say(ax, f"no bench for {gpu}: no measured ceilings (device_rates.json; `snakemake bench` measures "
                        "them)")
            continue
        order = ladder(run, configured)
        run = run.set_index("variant")
        _times(ax_train, run, order, "train_ms_per_sample", "train_fraction_of_bf16_rate", "ms",
               _column(run, "train_memory_floor_ms_per_sample"))
        if run["sample_volume_s"].notna().any():
            # A volume is T evaluations; the profiled sampling step is one evaluation.
            _times(ax_sample, run, order, "sample_volume_s", "sample_fraction_of_bf16_rate", "s",
                   _column(run, "sample_memory_floor_ms") * _column(run, "timesteps") / 1e3)
            _throughput(ax_rate, run, order, gpu)
        else:
            say(ax_sample, f"no sampling run for {gpu}")
            say(ax_rate, f"no sampling run for {gpu}")
        used |= _mix(ax_mix, summaries, order, gpu)
    class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig


def describe(context: Context) -> str:
    inputs = context.inputs
    frontier = inputs.table("tab07_frontier")
    if frontier.empty:
        return ("No label has bench results: `snakemake --cores 1 bench` measures the variants against the "
                "device's own ceilings.")
    table = context.verdicts()
    said = []
    for gpu, rows in frontier.groupby("gpu", sort=False):
        best = rows.loc[rows["train_ms_per_sample"].idxmin()]
        base = rows[rows["variant"] == "baseline"]
        mine = table[(table["gpu"] == gpu) & (table["variant"] == best["variant"])]
        text = f"On {gpu}, the fastest rung is {best['variant']} at {num(best['train_ms_per_sample'], 4)} ms per " \
               "training sample"
        if len(base) and best["variant"] != "baseline":
            text += (f" against the baseline's {num(base['train_ms_per_sample'].iloc[0], 4)} ms"
                     + (f" ({speedup_words(mine.iloc[0])})" if len(mine) else ""))
        if present(best.get("train_fraction_of_bf16_rate")):
            share = float(best["train_fraction_of_bf16_rate"])
            text += (f", {num(best['train_model_tflops'])} TFLOP/s of model arithmetic, "
                     + (f"{pct(share, 0)} of the device's measured bf16 matrix rate" if share <= 1 else
                        "faster than the device's measured bf16 matrix rate, which is no ceiling there (no bf16 "
                        "matrix units)"))
        said.append(text + ".")
        said += _memory_floor_words(gpu, rows)
    return ("Beyond the paper, the ladder climbs from the fp32 baseline to the fastest variant, one switch at a "
            "time, against the FLOP floor. " + " ".join(said))


def _memory_floor_words(gpu: str, rows: pd.DataFrame) -> list[str]:
    """A sentence on the label's sampling steps whose memory floor lies above the FLOP floor (none where no step was
    profiled with its DRAM bytes)."""
    if "sample_memory_floor_ms" not in rows:
        return []
    bound = rows[rows["sample_memory_floor_ms"].astype(float) > rows["sample_flop_floor_ms"].astype(float)]
    if bound.empty:
        return []
    floors = ", ".join(f"{row.variant} {num(row.sample_memory_floor_ms)} ms (its step {num(row.sample_step_ms)} ms)"
                       for row in bound.itertuples())
    return [f"On {gpu} the memory floor of the sampling steps profiled with their DRAM bytes lies above the FLOP floor "
            f"of {num(float(bound['sample_flop_floor_ms'].iloc[0]))} ms per U-Net evaluation, so the bytes moved, "
            f"not the arithmetic, bound those steps: {floors}."]
