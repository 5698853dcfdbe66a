"""Building blocks shared by the figures: one row of panels per hardware label (and phase), colours per kernel
class and variant, grouped bars, and the sentence a panel without data shows instead."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
from matplotlib.ticker import Locator
import numpy as np
import pandas as pd


from .palette import CLASS_COLORS, class_color  # noqa: F401 (CLASS_COLORS: the figures import it from here)
from .palette import variant_color as palette_variant_color
from .prose import shape_text  # noqa: F401 (the figures import it from here too)
from .results import SHIPPED, Results, variant_order
from .style import PRINT_WIDTH_IN, note

TOOL_NAMES = {"ncu": "Nsight Compute", "nsys": "Nsight Systems", "torch": "torch.profiler"}
TOOL_TAGS = {"ncu": "ncu", "nsys": "nsys", "torch": "torch"}  # short tags beside a variant's name
# Characters of a bold 10 pt title per inch of figure width (DejaVu Sans; a little less than fits).
TITLE_CHARS_PER_INCH = 10.5
NOTE_CHARS_PER_INCH = 14.5  # of 8 pt text
BAR_LABEL_SIZE = 8  # the smallest text of every figure (style.MIN_FONT_PT)
# A value written at a bar's end sits on a white box above the lines it may cross (a reference line at 1, a floor).
LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.85}


def variant_color(variant: str, k: int | None = None) -> str:
    """The variant's one colour (reporting.palette); `k` (its place in a panel) is ignored: a variant keeps its
    colour whatever else is drawn."""
    return palette_variant_color(variant)


def mark_as(artists, meaning: str, name: str) -> None:
    """Tag artists as drawing `name` of a palette's meaning (reporting.palette.PALETTES: variant, class, kind, sampler;
    or "neutral" for a colour that means nothing), in their gid, so that a test can check every colour a figure
    shows: one per name everywhere, and far enough from the others beside it."""
    for artist in artists:
        artist.set_gid(f"{meaning}:{name}")


def mark(artists, variant: str) -> None:
    mark_as(artists, "variant", variant)


def workload_of(results: Results, gpu: str) -> str:
    """What a label's runs measured, from their train.json and sample.json (the collected `runs` table): volume
    shape, the network's parameter count (fixed by the configured U-Net's base width) and the diffusion's T, e.g.
    '128³ voxels, 40.2 M parameters, T = 250'. Where the label's runs differ, every value is named."""
    runs = results.tables.get("runs")
    if runs is None or runs.empty or "gpu" not in runs:
        return ""
    rows = runs[runs["gpu"] == gpu]

    def values(column, text) -> str:
        present = [v for v in dict.fromkeys(rows[column].dropna()) if str(v)] if column in rows else []
        return "/".join(text(v) for v in present)

    shape = values("volume_shape", shape_text)
    params = values("parameters", lambda v: f"{float(v) / 1e6:.1f}")
    steps = values("sample_timesteps", lambda v: f"{int(v)}")
    parts = [shape and f"{shape} voxels", params and f"{params} M parameters", steps and f"T = {steps}"]
    return ", ".join(part for part in parts if part)


def panel_title(results: Results, gpu: str, phase: str | None = None) -> str:
    """A row's title: the label, its workload, device, origin and date (Results.panel_label), then the workload's
    size (workload_of) and the phase drawn."""
    detail = "; ".join(part for part in (workload_of(results, gpu), phase and f"{phase} step") if part)
    return f"{results.panel_label(gpu)} \N{EM DASH} {detail}" if detail else results.panel_label(gpu)


def fit(text: str, width_in: float, chars_per_inch: float = TITLE_CHARS_PER_INCH) -> str:
    """`text` wrapped to a width in inches (each line of it kept)."""
    chars = max(20, int(width_in * chars_per_inch))
    glued = text.replace(" = ", "\0=\0")  # "T = 250" never breaks
    lines = [line for part in glued.split("\n") for line in (textwrap.wrap(part, chars) or [""])]
    return "\n".join(lines).replace("\0=\0", " = ")


def say(ax, text: str) -> None:
    width = ax.bbox.width / ax.get_figure(root=True).dpi  # inches, before the layout shrinks it a little
    note(ax, "\n".join(textwrap.wrap(text, max(24, int(width * 13)))))


def has(frame: pd.DataFrame, columns) -> bool:
    return len(frame) > 0 and all(c in frame.columns and frame[c].notna().any() for c in columns)


