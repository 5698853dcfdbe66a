"""fig09: the quality study per hardware label. A row of middle slices (the real image of the first held-out mask,
then the first sample of every run: the baseline at each seed, every variant), and a row of panels: the smoothed
training loss of every run against the band of the baseline's seeds, each run's distance to the real images against
the baseline's seed-to-seed band (the verdict's rule, data/paper_claims.yaml), 3D SSIM and PSNR against the real
images and against the baseline's samples from the same noise. The verdict of the quality claim heads each label."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np

from medddpm.curves import smoothing_window

from ..claims import load_claims, quality_verdict, reference_seed, study_band
from ..panels import mark, shape_text, variant_color
from ..results import variant_order
from ..style import note

# Heights (inches) of one label's block: its title and verdict, the slices, the panels; and of the closing note.
TITLE_H, SLICES_H, PANELS_H, FOOT_H = 0.85, 2.1, 4.6, 0.4
PANELS_BOTTOM = 2.05  # inches under the panels' axes: tick labels (run names, turned upright), then the legends
BLOCK_H = TITLE_H + SLICES_H + PANELS_H


def runs_of(study) -> list[tuple[str, int]]:
    """(variant, seed) of a label's runs: the baseline at every seed first, then the variants in the paper's order."""
    base = sorted(int(s) for s in study.loc[study["variant"] == "baseline", "seed"])
    others = [v for v in variant_order(study["variant"]) if v != "baseline"]
    seed = reference_seed(study)
    return [("baseline", s) for s in base] + [(v, seed) for v in others]


def study_workload(rows) -> str:
    """The quality study's own workload (smaller than the timed runs'): volume, parameters, T and training length."""
    first = rows.iloc[0]
    return (f"quality study: {shape_text(first['volume_shape'])} voxels, {float(first['parameters']) / 1e6:.1f} M "
            f"parameters, T = {int(first['timesteps'])}, {int(first['optimizer_steps'])} optimizer steps")


def run_label(variant: str, seed: int, seeds: int) -> str:
    return f"{variant}, seed {seed}" if variant == "baseline" and seeds > 1 else variant


def build(job):
    """The figure, laid out by hand: the constrained-layout solver places axes differently in the last bits from one
    process to the next (the order it meets its variables in), and this figure must be byte-identical between runs."""
    results = job.results
    study, losses = results.table("study"), results.table("study_losses")
    claims_file = load_claims(job.files["claims"])
    claim = next(c for c in claims_file["claims"] if c["measure"] == "quality_unchanged")
    optimized = claims_file.get("optimized_variants", [])
    labels = results.labels()
    drawn = [g for g in labels if len(study) and (study["gpu"] == g).any()]
    missing = [g for g in labels if g not in drawn]
    if not drawn:
        fig = plt.figure(figsize=(14.0, 2.5))
        note(fig.add_subplot(), "no quality study for " + ", ".join(labels) + " (target quality_study; shipped "
             "reference sets carry it under data/reference/<workload>/<label>/study/)")
        return fig
    width = max(14.0, 1.75 * (1 + max(len(study[study["gpu"] == g]) for g in drawn)))
    foot = FOOT_H if missing else 0.0
    height = BLOCK_H * len(drawn) + foot
    fig = plt.figure(figsize=(width, height))
    top = height  # inches from the bottom of the figure to the top of the next block
    for gpu in drawn:
        rows = study[study["gpu"] == gpu]
        measured, verdict = quality_verdict(claim, gpu, rows, optimized)
        fig.text(0.01, (top - 0.2) / height, f"{results.panel_label(gpu)} \N{EM DASH} {study_workload(rows)}",
                 ha="left", va="center", fontsize=11, fontweight="bold")
        wrapped = "\n".join(textwrap.wrap(f"Quality claim: {verdict} \N{EM DASH} {measured}", int(width * 13)))
        fig.text(0.01, (top - 0.42) / height, wrapped, ha="left", va="top", fontsize=9)
        runs = runs_of(rows)
        _slices(fig, results, gpu, rows, runs, top - TITLE_H, height)
        panels = top - TITLE_H - SLICES_H
        grid = fig.add_gridspec(1, 4, width_ratios=[1.4, 1, 1, 1], left=0.07, right=0.99, wspace=0.42,
                                top=(panels - 0.35) / height, bottom=(panels - PANELS_H + PANELS_BOTTOM) / height)
        ax_loss, ax_dist, ax_ssim, ax_psnr = (fig.add_subplot(grid[0, k]) for k in range(4))
        _losses(ax_loss, losses[losses["gpu"] == gpu] if len(losses) else losses, runs, rows)
        _distance(ax_dist, rows, runs, claim)
        _similarity(ax_ssim, rows, runs, "ssim", "3D SSIM (1 = identical)")
        _similarity(ax_psnr, rows, runs, "psnr", "PSNR (dB)")
        top -= BLOCK_H
    if foot:
        fig.text(0.01, foot / 2 / height, "No quality study: " + ", ".join(missing) + " (no study files measured here "
                 "or shipped under data/reference/<workload>/<label>/study/)", ha="left", va="center", fontsize=9)
    return fig


def _slices(fig, results, gpu, rows, runs, top: float, height: float) -> None:
    """The real image and every run's first sample, in the band from `top` down SLICES_H (inches)."""
    seeds = len([r for r in runs if r[0] == "baseline"])
    first = runs[0]
    panels = [("real image", results.slice_of(gpu, first[0], first[1], "real"))]
    panels += [(run_label(v, s, seeds), results.slice_of(gpu, v, s)) for v, s in runs]
    shape = rows["volume_shape"].iloc[0]
    steps = int(rows["optimizer_steps"].iloc[0])
    fig.text(0.5, (top - 0.1) / height, f"middle axial slice of the first held-out mask ({shape} voxels, {steps} "
             f"optimizer steps, T = {int(rows['timesteps'].iloc[0])}; grey scale [-1, 1])", ha="center", va="center",
             fontsize=9)
    grid = fig.add_gridspec(1, len(panels), left=0.01, right=0.99, wspace=0.15, top=(top - 0.5) / height,
                            bottom=(top - SLICES_H + 0.05) / height)
    for k, (title, image) in enumerate(panels):
        ax = fig.add_subplot(grid[0, k])
        ax.axis("off")
        ax.set_title(title, fontsize=9)
        if image is None:
            ax.text(0.5, 0.5, "no slice", ha="center", va="center", fontsize=8, transform=ax.transAxes)
            continue
        ax.imshow(image, cmap="gray", vmin=-1, vmax=1, interpolation="nearest")


