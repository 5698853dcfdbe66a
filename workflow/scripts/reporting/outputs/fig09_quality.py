"""fig09: the quality study per hardware label, as the quality claim judges it (data/paper_claims.yaml, tab05). Under
the label's title and the claim's verdict, a row of three panels: (a) every seed's value of the verdict's metric per
variant, against the baseline's mean +- SD band; (b) each variant's mean paired difference from the baseline with its
90 % interval, against the +-margin band, its outcome written beside it (the baseline's rerun of one seed as a row
of its own: the run-to-run noise); (c) the training loss of every variant minus the baseline's at the same seed, as
a band over the seeds (mean and min-max, smoothed), over the baseline's own seed-to-seed band. Then (d): the middle
axial slice of the real image of the first held-out mask and of every variant's first sample at one seed (the same
noise for all).

Laid out by hand in inches (Layout): the constrained-layout solver places axes differently in the last bits from one
process to the next (the order it meets its variables in), and this figure must be byte-identical between runs. The
room beside and under the panels follows what is written there (row labels, outcomes, legends), and the figure
widens where long variant names need it, so that no text runs into another."""

from __future__ import annotations

import functools
import math
import re
import textwrap
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from medddpm.curves import smoothing_window

from ..claims import QualityJudgement, load_claims, quality_judgement, quality_verdict, reference_seed
from ..panels import mark, shape_text, variant_color
from ..prose import Context, join_words, num
from ..results import variant_order
from ..style import note

MIN_WIDTH = 14.0  # inches
# Heights (inches) of one label's block: the title line, each line of the verdict, the gap to the panels' titles,
# the panels' axes, the room under them (tick labels and a two-line axis label; then each legend row), the slices;
# and the closing note.
TITLE_H, LINE_H, GAP_H, AXES_H, SLICES_H, FOOT_H = 0.45, 0.17, 0.45, 2.9, 2.2, 0.4
UNDER_H, LEGEND_ROW_H, LEGEND_Y = 0.75, 0.19, 0.05
VERDICT_CHARS_PER_INCH = 14.5  # 9 pt text
# Horizontal room (inches): a legend column's handle and spacing besides its text, the right margin, between panels,
# (c)'s tick labels and two-line axis label, and the panels' axes at least (a, b, c). Texts are measured (text_width).
LEGEND_HANDLE_W, RIGHT_W, GAP_W, LOSS_LABEL_W = 0.45, 0.15, 0.35, 0.95
SHARES, MIN_AXES_W = (0.3, 0.33, 0.37), 8.0
METRIC_LABELS = {"wasserstein_vs_real": "Wasserstein distance, sample vs real\nintensities per mask label (mean)"}
METRIC_NAMES = {"wasserstein_vs_real": "Wasserstein distance"}
NOT_JUDGED = "not judged"  # what (b) writes beside a variant that was not judged (the verdict line says why)


def study_workload(rows) -> str:
    """The quality study's own workload (smaller than the timed runs'): volume, parameters, T and training length."""
    first = rows.iloc[0]
    dates = sorted(set(rows["date"].dropna())) if "date" in rows else []
    # The study's own days: the label's date in the header is its timing runs'.
    of = f" of {' to '.join(dict.fromkeys([dates[0], dates[-1]]))}" if dates else ""
    return (f"quality study{of}: {shape_text(first['volume_shape'])}, {float(first['parameters']) / 1e6:.1f} M "
            f"parameters, T = {int(first['timesteps'])}, {int(first['optimizer_steps'])} steps")


# -- what each panel writes: row labels, outcomes and legend entries, known before anything is drawn ---------------
def compared_rows(judgement: QualityJudgement, variants: list[str]) -> list[tuple[str, str]]:
    """(row label, key) of (b): the baseline's rerun first (key "rerun"), then every variant but the baseline."""
    out = [(f"baseline rerun, seed {judgement.rerun.seed}", "rerun")] if judgement.rerun is not None else []
    return out + [(v, v) for v in variants if v != "baseline" and v in judgement.comparisons]