def absent_reason(results: Results, gpu: str, phase: str, what: str = "") -> str:
    """Why a label has no Nsight Compute numbers for `phase` (or why `what` is missing from its ncu profile)."""
    if not results.gpu_device(gpu):
        return (f"{gpu} is a CPU, whose counters Nsight Compute cannot read (it profiles NVIDIA GPUs); its "
                "torch.profiler operator times are in fig01 and fig02")
    tools = results.tools(gpu, phase)
    shipped = ", shipped reference" if results.origin(gpu) == SHIPPED else ""
    if "ncu" in tools:
        return (f"Nsight Compute profile of the {phase} step on {gpu} has no {what}: not collected for that "
                f"phase (profiling.ncu.by_phase)")
    if not tools:
        return f"no Nsight Compute data for {gpu} ({phase}{shipped}): no {phase}-step profile"
    names = " and ".join(TOOL_NAMES.get(t, t) for t in tools)
    verb = "measures" if len(tools) == 1 else "measure"
    return f"no Nsight Compute data for {gpu} ({phase}{shipped}): {names} {verb} durations only"


def rows_figure(titles: list[str], ncols: int, width: float = PRINT_WIDTH_IN, height=2.6, ratios=None,
                left_out: list[str] = (), caveat: str = "", sharey: bool = False, mosaics: list | None = None):
    """One subfigure per row (titled: panel_title), `ncols` axes in each (sharing their y axis where `sharey`), the
    figure `width` inches wide (the article sets PRINT_WIDTH_IN at its text width); `height` one value or one per row.
    `mosaics` (one per row: a subplot_mosaic layout and its height ratios) lays a row out as it says instead, its axes
    by name. `left_out` (rows not drawn, with the reason) goes into a last, short row, so a figure never hides a label
    or phase without saying why; `caveat` (a sentence about reading the rows) opens that row."""
    heights = list(height) if np.ndim(height) else [height] * len(titles)
    chars = int(width * NOTE_CHARS_PER_INCH)
    lines = textwrap.wrap(caveat, chars) if caveat else []
    if left_out:
        lines += ["Not drawn:"] + [line for text in left_out
                                   for line in textwrap.wrap(f"- {text}", chars, subsequent_indent="  ")]
    extra = 0.2 + 0.16 * len(lines) if lines else 0
    titles = [fit(title, width) for title in titles]
    heights = [h + 0.18 * title.count("\n") for h, title in zip(heights, titles)]
    fig = plt.figure(figsize=(width, sum(heights) + extra), layout="constrained")
    subfigs = fig.subfigures(len(heights) + bool(lines), 1, squeeze=False,
                             height_ratios=heights + ([extra] if lines else []))[:, 0]
    axes = []
    for k, (subfig, title) in enumerate(zip(subfigs, titles)):
        subfig.suptitle(title, x=0.005, ha="left", fontsize=10, fontweight="bold")
        if mosaics:
            layout, row_heights = mosaics[k]
            axes.append(subfig.subplot_mosaic(layout, height_ratios=row_heights, width_ratios=ratios))
        else:
            axes.append(subfig.subplots(1, ncols, squeeze=False, width_ratios=ratios, sharey=sharey)[0])
    if lines:
        subfigs[-1].text(0.005, 0.5, "\n".join(lines), ha="left", va="center", fontsize=8)
    return fig, axes


# A caveat for figures whose rows may hold different workloads.
OWN_SCALES = ("Each row is one hardware label with its own workload (named in its title) and its own scale: compare "
              "the variants within a row, not numbers across rows.")


def bars_height(n: float, base: float = 1.25, per: float = 0.15) -> float:
    """Height (inches) of a row of horizontal-bar panels with `n` bars (or bar groups): its titles and axis labels,
    and room for every bar's 8 pt label."""
    return base + per * max(n, 2)


