"""fig09: the quality study per hardware label, as the quality claim judges it (data/paper_claims.yaml, tab05). Under
the label's title and the claim's verdict, a row of three panels on the same rows, one per variant (the baseline on
top): (a) every seed's value of the verdict's metric, each variant's mean, the baseline's mean +- SD band and the
rerun of one baseline seed; (b) each variant's mean paired difference from the baseline with its 90 % interval,
against the +-margin band, its outcome written beside it (on the baseline's row, the rerun's difference from the
first training: the run-to-run noise); (c) the training loss of every variant minus the baseline's at the same seed,
smoothed, as the mean over the seeds and their range, over the baseline's own seed-to-seed band. Then (d): the middle
axial slice of the real image of the first held-out mask and of every variant's first sample at one seed (the same
noise for all). One legend for every label, under the last.

The statistical panels are seaborn's (swarm and point plots of the seeds, line plots with their range as a band);
the intervals of (b) are the claim's own (reporting.equivalence), drawn as they are. Laid out by hand in inches: the
constrained-layout solver places axes differently in the last bits from one process to the next, and this figure
must be byte-identical between runs; the room beside the panels follows the longest row label and outcome."""

from __future__ import annotations

import functools
import math
import re

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from medddpm.curves import smoothing_window

from ..claims import QualityJudgement, load_claims, quality_judgement, quality_verdict, reference_seed
from ..panels import NOTE_CHARS_PER_INCH, fit, mark, shape_text, variant_color
from ..prose import Context, join_words, num
from ..results import variant_order
from ..style import PRINT_WIDTH_IN, note

# Heights (inches) of one label's block: its title, each line of the verdict, the panels' titles, their axes, the
# room under them (tick labels, two-line axis labels), the slices' strip (its line, the slices' titles, the slices).
TITLE_H, LINE_H, PANEL_TITLE_H, AXES_H, UNDER_H = 0.19, 0.155, 0.28, 1.5, 0.55
SLICE_H = 0.66
LEGEND_H, FOOT_H = 0.85, 0.3
# Widths (inches): between panels, (b)'s outcomes beside it, (c)'s tick labels and axis label, the right margin; the
# shares of the axes (a, b, c) in what is left.
GAP_W, LOSS_LABEL_W, RIGHT_W = 0.25, 0.78, 0.1
SHARES = (0.33, 0.33, 0.34)
METRIC_LABELS = {"wasserstein_vs_real": "Wasserstein distance\nto the real images"}
NOT_JUDGED = "not judged"  # what (b) writes beside a variant that was not judged (the verdict line says why)
BAND = "0.55"  # the grey of the baseline's bands and the margin


def study_workload(rows) -> str:
    """The quality study's own workload (smaller than the timed runs'): volume, parameters, T and training length."""
    first = rows.iloc[0]
    dates = sorted(set(rows["date"].dropna())) if "date" in rows else []
    # The study's own days: the label's date in the header is its timing runs'.
    of = f" of {' to '.join(dict.fromkeys([dates[0], dates[-1]]))}" if dates else ""
    return (f"quality study{of}: {shape_text(first['volume_shape'])}, {float(first['parameters']) / 1e6:.1f} M "
            f"parameters, T = {int(first['timesteps'])}, {int(first['optimizer_steps']):,} steps")


def outcome_text(judgement: QualityJudgement, variant: str) -> str:
    """What (b) writes beside a row: the outcome, "not judged" (the verdict line says why); on the baseline's row
    whether the rerun's weights came out bit-identical, else "reference"."""
    if variant == "baseline":
        if judgement.rerun is None:
            return "reference"
        return "bit-identical" if judgement.rerun.weights_identical else "weights differ"
    shown = judgement.shown(variant)
    return NOT_JUDGED if shown.startswith("not measurable") else shown