def outcome_text(judgement: QualityJudgement, key: str) -> str:
    """What (b) writes beside a row: the outcome, "not judged" (the verdict line says why), or the rerun's weights."""
    if key == "rerun":
        return "weights bit-identical" if judgement.rerun.weights_identical else "weights differ"
    shown = judgement.shown(key)
    return NOT_JUDGED if shown.startswith("not measurable") else shown


def seed_band_label(count: int) -> str:
    return f"baseline mean \N{PLUS-MINUS SIGN} SD ({count} seeds)"


def margin_label(judgement: QualityJudgement) -> str:
    """'+-margin: 1 x baseline's seed SD (0.014)'."""
    factor = judgement.margin / judgement.spread
    return (f"\N{PLUS-MINUS SIGN} margin: {factor:.3g} \N{MULTIPLICATION SIGN} baseline's seed SD "
            f"({judgement.margin:.2g})")


def legend_a(rows, judgement: QualityJudgement) -> list[str]:
    base = rows.loc[rows["variant"] == "baseline", judgement.column].astype(float).dropna()
    labels = [seed_band_label(len(base))] if len(base) >= 2 else []
    labels += [f"rerun of seed {judgement.rerun.seed}"] if judgement.rerun is not None else []
    return labels + ["one seed", "mean over the seeds"]


def legend_b(judgement: QualityJudgement) -> list[str]:
    labels = [margin_label(judgement)] if judgement.margin else []
    labels += ["rerun \N{MINUS SIGN} first training"] if judgement.rerun is not None else []
    return labels + [f"mean, {judgement.interval_name} interval"]


def loss_seeds(losses, variant: str) -> list[int]:
    return sorted(int(s) for s in losses.loc[losses["variant"] == variant, "seed"].unique()) if len(losses) else []


def legend_c(losses, variants: list[str]) -> list[str]:
    """(c)'s entries: the baseline's seed band, then each variant (its paired seeds named where they are not all
    the baseline's)."""
    base = loss_seeds(losses, "baseline")
    labels = [f"baseline: its {len(base)} seeds \N{MINUS SIGN} mean"] if len(base) > 1 else []
    for variant in variants[1:] if variants[:1] == ["baseline"] else variants:
        paired = len(set(loss_seeds(losses, variant)) & set(base))
        if paired:
            labels.append(variant if paired == len(base) else f"{variant} ({paired} seed{'s' * (paired > 1)})")
    return labels


