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
from ..panels import variant_color
from ..results import variant_order
from ..style import note

# Heights (inches) of one label's block: its title and verdict, the slices, the panels; and of the closing note.
TITLE_H, SLICES_H, PANELS_H, FOOT_H = 0.85, 2.1, 3.6, 0.4
BLOCK_H = TITLE_H + SLICES_H + PANELS_H


def runs_of(study) -> list[tuple[str, int]]:
    """(variant, seed) of a label's runs: the baseline at every seed first, then the variants in the paper's order."""
    base = sorted(int(s) for s in study.loc[study["variant"] == "baseline", "seed"])
    others = [v for v in variant_order(study["variant"]) if v != "baseline"]
    seed = reference_seed(study)
    return [("baseline", s) for s in base] + [(v, seed) for v in others]


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
        fig.text(0.01, (top - 0.2) / height, results.panel_label(gpu), ha="left", va="center", fontsize=11,
                 fontweight="bold")
        wrapped = "\n".join(textwrap.wrap(f"Quality claim: {verdict} \N{EM DASH} {measured}", int(width * 13)))
        fig.text(0.01, (top - 0.42) / height, wrapped, ha="left", va="top", fontsize=9)
        runs = runs_of(rows)
        _slices(fig, results, gpu, rows, runs, top - TITLE_H, height)
        panels = top - TITLE_H - SLICES_H
        grid = fig.add_gridspec(1, 4, width_ratios=[1.4, 1, 1, 1], left=0.06, right=0.99, wspace=0.38,
                                top=(panels - 0.35) / height, bottom=(panels - PANELS_H + 1.05) / height)
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


def _losses(ax, losses, runs, rows) -> None:
    ax.set_title("training loss", loc="left")
    if losses.empty:
        note(ax, "no loss curves")
        return
    steps = int(losses["step"].max()) + 1
    window = smoothing_window(steps)
    curves = {}
    for variant, seed in runs:
        curve = losses[(losses["variant"] == variant) & (losses["seed"] == seed)].sort_values("step")
        curves[(variant, seed)] = (curve["step"], curve["loss"].rolling(window, min_periods=1).mean())
    base = [curves[r] for r in runs if r[0] == "baseline" and r in curves]
    if len(base) > 1:
        length = min(len(c[1]) for c in base)
        stack = np.vstack([c[1].to_numpy()[:length] for c in base])
        ax.fill_between(base[0][0].to_numpy()[:length], stack.min(0), stack.max(0), color="0.6", alpha=0.45,
                        label=f"baseline, {len(base)} seeds (band)", linewidth=0)
    for k, ((variant, seed), (x, y)) in enumerate(curves.items()):
        if variant == "baseline":
            ax.plot(x, y, color="0.3", linewidth=0.9, linestyle=("-", ":", "--", "-.")[k % 4],
                    label=f"baseline, seed {seed}")
            continue
        ax.plot(x, y, color=variant_color(variant, k), linewidth=1.1, label=variant)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(f"L1 loss on the noise, moving mean of {window}")
    ax.legend(fontsize=7)


def _distance(ax, rows, runs, claim) -> None:
    column = claim["distance"]
    ax.set_title("distance to the real images", loc="left")
    table = rows.set_index(["variant", "seed"])
    values = [float(table.loc[r, column]) for r in runs]
    seeds = len([r for r in runs if r[0] == "baseline"])
    colors = ["0.45" if v == "baseline" else variant_color(v, k) for k, (v, _) in enumerate(runs)]
    band = study_band(claim, rows)
    if band is not None:
        ax.axhspan(band["centre"] - band["half_width"], band["centre"] + band["half_width"], color="0.6", alpha=0.3,
                   label="baseline's seed-to-seed band", linewidth=0)
        ax.legend(fontsize=7, loc="lower right")
    ax.scatter(range(len(runs)), values, color=colors, zorder=3, s=30)
    ax.set_xticks(range(len(runs)), [run_label(v, s, seeds) for v, s in runs], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("Wasserstein distance per mask label\n(sample vs real intensities, mean)" if
                  column == "wasserstein_vs_real" else column)
    ax.margins(y=0.3)


def _similarity(ax, rows, runs, metric: str, ylabel: str) -> None:
    ax.set_title(ylabel.split(" (")[0], loc="left")
    table = rows.set_index(["variant", "seed"])
    seeds = len([r for r in runs if r[0] == "baseline"])
    real = np.array([float(table.loc[r, f"{metric}_vs_real" + ("_db" if metric == "psnr" else "")]) for r in runs])
    column = f"{metric}_vs_baseline" + ("_db" if metric == "psnr" else "")
    versus = np.array([table.loc[r, column] if column in table else np.nan for r in runs], dtype=float)
    x = np.arange(len(runs))
    bars = ax.bar(x - 0.2, real, width=0.4, label="vs real image", color="#4c72b0")
    ax.bar_label(bars, fmt="%.2g" if metric == "ssim" else "%.3g", fontsize=6, padding=1)
    ax.bar(x + 0.2, np.nan_to_num(versus), width=0.4, label="vs baseline's sample (same noise)", color="#dd8452")
    top = np.nanmax(np.concatenate([real, versus, [1.0]]))
    if metric == "psnr":
        identical = [bool(table.loc[r, "identical_to_baseline"]) if "identical_to_baseline" in table else False
                     for r in runs]
        for xi, same in zip(x, identical):
            if same:
                ax.annotate("same\nvolume", (xi + 0.2, 0), ha="center", va="bottom", fontsize=7)
        ax.set_ylim(0, top * 1.45)
    else:
        ax.set_ylim(min(0.0, float(np.nanmin(np.concatenate([real, versus])))), 1.45)
        ax.set_yticks(np.arange(0, 1.01, 0.2))
    ax.set_xticks(x, [run_label(v, s, seeds) for v, s in runs], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, loc="upper center", ncol=1)