def margin_text(judgement: QualityJudgement) -> str:
    """'margin +-0.038 (1 x the baseline's seed SD)'."""
    factor = judgement.margin / judgement.spread
    return (f"margin \N{PLUS-MINUS SIGN}{judgement.margin:.2g} ({factor:.3g} \N{MULTIPLICATION SIGN} the baseline's "
            "seed SD)")


@functools.lru_cache(maxsize=None)
def text_width(text: str, size: float) -> float:
    """Inches that `text` takes at `size` points in the figures' font, as Agg draws it (a little to spare)."""
    width, _, _ = RendererAgg(10, 10, 72).get_text_width_height_descent(text, FontProperties(size=size), False)
    return 1.05 * width / 72


class Block:
    """One hardware label: its runs, the claim's judgement, the verdict's lines, and where its panels go."""

    def __init__(self, gpu: str, rows: pd.DataFrame, losses: pd.DataFrame, claim: dict, optimized: list[str],
                 width: float):
        self.gpu, self.rows, self.losses, self.width = gpu, rows, losses, width
        self.judgement = quality_judgement(claim, gpu, rows, optimized)
        measured, verdict = quality_verdict(claim, gpu, rows, optimized)
        # The intervals and outcomes are (b)'s; the verdict line adds the margin, and the reason where the claim could
        # not judge.
        said = f"Quality claim: {verdict} \N{EM DASH} {measured}" if self.judgement.reason else \
            f"Quality claim: {verdict}" + (f"; {margin_text(self.judgement)}" if self.judgement.margin else "")
        self.lines = fit(said, width - 0.2, NOTE_CHARS_PER_INCH * 8 / 8.5).split("\n")
        self.slice_line = fit(f"(d) seed {reference_seed(rows)}, first held-out mask, middle axial slice: the real "
                              "image and each variant's first sample from the same noise "
                              f"({shape_text(rows['volume_shape'].iloc[0])}; grey scale [-1, 1])", width - 0.2,
                              NOTE_CHARS_PER_INCH * 8 / 8.5)
        self.variants = variant_order(rows["variant"])
        self.label_w = max(text_width(v, 8) for v in self.variants) + 0.12
        self.outcome_w = max(text_width(outcome_text(self.judgement, v), 8) for v in self.variants) + 0.15

    def title_lines(self, label: str) -> list[str]:
        return fit(f"{label} \N{EM DASH} {study_workload(self.rows)}", self.width - 0.1).split("\n")

    def slice_titles(self) -> list[str]:
        """The slices' titles (the real image, then each variant), each on the lines its slice's width allows."""
        names = ["real image", *self.variants]
        pitch = min(SLICE_H + 0.35, (self.width - 0.2) / len(names))
        return [_fit_title(name, pitch - 0.05) for name in names]

    @property
    def slice_title_h(self) -> float:
        return 0.08 + 0.14 * max(title.count("\n") + 1 for title in self.slice_titles())

    def height(self, label: str) -> float:
        return (TITLE_H * len(self.title_lines(label)) + 0.08 + LINE_H * len(self.lines) + PANEL_TITLE_H + AXES_H
                + UNDER_H + LINE_H * (self.slice_line.count("\n") + 1) + self.slice_title_h + SLICE_H)

    def panels(self) -> list[tuple[float, float]]:
        """(left, width) in inches of the axes of (a), (b), (c)."""
        free = self.width - self.label_w - GAP_W - self.outcome_w - GAP_W - LOSS_LABEL_W - RIGHT_W
        a, b, c = (free * share for share in SHARES)
        b_left = self.label_w + a + GAP_W
        c_left = b_left + b + self.outcome_w + GAP_W + LOSS_LABEL_W
        return [(self.label_w, a), (b_left, b), (c_left, c)]