# -- the layout ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Panel:
    left: float  # inches: the axes
    width: float
    span: tuple[float, float]  # inches: the panel's room with its labels; its legend is centred in it
    legend: list[str]
    ncol: int

    @property
    def legend_rows(self) -> int:
        return -(-len(self.legend) // self.ncol)


@functools.lru_cache(maxsize=None)
def text_width(text: str, size: float) -> float:
    """Inches that `text` takes at `size` points in the figures' font, as Agg draws it (a little to spare)."""
    width, _, _ = RendererAgg(10, 10, 72).get_text_width_height_descent(text, FontProperties(size=size), False)
    return 1.05 * width / 72


def legend_columns(labels: list[str], room: float) -> int:
    """The most columns (at most three) whose entries fit `room` inches side by side, the legend filled column by
    column as matplotlib fills it."""
    for ncol in range(min(3, len(labels)), 1, -1):
        rows = -(-len(labels) // ncol)
        columns = [labels[k:k + rows] for k in range(0, len(labels), rows)]
        if sum(max(text_width(label, 8) for label in column) + LEGEND_HANDLE_W for column in columns) <= room:
            return ncol
    return 1


@dataclass(frozen=True)
class Block:
    """One hardware label: its runs, the claim's judgement, the verdict's lines, and where its panels go."""

    gpu: str
    rows: pd.DataFrame
    losses: pd.DataFrame
    judgement: QualityJudgement
    verdict: str
    variants: list[str]
    compared: list[tuple[str, str]]

    def fixed_width(self) -> float:
        """Inches beside the axes: the row labels of (a) and (b), the outcomes right of (b), (c)'s labels, gaps."""
        return (self.a_label + GAP_W + self.b_label + self.b_right + GAP_W + LOSS_LABEL_W + RIGHT_W)

    @property
    def a_label(self) -> float:
        return max(text_width(v, 9) for v in self.variants) + 0.15

    @property
    def b_label(self) -> float:
        return max([text_width(label, 9) for label, _ in self.compared] or [0.5]) + 0.15

    @property
    def b_right(self) -> float:
        return max([text_width(outcome_text(self.judgement, key), 8) for _, key in self.compared] or [0.5]) + 0.2

    def panels(self, width: float) -> list[Panel]:
        free = width - self.fixed_width()
        a_w, b_w, c_w = (free * share for share in SHARES)
        b_left = self.a_label + a_w + GAP_W + self.b_label
        c_left = b_left + b_w + self.b_right + GAP_W + LOSS_LABEL_W
        spans = [(0.1, self.a_label + a_w + GAP_W / 2),
                 (b_left - self.b_label + GAP_W / 2, b_left + b_w + self.b_right),
                 (c_left - LOSS_LABEL_W, width - RIGHT_W)]
        legends = [legend_a(self.rows, self.judgement), legend_b(self.judgement),
                   legend_c(self.losses, self.variants)]
        return [Panel(left, w, span, legend, legend_columns(legend, span[1] - span[0]) if legend else 1)
                for left, w, span, legend in zip((self.a_label, b_left, c_left), (a_w, b_w, c_w), spans, legends)]

    def lines(self, width: float) -> list[str]:
        """The verdict's lines, each measured to fit the figure's width."""
        chars = int(width * VERDICT_CHARS_PER_INCH)
        while any(text_width(line, 9) > width - 0.3 for line in textwrap.wrap(self.verdict, chars)):
            chars -= 4
        return textwrap.wrap(self.verdict, chars)

    def under(self, width: float) -> float:
        return UNDER_H + LEGEND_ROW_H * max(panel.legend_rows for panel in self.panels(width))

    def height(self, width: float) -> float:
        return TITLE_H + LINE_H * len(self.lines(width)) + GAP_H + AXES_H + self.under(width) + SLICES_H


def blocks_of(study, losses, claim: dict, optimized: list[str], labels: list[str]) -> list[Block]:
    blocks = []
    for gpu in labels:
        rows = study[study["gpu"] == gpu]
        measured, verdict = quality_verdict(claim, gpu, rows, optimized)
        judgement = quality_judgement(claim, gpu, rows, optimized)
        variants = variant_order(rows["variant"])
        blocks.append(Block(gpu, rows, losses[losses["gpu"] == gpu] if len(losses) else losses, judgement,
                            f"Quality claim: {verdict} \N{EM DASH} {measured}", variants,
                            compared_rows(judgement, variants)))
    return blocks


def build(job):
    results = job.results
    study, losses = results.table("study"), results.table("study_losses")
    claims_file = load_claims(job.files["claims"])
    claim = next(c for c in claims_file["claims"] if c["measure"] == "quality_unchanged")
    labels = results.labels()
    drawn = [g for g in labels if len(study) and (study["gpu"] == g).any()]
    missing = [g for g in labels if g not in drawn]
    if not drawn:
        fig = plt.figure(figsize=(MIN_WIDTH, 2.5))
        note(fig.add_subplot(), "no quality study for " + ", ".join(labels) + " (target quality_study; shipped "
             "reference sets carry it under data/reference/<workload>/<label>/study/)")
        return fig
    blocks = blocks_of(study, losses, claim, claims_file.get("optimized_variants", []), drawn)
    width = max(MIN_WIDTH, *(block.fixed_width() + MIN_AXES_W for block in blocks))
    foot = FOOT_H if missing else 0.0
    height = sum(block.height(width) for block in blocks) + foot
    fig = plt.figure(figsize=(width, height))
    top = height  # inches from the bottom of the figure to the top of the next block
    for block in blocks:
        fig.text(0.1 / width, (top - 0.22) / height, f"{results.panel_label(block.gpu)} \N{EM DASH} "
                 f"{study_workload(block.rows)}", ha="left", va="center", fontsize=11, fontweight="bold")
        lines = block.lines(width)
        fig.text(0.1 / width, (top - TITLE_H) / height, "\n".join(lines), ha="left", va="top", fontsize=9,
                 linespacing=1.3)
        panels_top = top - TITLE_H - LINE_H * len(lines) - GAP_H
        _panels(fig, block, panels_top, width)
        _slices(fig, results, block, panels_top - AXES_H - block.under(width), width)
        top -= block.height(width)
    if foot:
        fig.text(0.1 / width, foot / 2 / height, "No quality study: " + ", ".join(missing) + " (no study files "
                 "measured here or shipped under data/reference/<workload>/<label>/study/)", ha="left", va="center",
                 fontsize=9)
    return fig


def _panels(fig, block: Block, top: float, width: float) -> None:
    """(a), (b), (c) side by side, their axes from `top` down AXES_H (inches)."""
    height = fig.get_figheight()
    panels = block.panels(width)
    axes = [fig.add_axes([p.left / width, (top - AXES_H) / height, p.width / width, AXES_H / height])
            for p in panels]
    under = block.under(width)
    proxies = [_seeds(axes[0], block), _differences(axes[1], block), _losses(axes[2], block)]
    for ax, panel, extra in zip(axes, panels, proxies):
        if extra is not None:
            _legend(ax, panel, under, extra, width)


def _legend(ax, panel: Panel, under: float, proxies: list, width: float) -> None:
    """The panel's legend centred in its room, at the bottom of the room under the axes (`under` inches), under
    their tick labels and axis label (never over the data): the labelled artists, then `proxies` (entries that stand
    for marks of several colours). The entries are the ones the layout made room for."""
    fig = ax.figure
    handles, labels = ax.get_legend_handles_labels()
    handles += proxies
    labels += [proxy.get_label() for proxy in proxies]
    assert labels == panel.legend, (labels, panel.legend)  # the layout's room is the room of what is drawn
    bottom = (ax.get_position().y0 * fig.get_figheight() - under + LEGEND_Y) / fig.get_figheight()
    ax.legend(handles, labels, fontsize=8, loc="lower center", bbox_to_anchor=(sum(panel.span) / 2 / width, bottom),
              bbox_transform=fig.transFigure, ncol=panel.ncol, borderaxespad=0, handlelength=1.6, columnspacing=1.0)


def _rows_axis(ax, labels: list[str]) -> None:
    """Categorical rows, the first on top; few ticks on the value axis (its labels never run into each other)."""
    ax.set_yticks(range(len(labels)), labels, fontsize=9)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
    ax.tick_params(axis="x", labelsize=8)


def _seeds(ax, block: Block) -> list:
    """(a) Every seed's value of the verdict's metric, one row per variant (the seeds spread a little across the row
    so that equal values stay visible), each variant's mean as a black tick, the baseline's mean +- SD as a band and
    the rerun of its seed as an open circle. Returns the legend's proxies."""
    rows, judgement, variants = block.rows, block.judgement, block.variants
    column = judgement.column
    ax.set_title("(a) distance to the real images, per seed", loc="left")
    base = rows.loc[rows["variant"] == "baseline", column].astype(float).dropna()
    if len(base) >= 2:
        mean, sd = float(base.mean()), float(base.std(ddof=1))
        ax.axvspan(mean - sd, mean + sd, color="0.55", alpha=0.25, linewidth=0, label=seed_band_label(len(base)))
        ax.axvline(mean, color="0.35", linewidth=0.8, linestyle="--")
    if judgement.rerun is not None:
        ax.scatter([judgement.rerun.distance], [variants.index("baseline") + 0.36], facecolors="none",
                   edgecolors="black", s=26, zorder=3, linewidths=0.9, label=f"rerun of seed {judgement.rerun.seed}")
    for k, variant in enumerate(variants):
        values = rows[rows["variant"] == variant].sort_values("seed")[column].astype(float).to_numpy()
        offsets = np.linspace(-0.22, 0.22, len(values)) if len(values) > 1 else np.zeros(1)
        points = ax.scatter(values, k + offsets, color=variant_color(variant), s=26, zorder=3, edgecolors="white",
                            linewidths=0.5)
        mark([points], variant)
        if len(values) > 1 and np.isfinite(values).any():
            ax.plot([np.nanmean(values)], [k], marker="|", markersize=16, markeredgewidth=1.6, color="black",
                    linestyle="none", zorder=4)
    _rows_axis(ax, variants)
    ax.set_xlabel(METRIC_LABELS.get(column, column), fontsize=9)
    ax.margins(x=0.08)
    return [Line2D([], [], color="0.3", marker="o", markersize=5, linestyle="none", label="one seed"),
            Line2D([], [], color="black", marker="|", markersize=10, markeredgewidth=1.6, linestyle="none",
                   label="mean over the seeds")]


def _differences(ax, block: Block) -> list | None:
    """(b) Each variant's mean paired difference from the baseline and its interval, the +-margin band, and the
    outcome beside each row (outside the axes, on the right: never over an interval). Returns the legend's proxies
    (None: nothing drawn)."""
    judgement, compared = block.judgement, block.compared
    ax.set_title("(b) variant \N{MINUS SIGN} baseline, paired by seed", loc="left")
    if not compared:
        note(ax, "no variant besides the baseline")
        return None
    if judgement.margin:
        ax.axvspan(-judgement.margin, judgement.margin, color="0.55", alpha=0.25, linewidth=0,
                   label=margin_label(judgement))
    ax.axvline(0, color="black", linewidth=0.7)
    for k, (_, key) in enumerate(compared):
        if key == "rerun":
            ax.scatter([judgement.rerun.difference], [k], facecolors="none", edgecolors="black", s=30, zorder=3,
                       linewidths=0.9, label="rerun \N{MINUS SIGN} first training")
            continue
        found = judgement.comparisons[key]
        if math.isfinite(found.low):
            (line,) = ax.plot([found.low, found.high], [k, k], color=variant_color(key), linewidth=2.2,
                              solid_capstyle="butt")
            mark([line], key)
        if math.isfinite(found.mean):
            points = ax.scatter([found.mean], [k], color=variant_color(key), s=30, zorder=3, edgecolors="black",
                                linewidths=0.6)
            mark([points], key)
    _rows_axis(ax, [label for label, _ in compared])
    side = ax.secondary_yaxis("right")
    side.set_yticks(range(len(compared)), [outcome_text(judgement, key) for _, key in compared], fontsize=8)
    side.tick_params(length=0)
    ax.set_xlabel(f"{METRIC_NAMES.get(judgement.column, judgement.column)}: mean difference\nby seed and its "
                  f"{judgement.interval_name} interval", fontsize=9)
    ax.margins(x=0.1)
    return [Line2D([], [], color="0.3", linewidth=2.2, marker="o", markersize=5,
                   label=f"mean, {judgement.interval_name} interval")]


def _smoothed_curves(losses, variant: str, window: int) -> dict[int, np.ndarray]:
    """Each seed's loss curve of `variant`, smoothed by a trailing mean over `window` steps."""
    mine = losses[losses["variant"] == variant]
    return {int(seed): group.sort_values("step")["loss"].rolling(window, min_periods=1).mean().to_numpy()
            for seed, group in mine.groupby("seed", sort=True)}


def _losses(ax, block: Block) -> list | None:
    """(c) The smoothed training loss of every variant minus the baseline's at the same seed (paired as (b) is),
    the mean over the seeds as a line and their range as a band; behind them, in grey, the baseline's seeds minus
    their mean: how far training from another seed moves the curve. On the loss itself the curves lie on each
    other. Returns the legend's proxies (None: nothing drawn)."""
    losses, variants = block.losses, block.variants
    ax.set_title("(c) training loss, variant \N{MINUS SIGN} baseline", loc="left")
    if losses.empty:
        note(ax, "no loss curves")
        return None
    window = smoothing_window(int(losses["step"].max()) + 1)
    base = _smoothed_curves(losses, "baseline", window)
    if not base:
        note(ax, "no loss curve of the baseline")
        return None
    curves = {v: _smoothed_curves(losses, v, window) for v in variants if v != "baseline"}
    length = min(len(c) for per_seed in [base, *curves.values()] for c in per_seed.values())
    steps = np.sort(losses["step"].unique())[:length]
    stack = np.vstack([c[:length] for c in base.values()])
    labels = iter(legend_c(losses, variants))
    if len(base) > 1:
        spread = stack - stack.mean(0)
        ax.fill_between(steps, spread.min(0), spread.max(0), color="0.55", alpha=0.3, linewidth=0, label=next(labels))
    for variant, per_seed in curves.items():
        paired = np.array([curve[:length] - base[seed][:length] for seed, curve in per_seed.items() if seed in base])
        if len(paired) == 0:
            continue
        color = variant_color(variant)
        artists = [ax.fill_between(steps, paired.min(0), paired.max(0), color=color, alpha=0.2, linewidth=0)] \
            if len(paired) > 1 else []
        artists += ax.plot(steps, paired.mean(0), color=color, linewidth=1.3, label=next(labels))
        mark(artists, variant)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6))
    ax.set_xlabel("optimizer step", fontsize=9)
    ax.set_ylabel(f"L1 loss on the noise, difference\n(moving mean of {window}; baseline ends at "
                  f"{stack.mean(0)[-1]:.2g})", fontsize=9)
    return []