LEGEND_Y = 0.08  # inches above the bottom of a label's block: the panels' legends, under their tick labels


def _below(ax, ncol: int = 1) -> None:
    """The panel's legend at the bottom of the label's block, under the axes and their tick labels (never over the
    data); the block's bottom is the axes' bottom less the room left for tick labels (build's gridspec)."""
    fig = ax.figure
    box = ax.get_position()
    bottom = box.y0 - (PANELS_BOTTOM - LEGEND_Y) / fig.get_figheight()
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=((box.x0 + box.x1) / 2, bottom),
              bbox_transform=fig.transFigure, ncol=ncol, borderaxespad=0)


def _losses(ax, losses, runs, rows) -> None:
    """Each run's smoothed loss minus the mean of the baseline's seeds: on the loss itself the curves of similar runs
    lie on each other and hide the seeds' band."""
    ax.set_title("training loss - baseline mean", loc="left")
    if losses.empty:
        note(ax, "no loss curves")
        return
    steps = int(losses["step"].max()) + 1
    window = smoothing_window(steps)
    curves = {}
    for variant, seed in runs:
        curve = losses[(losses["variant"] == variant) & (losses["seed"] == seed)].sort_values("step")
        curves[(variant, seed)] = (curve["step"].to_numpy(),
                                   curve["loss"].rolling(window, min_periods=1).mean().to_numpy())
    base = [curves[r] for r in runs if r[0] == "baseline" and r in curves]
    length = min(len(c[1]) for c in curves.values())
    steps_axis = next(iter(curves.values()))[0][:length]
    mean = np.vstack([c[1][:length] for c in base]).mean(0) if base else np.zeros(length)
    if len(base) > 1:
        stack = np.vstack([c[1][:length] for c in base]) - mean
        ax.fill_between(steps_axis, stack.min(0), stack.max(0), color="0.6", alpha=0.45,
                        label=f"baseline, {len(base)} seeds (band)", linewidth=0)
    for k, ((variant, seed), (x, y)) in enumerate(curves.items()):
        style = dict(color=variant_color(variant), linewidth=0.9 if variant == "baseline" else 1.1)
        if variant == "baseline":
            style["linestyle"] = ("-", ":", "--", "-.")[k % 4]
        (line,) = ax.plot(x[:length], y[:length] - mean, label=f"baseline, seed {seed}" if variant == "baseline"
                          else variant, **style)
        mark([line], variant)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("optimizer step")
    final = float(mean[-1]) if len(mean) else float("nan")
    ax.set_ylabel(f"L1 loss on the noise - baseline mean\n(moving mean of {window}; baseline ends at {final:.2g})")
    _below(ax, ncol=3)