def build(job):
    results = job.results
    study, losses = results.table("study"), results.table("study_losses")
    claims_file = load_claims(job.files["claims"])
    claim = next(c for c in claims_file["claims"] if c["measure"] == "quality_unchanged")
    labels = results.labels()
    drawn = [g for g in labels if len(study) and (study["gpu"] == g).any()]
    missing = [g for g in labels if g not in drawn]
    if not drawn:
        fig = plt.figure(figsize=(PRINT_WIDTH_IN, 1.6))
        note(fig.add_subplot(), fit("no quality study for " + ", ".join(labels) + " (target quality_study; shipped "
                                    "reference sets carry it under data/reference/<workload>/<label>/study/)",
                                    PRINT_WIDTH_IN - 0.4, 13))
        return fig
    width = PRINT_WIDTH_IN
    blocks = [Block(g, study[study["gpu"] == g], losses[losses["gpu"] == g] if len(losses) else losses, claim,
                    claims_file.get("optimized_variants", []), width) for g in drawn]
    foot = FOOT_H if missing else 0.0
    height = sum(block.height(results.panel_label(block.gpu)) for block in blocks) + LEGEND_H + foot
    fig = plt.figure(figsize=(width, height))
    top = height
    for block in blocks:
        label = results.panel_label(block.gpu)
        title = block.title_lines(label)
        fig.text(0.05 / width, (top - 0.04) / height, "\n".join(title), ha="left", va="top", fontsize=10,
                 fontweight="bold", linespacing=1.15)
        below = top - TITLE_H * len(title) - 0.08
        fig.text(0.05 / width, below / height, "\n".join(block.lines), ha="left", va="top", fontsize=8.5,
                 linespacing=1.2)
        axes_top = below - LINE_H * len(block.lines) - PANEL_TITLE_H
        _panels(fig, block, axes_top)
        _slices(fig, results, block, axes_top - AXES_H - UNDER_H)
        top -= block.height(label)
    _legend(fig, blocks, foot + LEGEND_H / 2)
    if foot:
        fig.text(0.05 / width, foot / 2 / height, "No quality study: " + ", ".join(missing) + " (no study files "
                 "measured here or shipped under data/reference/<workload>/<label>/study/)", ha="left", va="center",
                 fontsize=8.5)
    return fig


def _panels(fig, block: Block, top: float) -> None:
    """(a), (b), (c) side by side, their axes from `top` down AXES_H (inches)."""
    width, height = fig.get_figwidth(), fig.get_figheight()
    axes = [fig.add_axes([left / width, (top - AXES_H) / height, w / width, AXES_H / height])
            for left, w in block.panels()]
    _seeds(axes[0], block)
    _differences(axes[1], block)
    _losses(axes[2], block)


def _rows_axis(ax, labels: list[str] | None, count: int) -> None:
    """Categorical rows, the first on top (their names where `labels`); few ticks on the value axis."""
    ax.set_yticks(range(count), labels if labels is not None else [""] * count)
    ax.set_ylim(count - 0.5, -0.5)
    ax.set_ylabel("")
    ax.grid(axis="y", visible=False)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=3))


def _new_artists(ax, before: tuple[int, int]) -> list:
    return ax.lines[before[0]:] + ax.collections[before[1]:]