def _slices(fig, results, block: Block, top: float, width: float) -> None:
    """(d) The real image and every variant's first sample at the seed they share, in the band from `top` down
    SLICES_H (inches)."""
    rows, height = block.rows, fig.get_figheight()
    seed = reference_seed(rows)
    variants = [v for v in block.variants if ((rows["variant"] == v) & (rows["seed"] == seed)).any()]
    panels = [("real image", results.slice_of(block.gpu, variants[0], seed, "real"))]
    panels += [(v, results.slice_of(block.gpu, v, seed)) for v in variants]
    fig.text(0.1 / width, (top - 0.12) / height, f"(d) middle axial slice of the first held-out mask, seed {seed}: "
             "the real image and every variant's first sample from the same noise "
             f"({rows['volume_shape'].iloc[0]} voxels; grey scale [-1, 1])", ha="left", va="center", fontsize=10)
    side = min(SLICES_H - 0.6, (width - 0.2) / len(panels) - 0.15)  # inches per square slice
    pitch = side + 0.15
    left = (width - pitch * len(panels) + 0.15) / 2
    for k, (title, image) in enumerate(panels):
        ax = fig.add_axes([(left + k * pitch) / width, (top - 0.5 - side) / height, side / width, side / height])
        ax.axis("off")
        ax.set_title(_fit_title(title, side), fontsize=8)
        if image is None:
            ax.text(0.5, 0.5, "no slice", ha="center", va="center", fontsize=8, transform=ax.transAxes)
            continue
        ax.imshow(image, cmap="gray", vmin=-1, vmax=1, interpolation="nearest", aspect="auto")


def _fit_title(title: str, width_in: float) -> str:
    """A slice's title on as many lines as its width needs (8 pt: about 15 characters per inch), broken after an
    underscore of a variant's name."""
    chars = max(8, int(width_in * 15))
    lines = [""]
    for part in re.split(r"(?<=_)", title):
        if lines[-1] and len(lines[-1]) + len(part) > chars:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


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
