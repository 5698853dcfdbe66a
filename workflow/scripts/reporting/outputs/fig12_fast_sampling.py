"""fig12: quality against time per volume for every sampler, one row per hardware label, one panel per variant of the
quality study that sampled with them (fast_sampling.study_variants). Each sampler is a line over its step counts:
x the seconds per volume (where the label timed the samplers, the sample_fast job's at its timing workload; else the
study's own, at its volume), y the mean over the seeds of the distance to the real images (the quality claim's
metric), with the paired difference's 90 % interval from the chain of the same runs; the T-step chain is the star
and the margin (the quality claim's) the band around its distance. Tab09 holds the numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..claims import load_claims
from ..palette import OTHER_SAMPLER, SAMPLER_COLORS, SAMPLER_MARKERS
from ..panels import BAR_LABEL_SIZE, OWN_SCALES, log_ticks, mark_as, panel_title, rows_figure, say, shape_text
from ..prose import Context
from ..sampler_judgements import CHAIN, judgements
from ..style import lay_out


def seconds_of(samplers: pd.DataFrame, gpu: str) -> tuple[dict, str]:
    """(sampler, steps) -> seconds per volume from the label's timing of the samplers (its first timed variant), with
    what the axis says they are; empty when the label timed none."""
    mine = samplers[samplers["gpu"] == gpu]
    if mine.empty:
        return {}, ""
    variant = mine["variant"].iloc[0]
    mine = mine[mine["variant"] == variant]
    # The T-step chain is among them, timed in the same rounds.
    times = {(row.sampler, int(row.steps)): float(row.seconds_per_volume) for row in mine.itertuples()}
    shape = shape_text(mine["volume_shape"].iloc[0])
    return times, f"seconds per volume, {variant} at {shape} (log)"


def draw(ax, rows: pd.DataFrame, chain: pd.DataFrame, times: dict) -> None:
    """One study variant's panel: every sampler over its step counts, the chain, the margin band."""
    chain_distance = float(chain["distance"].mean())
    chain_x = times.get((CHAIN, int(chain["steps"].iloc[0])), float(chain["seconds_per_volume"].mean()))
    margin = rows["margin"].dropna()
    if len(margin):
        ax.axhspan(chain_distance - float(margin.iloc[0]), chain_distance + float(margin.iloc[0]), color="#dddddd",
                   zorder=0, label="chain \N{PLUS-MINUS SIGN} margin")
    ax.plot([chain_x], [chain_distance], marker="*", markersize=13, color="black", linestyle="none",
            label=f"ddpm, {int(chain['steps'].iloc[0])} steps")
    counts = []  # (x, y, step count) of every point, written once all are drawn
    for sampler, group in rows.groupby("sampler", sort=False):
        group = group.sort_values("steps")
        x = [times.get((sampler, int(s)), float(t)) for s, t in zip(group["steps"], group["study_seconds_per_volume"])]
        y = chain_distance + group["mean_difference"].astype(float).to_numpy()
        low = (group["mean_difference"] - group["interval_low"]).astype(float).to_numpy()
        high = (group["interval_high"] - group["mean_difference"]).astype(float).to_numpy()
        errors = np.vstack([np.nan_to_num(low), np.nan_to_num(high)])
        drawn = ax.errorbar(x, y, yerr=errors, color=SAMPLER_COLORS.get(sampler, OTHER_SAMPLER),
                            marker=SAMPLER_MARKERS.get(sampler, "o"), capsize=3, label=sampler)
        mark_as(drawn.lines[:1], "sampler", sampler)
        counts += [(xi, yi, int(steps)) for xi, yi, steps in zip(x, y, group["steps"])]
    ax.set_xscale("log")
    ax.margins(x=0.1, y=0.08)  # the chain's star and the step counts inside the frame
    log_ticks(ax)
    return _step_counts(ax, counts)