def _seeds(ax, block: Block) -> None:
    """(a) Every seed's value of the verdict's metric, one row per variant (seaborn's swarm: equal values side by
    side), each variant's mean as a black tick, the baseline's mean +- SD as a band and the rerun of its seed as an
    open circle."""
    import seaborn as sns

    rows, judgement, variants = block.rows, block.judgement, block.variants
    column = judgement.column
    ax.set_title("(a) every seed", loc="left")
    base = rows.loc[rows["variant"] == "baseline", column].astype(float).dropna()
    if len(base) >= 2:
        mean, sd = float(base.mean()), float(base.std(ddof=1))
        ax.axvspan(mean - sd, mean + sd, color=BAND, alpha=0.25, linewidth=0,
                   label="baseline mean \N{PLUS-MINUS SIGN} SD")
        ax.axvline(mean, color="0.35", linewidth=0.8, linestyle="--")
    seeds = rows[["variant", "seed", column]].dropna().sort_values(["variant", "seed"])
    # One swarm for every row: seaborn draws the whole figure once per call to place the points (a quarter of a
    # second each), and it makes one collection per row, in `order`.
    before = len(ax.collections)
    sns.swarmplot(data=seeds, x=column, y="variant", order=variants, hue="variant", hue_order=variants,
                  palette={variant: variant_color(variant) for variant in variants}, size=4.5, edgecolor="white",
                  linewidth=0.5, ax=ax, zorder=3, warn_thresh=1.0, legend=False)
    for variant, points in zip(variants, ax.collections[before:], strict=True):
        mark([points], variant)
    sns.pointplot(data=seeds, x=column, y="variant", order=variants, estimator="mean", errorbar=None, color="black",
                  markers="|", markersize=12, markeredgewidth=1.6, linestyle="none", ax=ax, zorder=4, legend=False)
    if judgement.rerun is not None:
        ax.scatter([judgement.rerun.distance], [variants.index("baseline") + 0.3], facecolors="none",
                   edgecolors="black", s=22, zorder=3, linewidths=0.9)
    _rows_axis(ax, variants, len(variants))
    ax.set_xlabel(METRIC_LABELS.get(column, column))
    ax.margins(x=0.08)


def _differences(ax, block: Block) -> None:
    """(b) On (a)'s rows: each variant's mean paired difference from the baseline and its interval, the +-margin band,
    and the outcome beside each row (outside the axes, on the right: never over an interval); on the baseline's row
    the rerun's difference from the first training."""
    judgement, variants = block.judgement, block.variants
    ax.set_title("(b) paired by seed", loc="left")
    if judgement.margin:
        ax.axvspan(-judgement.margin, judgement.margin, color=BAND, alpha=0.25, linewidth=0, label="margin")
    ax.axvline(0, color="black", linewidth=0.7)
    for k, variant in enumerate(variants):
        if variant == "baseline":
            if judgement.rerun is not None:
                ax.scatter([judgement.rerun.difference], [k], facecolors="none", edgecolors="black", s=26, zorder=3,
                           linewidths=0.9)
            continue
        found = judgement.comparisons.get(variant)
        if found is None:
            continue
        if math.isfinite(found.low):
            (line,) = ax.plot([found.low, found.high], [k, k], color=variant_color(variant), linewidth=2.2,
                              solid_capstyle="butt")
            mark([line], variant)
        if math.isfinite(found.mean):
            points = ax.scatter([found.mean], [k], color=variant_color(variant), s=26, zorder=3, edgecolors="black",
                                linewidths=0.6)
            mark([points], variant)
    _rows_axis(ax, None, len(variants))
    side = ax.secondary_yaxis("right")
    side.set_yticks(range(len(variants)), [outcome_text(judgement, v) for v in variants])
    side.tick_params(length=0)
    ax.set_xlabel(f"variant \N{MINUS SIGN} baseline: mean\nand {judgement.interval_name} interval")
    ax.margins(x=0.1)


def _smoothed(losses, window: int) -> pd.DataFrame:
    """Each seed's loss curve of every variant, smoothed by a trailing mean over `window` steps."""
    frame = losses.sort_values(["variant", "seed", "step"]).copy()
    frame["smoothed"] = frame.groupby(["variant", "seed"])["loss"].transform(
        lambda v: v.rolling(window, min_periods=1).mean())
    return frame


def _mean_and_range(ax, differences: pd.Series, color, linewidth: float) -> None:
    """The mean over the seeds of `differences` (indexed by seed and step) at each step as a line, their range (lowest
    to highest) as a band: what seaborn's lineplot draws with estimator="mean" and errorbar=("pi", 100), aggregated
    in one pandas groupby (seaborn's took 3 s for the shipped study's 1,200-step curves, most of the figure's time)."""
    per_step = differences.groupby(level="step").agg(["mean", "min", "max"]).sort_index()
    ax.plot(per_step.index, per_step["mean"], color=color, linewidth=linewidth)
    ax.fill_between(per_step.index, per_step["min"], per_step["max"], color=color, alpha=0.2, linewidth=0)