def rows_with_data(results: Results, has_data, what: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(gpu, phase) rows for which has_data(gpu, phase) holds, and the reasons for the others. When no row has
    data, every row is kept (each then states its reason on its own panels)."""
    rows = [(g, p) for g in results.labels() for p in results.phases()]
    kept = [row for row in rows if has_data(*row)]
    if not kept:
        return rows, []
    reasons = [absent_reason(results, gpu, phase, what) for gpu, phase in rows if (gpu, phase) not in kept]
    return kept, list(dict.fromkeys(reasons))  # a CPU's reason once, not once per phase


def class_legend(fig, classes) -> None:
    handles = [plt.Rectangle((0, 0), 1, 1, color=class_color(c)) for c in classes]
    if handles:
        per_row = max(2, int(fig.get_figwidth() / 1.55))  # class names are up to 17 characters at 8 pt
        fig.legend(handles, classes, loc="outside lower center", ncol=min(per_row, len(handles)),
                   title="kernel class", fontsize=8, title_fontsize=8)


def variant_legend(ax, variants, title: str = "variant") -> None:
    """The variants' colours, to the right of the axes (never over the data)."""
    handles = [plt.Rectangle((0, 0), 1, 1, color=variant_color(v)) for v in variants]
    ax.legend(handles, list(variants), loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize=8,
              title=title, title_fontsize=8)


def label_room(ax, ends, texts, log: bool = False, axis_in: float = 3.0) -> None:
    """Extend the value axis so that a label of `texts` fits past the end of its bar (`ends`), on an axis about
    `axis_in` inches long (8 pt labels: about 0.065 in per character)."""
    ends = np.asarray([e for e in ends if np.isfinite(e) and (e > 0 or not log)], dtype=float)
    if not len(ends):
        return
    longest = max((len(t) for t in texts), default=0)
    share = min(0.6, (0.065 * longest + 0.12) / axis_in)  # of the axis the label takes
    high = float(ends.max())
    if log:
        low = ax.get_xlim()[0] if ax.get_xscale() == "log" else float(ends.min()) / 2
        low = min(low, float(ends.min()) / 2)
        decades = np.log10(high / low)
        ax.set_xlim(low, high * 10 ** (decades * share / (1 - share)))
    else:
        ax.set_xlim(min(0.0, ax.get_xlim()[0]), high / (1 - share) if high > 0 else 1.0)


def significant(value: float) -> str:
    """Three significant digits, without an exponent: 1,227, 81.2, 6.83, 0.0591."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def log_ticks(ax) -> None:
    """A log x axis ticked for its width in decades (LogTicks), written as plain numbers without exponents."""
    from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator

    ax.xaxis.set_major_locator(LogTicks())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: compact(value)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_minor_locator(NullLocator())


# A tick label's width per character, in ems: DejaVu Sans's digits are 0.64 em wide, its '.' 0.32; with the gap
# kept between two labels, half an em.
_LABEL_EM_PER_CHAR = 0.64
_LABEL_GAP_EM = 0.5


def _log_tick_values(low: float, high: float, room: float | None = None) -> list[float]:
    """Ticks of a log axis from `low` to `high`: the densest of 1, 2 and 5 times each power of ten (up to two
    decades), 1 and 3 times, the powers of ten, every other power of ten, whose labels fit side by side in `room`
    (the axis's width in ems of its tick labels; None: not known, which fits all); where none leaves two in view,
    three plain steps. (matplotlib's LogLocator falls back to its linear locator there, which wrote 0.3 and 0.325 on
    one another in a narrow panel; 0.005 and 0.01 touched in a quarter of the page.)"""
    from matplotlib.ticker import MaxNLocator

    span = np.log10(high / low)
    powers = range(int(np.floor(np.log10(low))) - 1, int(np.ceil(np.log10(high))) + 1)
    choices = [[m * 10.0 ** p for p in powers for m in subs] for subs in ((1, 2, 5), (1, 3), (1,))]
    choices.append([10.0 ** p for p in powers if p % 2 == 0])
    if span > 2:
        del choices[0]
    for ticks in choices:
        shown = [t for t in ticks if low <= t <= high]
        if len(shown) >= 2 and (room is None or _labels_fit(shown, low, span, room)):
            return ticks
    return [t for t in MaxNLocator(nbins=3).tick_values(low, high) if t > 0]


def _labels_fit(shown: list[float], low: float, span: float, room: float) -> bool:
    """Whether labels centred on `shown` (ascending) leave a gap between neighbours, on an axis `room` ems wide."""
    at = [room * np.log10(t / low) / span for t in shown]
    half = [_LABEL_EM_PER_CHAR * len(compact(t)) / 2 for t in shown]
    return all(at[k + 1] - at[k] >= half[k] + half[k + 1] + _LABEL_GAP_EM for k in range(len(shown) - 1))


class LogTicks(Locator):
    """A locator choosing `_log_tick_values` from the axis's view and width when it is drawn, not when it is set
    (limits set afterwards, or the layout, would otherwise keep ticks chosen for others)."""

    def __call__(self):
        low, high = sorted(self.axis.get_view_interval())
        return _log_tick_values(float(low), float(high), self._room())

    def tick_values(self, vmin, vmax):
        return _log_tick_values(float(vmin), float(vmax))

    def _room(self) -> float | None:
        """The axis's width in ems of its tick labels' font."""
        from matplotlib.font_manager import FontProperties

        axes = self.axis.axes
        if axes is None or axes.figure is None:
            return None
        width_in = axes.get_window_extent().width / axes.figure.dpi
        size_pt = FontProperties(size=plt.rcParams["xtick.labelsize"]).get_size_in_points()
        return width_in * 72 / size_pt


def compact(value: float) -> str:
    """A tick's value without an exponent: 0.01, 0.5, 20, 500, 2k, 50k, 1M, 3G."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:g}{unit}"
    return f"{value:g}"


def decade_ticks(axis) -> None:
    """A log axis ticked at its powers of ten, written compactly (no superscript exponents: they print at 70 % of
    the tick labels' size)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(subs=(1,)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: compact(value)))
    axis.set_minor_formatter(NullFormatter())


# The one colour of bars that are not told apart by colour (their names are on the axis): fig11's rungs, beside the
# kernel classes' colours.
NEUTRAL = "#3a3a3a"


def variant_barh(ax, order: list[str], values, fmt=None, errors=None, log: bool = False,
                 labels: list[str] | None = None, axis_in: float = 3.0, neutral: bool = False) -> dict:
    """One horizontal bar per variant in its colour (NEUTRAL for all where `neutral`), the first on top, names (or
    `labels`) on the y axis; `fmt` (a format string or a function) writes each value just past its bar's end (past its
    whisker where `errors`, (low, high), are drawn). Returns the written values' texts by variant."""
    values = np.asarray(pd.to_numeric(pd.Series(list(values)), errors="coerce"), dtype=float)
    y = np.arange(len(order))
    if log:
        ax.set_xscale("log")
    bars = ax.barh(y, np.where(np.isfinite(values), values, 0), height=0.7,
                   color=[NEUTRAL if neutral else variant_color(v) for v in order])
    for bar, variant in zip(bars, order):
        mark_as([bar], "neutral", "bar") if neutral else mark([bar], variant)
    ends = values.copy()
    if errors is not None:
        low, high = (np.nan_to_num(np.asarray(e, dtype=float)) for e in errors)
        ax.errorbar(values, y, xerr=[low, high], fmt="none", color="black", capsize=2, linewidth=0.8)
        ends = values + high
    texts, written = [], {}
    if fmt:
        for variant, yi, value, end in zip(order, y, values, ends):
            if np.isfinite(value):
                texts.append(fmt(value) if callable(fmt) else fmt.format(value))
                written[variant] = ax.annotate(texts[-1], (end, yi), xytext=(3, 0), textcoords="offset points",
                                               va="center", ha="left", fontsize=BAR_LABEL_SIZE, bbox=LABEL_BOX,
                                               zorder=4)
    ax.set_yticks(y, labels or order)
    ax.set_ylim(len(order) - 0.5, -0.5)
    label_room(ax, ends, texts, log, axis_in)
    return written


def grouped_barh(ax, frame: pd.DataFrame, category: str, value: str, categories: list, fmt: str | None = None,
                 legend: bool = True, axis_in: float = 3.0) -> list[str]:
    """For each of `categories` (top to bottom) one horizontal bar per variant, side by side; the variants' legend
    beside the axes. Returns the variants drawn."""
    order = variant_order(frame["variant"])
    height = 0.8 / max(len(order), 1)
    texts, ends = [], []
    for k, variant in enumerate(order):
        values = frame[frame["variant"] == variant].set_index(category).reindex(categories)[value].astype(float)
        ys = np.arange(len(categories)) + (k - (len(order) - 1) / 2) * height
        bars = ax.barh(ys, values.fillna(0).to_numpy(), height=height, color=variant_color(variant), label=variant)
        mark(bars, variant)
        if fmt:
            for yi, v in zip(ys, values):
                if np.isfinite(v):
                    texts.append(fmt.format(v))
                    ax.annotate(texts[-1], (v, yi), xytext=(2, 0), textcoords="offset points", va="center",
                                ha="left", fontsize=BAR_LABEL_SIZE, bbox=LABEL_BOX, zorder=4)
        ends += list(values)
    ax.set_yticks(range(len(categories)), categories)
    ax.set_ylim(len(categories) - 0.5, -0.5)
    if fmt:
        label_room(ax, ends, texts, ax.get_xscale() == "log", axis_in)
    if legend:
        variant_legend(ax, order)
    return order


def stacked_shares(ax, order: list[str], shares: pd.DataFrame, labels: list[str] | None = None) -> list[str]:
    """One horizontal bar per variant of `order` (the first on top), stacked by kernel class in CLASS_NAMES order:
    `shares` holds the percentages, one row per variant and one column per class. Returns the classes drawn."""
    from profiling.kernels import CLASS_NAMES

    shares = shares.reindex(index=order).fillna(0.0)
    left = np.zeros(len(order))
    drawn = []
    for kernel_class in [c for c in CLASS_NAMES if c in shares.columns]:
        values = shares[kernel_class].to_numpy(dtype=float)
        if values.any():
            drawn.append(kernel_class)
            bars = ax.barh(range(len(order)), values, left=left, height=0.7, color=class_color(kernel_class))
            mark_as(bars, "class", kernel_class)
            left += values
    ax.set_yticks(range(len(order)), labels or order)
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    return drawn