def _distance(ax, rows, runs, claim) -> None:
    column = claim["distance"]
    ax.set_title("distance to the real images", loc="left")
    table = rows.set_index(["variant", "seed"])
    values = [float(table.loc[r, column]) for r in runs]
    seeds = len([r for r in runs if r[0] == "baseline"])
    band = study_band(claim, rows)
    if band is not None:
        ax.axhspan(band["centre"] - band["half_width"], band["centre"] + band["half_width"], color="0.6", alpha=0.3,
                   label="baseline's seed-to-seed band", linewidth=0)
    points = ax.scatter(range(len(runs)), values, color=[variant_color(v) for v, _ in runs], zorder=3, s=30)
    ax.set_xticks(range(len(runs)), [run_label(v, s, seeds) for v, s in runs], rotation=90, fontsize=8)
    ax.set_ylabel("Wasserstein distance per mask label\n(sample vs real intensities, mean)" if
                  column == "wasserstein_vs_real" else column)
    ax.margins(y=0.3)
    if len({v for v, _ in runs}) == 1:
        mark([points], runs[0][0])
    if band is not None:
        _below(ax)


def _similarity(ax, rows, runs, metric: str, ylabel: str) -> None:
    """Against the real images and against the baseline's sample from the same noise, per run; the values are in
    tab06. A run whose samples are the baseline's own (bit for bit) is written so: its PSNR is infinite."""
    ax.set_title(ylabel.split(" (")[0], loc="left")
    table = rows.set_index(["variant", "seed"])
    seeds = len([r for r in runs if r[0] == "baseline"])
    real = np.array([float(table.loc[r, f"{metric}_vs_real" + ("_db" if metric == "psnr" else "")]) for r in runs])
    column = f"{metric}_vs_baseline" + ("_db" if metric == "psnr" else "")
    versus = np.array([table.loc[r, column] if column in table else np.nan for r in runs], dtype=float)
    x = np.arange(len(runs))
    ax.bar(x - 0.2, real, width=0.4, label="vs real image", color="#4c72b0")
    ax.bar(x + 0.2, np.nan_to_num(versus), width=0.4, label="vs baseline's sample (same noise)", color="#dd8452")
    top = np.nanmax(np.concatenate([real, versus, [1.0]]))
    if metric == "psnr":
        identical = [bool(table.loc[r, "identical_to_baseline"]) if "identical_to_baseline" in table else False
                     for r in runs]
        for xi, same in zip(x, identical):
            if same:
                ax.annotate("identical", (xi + 0.2, 0), ha="center", va="bottom", fontsize=7, rotation=90,
                            xytext=(0, 2), textcoords="offset points")
        ax.set_ylim(0, top * 1.15)
    else:
        ax.set_ylim(min(0.0, float(np.nanmin(np.concatenate([real, versus])))), 1.05)
        ax.set_yticks(np.arange(0, 1.01, 0.2))
    ax.set_xticks(x, [run_label(v, s, seeds) for v, s in runs], rotation=90, fontsize=8)
    ax.set_ylabel(ylabel)
    _below(ax)