def _losses(ax, block: Block) -> None:
    """(c) The smoothed training loss of every variant minus the baseline's at the same seed (paired as (b) is): the
    mean over the seeds as a line and their range as a band; behind them, in grey, the baseline's seeds minus their
    mean: how far training from another seed moves the curve. On the loss itself the curves lie on each other."""
    losses, variants = block.losses, block.variants
    ax.set_title("(c) training loss", loc="left")
    base = losses[losses["variant"] == "baseline"] if len(losses) else losses
    if base.empty:
        note(ax, "no loss curve of the baseline" if len(losses) else "no loss curves")
        return
    window = smoothing_window(int(losses["step"].max()) + 1)
    curves = _smoothed(losses, window)
    steps = curves.groupby(["variant", "seed"])["step"].max().min()  # the steps every curve reaches
    curves = curves[curves["step"] <= steps]
    baseline = curves[curves["variant"] == "baseline"].set_index(["seed", "step"])["smoothed"]
    if baseline.index.get_level_values("seed").nunique() > 1:
        _mean_and_range(ax, baseline - baseline.groupby("step").transform("mean"), BAND, linewidth=0)
    for variant in variants[1:] if variants[:1] == ["baseline"] else variants:
        mine = curves[curves["variant"] == variant].set_index(["seed", "step"])["smoothed"]
        paired = (mine - baseline).dropna()
        if paired.empty:
            continue
        before = (len(ax.lines), len(ax.collections))
        _mean_and_range(ax, paired, variant_color(variant), linewidth=1.2)
        mark(_new_artists(ax, before), variant)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(f"variant \N{MINUS SIGN} baseline\n(moving mean of {window})")


def _slices(fig, results, block: Block, top: float) -> None:
    """(d) The real image and every variant's first sample at the seed they share, in the strip from `top` down."""
    rows, width, height = block.rows, fig.get_figwidth(), fig.get_figheight()
    seed = reference_seed(rows)
    variants = [v for v in block.variants if ((rows["variant"] == v) & (rows["seed"] == seed)).any()]
    panels = [("real image", results.slice_of(block.gpu, variants[0], seed, "real"))]
    panels += [(v, results.slice_of(block.gpu, v, seed)) for v in variants]
    fig.text(0.05 / width, (top - 0.02) / height, block.slice_line, ha="left", va="top", fontsize=8.5,
             linespacing=1.2)
    pitch = min(SLICE_H + 0.35, (width - 0.2) / len(panels))
    side = min(SLICE_H, pitch - 0.12)
    left = (width - pitch * len(panels) + (pitch - side)) / 2
    bottom = top - LINE_H * (block.slice_line.count("\n") + 1) - block.slice_title_h - side
    for k, (title, image) in enumerate(panels):
        ax = fig.add_axes([(left + k * pitch) / width, bottom / height, side / width, side / height])
        ax.axis("off")
        ax.set_title(_fit_title(title, pitch - 0.05), fontsize=8)
        if image is None:
            ax.text(0.5, 0.5, "no slice", ha="center", va="center", fontsize=8, transform=ax.transAxes)
            continue
        ax.imshow(image, cmap="gray", vmin=-1, vmax=1, interpolation="nearest", aspect="auto")