def _step_counts(ax, counts: list[tuple[float, float, int]]) -> list:
    """Each step count once, along the bottom of the panel under its points: every sampler at a step count sits at
    about the same seconds (one U-Net evaluation a step) and often at about the same distance, where a count beside
    each point would lie on another's. Returns the labels, for `_stagger` once the figure's layout is solved."""
    at_steps: dict[int, list[float]] = {}
    for x, _, steps in counts:
        at_steps.setdefault(steps, []).append(x)
    return [ax.annotate(f"{steps} steps", (float(np.median(xs)), 0.0), xycoords=("data", "axes fraction"),
                        xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                        fontsize=BAR_LABEL_SIZE, color="0.3")
            for steps, xs in sorted(at_steps.items())]


def _stagger(fig, labels: list) -> None:
    """Lift a step count onto the next line up where it would lie on a neighbour's: step counts close in time (2 and
    3 steps of a small volume, beside a 250-step chain on the same log axis) sit closer than their labels are wide.
    Measured on the laid-out figure, so the widths are the saved PNG's."""
    renderer = fig.canvas.get_renderer()
    lines: list[list] = []  # per line, the extents of the labels already on it
    for label in labels:  # in order of step count, so left to right
        box = label.get_window_extent(renderer)
        line = next((k for k, taken in enumerate(lines)
                     if not any(box.x0 < other.x1 + 2 and other.x0 < box.x1 + 2 for other in taken)), len(lines))
        if line == len(lines):
            lines.append([])
        label.xyann = (0, 3 + line * (label.get_fontsize() + 2))
        lines[line].append(box)


def build(job):
    results = job.results
    claim = next(c for c in load_claims(job.files["claims"])["claims"] if c["id"] == "quality")
    study_samplers, samplers = (results.table(name) for name in ("study_samplers", "samplers"))
    judged = judgements(study_samplers, claim)
    labels = [g for g in results.labels() if (study_samplers["gpu"] == g).any()] or results.labels()
    panels = max([len(set(judged.loc[judged["gpu"] == g, "variant"])) for g in labels] + [1])
    fig, axes = rows_figure([panel_title(results, g) for g in labels], panels, height=3.4, caveat=OWN_SCALES)
    step_labels = []  # per panel drawn, its step counts
    for gpu, row in zip(labels, axes):
        mine = judged[judged["gpu"] == gpu]
        variants = list(dict.fromkeys(mine["variant"]))
        if not variants:
            say(row[0], f"no fast sampler on {gpu}'s quality study (fast_sampling.samplers, .study_variants)")
            for ax in row[1:]:
                ax.set_axis_off()
            continue
        times, x_label = seconds_of(samplers, gpu)
        for ax, variant in zip(row, variants):
            chain = study_samplers[(study_samplers["gpu"] == gpu) & (study_samplers["variant"] == variant)
                                   & (study_samplers["sampler"] == CHAIN)].rename(columns={claim["distance"]:
                                                                                              "distance"})
            step_labels.append(draw(ax, mine[mine["variant"] == variant], chain, times))
            first = chain.iloc[0]
            ax.set_title(f"{variant}'s study runs: {shape_text(first['volume_shape'])}, T = {int(first['timesteps'])}, "
                         f"mean of {int(mine['seeds'].max())} seeds", loc="left")
            ax.set_xlabel(x_label or "seconds per volume in the study (log)")
            ax.set_ylabel("distance to the real images")
        # One legend per row, beside its last panel: the samplers are the same in every panel, and inside a panel
        # the legend lay on points wherever they fell (the upper right held them in some runs).
        row[len(variants) - 1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
        for ax in row[len(variants):]:
            ax.set_axis_off()
    lay_out(fig)
    for labels in step_labels:
        _stagger(fig, labels)
    return fig


def describe(context: Context) -> str:
    return ("Each sampler as a line over its step counts: fewer U-Net evaluations move a point left, a loss of quality "
            "moves it up, out of the grey band around the T-step chain's distance (the quality claim's margin). A "
            "point's bar is the 90 % interval of its paired difference from the chain of the same runs.")