def _fit_title(title: str, width_in: float) -> str:
    """A slice's title on as many lines as its width needs (8 pt: about 14 characters per inch), broken after an
    underscore of a variant's name."""
    chars = max(8, int(width_in * 14))
    lines = [""]
    for part in re.split(r"(?<=_)", title):
        if lines[-1] and len(lines[-1]) + len(part) > chars:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def _legend(fig, blocks: list[Block], middle: float) -> None:
    """One legend for every label's panels: what the marks of (a), (b) and (c) are (the variants are named on the
    rows; their colours are those of every figure)."""
    interval = blocks[0].judgement.interval_name
    handles = [
        Line2D([], [], color="0.3", marker="o", markersize=4.5, linestyle="none", label="(a) one seed"),
        Line2D([], [], color="black", marker="|", markersize=9, markeredgewidth=1.6, linestyle="none",
               label="(a) mean over the seeds"),
        Patch(color=BAND, alpha=0.35, linewidth=0, label="(a) baseline mean \N{PLUS-MINUS SIGN} SD over its seeds"),
        Line2D([], [], color="black", marker="o", markerfacecolor="none", markeredgewidth=0.9, markersize=5,
               linestyle="none", label="(a) rerun of a baseline seed; (b) its difference"),
        Patch(color=BAND, alpha=0.35, linewidth=0, label="(b) \N{PLUS-MINUS SIGN} margin"),
        Line2D([], [], color="0.3", linewidth=2.2, marker="o", markersize=4.5,
               label=f"(b) mean difference, {interval} interval"),
        Patch(color=BAND, alpha=0.45, linewidth=0, label="(c) baseline's seeds \N{MINUS SIGN} their mean"),
        Line2D([], [], color="0.3", linewidth=1.2, label="(c) mean over the seeds, band: their range"),
    ]
    fig.legend(handles=handles, loc="center", bbox_to_anchor=(0.5, middle / fig.get_figheight()), ncol=2,
               frameon=False, handlelength=1.8, columnspacing=1.5)


def _quality_label(gpu: str, rows: pd.DataFrame) -> str | None:
    """One label's quality study as tab06 has it: the baseline's samples, then each variant's paired difference
    against the margin, and the rerun."""
    base = rows[rows["variant"] == "baseline"]
    if base.empty:
        return None
    first = base.iloc[0]
    text = (f"On {gpu} ({first['volume_shape']}, T = {int(first['timesteps'])}, {int(first['optimizer_steps'])} "
            f"optimizer steps), the baseline's samples reach a mean 3D SSIM of {num(first['ssim_vs_real_mean'])} "
            f"against the held-out real images over seeds {first['seeds']}")
    if float(rows["ssim_vs_real_mean"].max()) < 0.3:
        return text + (". These samples are not brain-like (the training is far too short), so the figure checks "
                       "the path, not the quality.")
    judged, unjudged, rerun = [], {}, ""
    for row in rows[rows["variant"] != "baseline"].itertuples():
        if str(row.variant).startswith("baseline, rerun"):
            rerun = (f" The baseline's seed {row.seeds} trained again in the same job moved the distance by "
                     f"{num(row.mean_difference)}: {row.outcome}.")
        elif str(row.outcome).startswith("not measurable"):
            unjudged.setdefault(str(row.outcome), []).append(row.variant)
        else:
            judged.append(f"{row.variant} {num(row.mean_difference)} (90 % interval {num(row.interval_low)} to "
                          f"{num(row.interval_high)}), {row.outcome}")
    if judged:
        text += (f". Against a margin of {num(first['margin'])}, the mean difference in the distance to the real "
                 "images from the baseline of the same seed is: " + "; ".join(judged))
    text += "".join(f"; {join_words(variants)}: {outcome}" for outcome, variants in unjudged.items())
    return text + "." + rerun


def describe(context: Context) -> str:
    inputs = context.inputs
    quality = inputs.table("tab06_quality")
    if quality.empty:
        return "No quality study was run."
    said = [_quality_label(gpu, rows) for gpu, rows in quality.groupby("gpu", sort=False)]
    return " ".join(s for s in said if s) + (
        " Every variant trains from the same seeds as the baseline, with the same initial weights, data order and "
        "sampling noise, so each seed gives one paired difference; the margin is the baseline's seed-to-seed "
        "standard deviation: how far training again from another seed moves the distance.")
