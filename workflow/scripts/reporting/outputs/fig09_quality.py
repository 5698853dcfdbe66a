"""fig09: per hardware label, the training loss curves, SSIM and PSNR against the real images and against the
baseline's samples, and the middle slice of the first sampled volume of every variant beside the real image."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..results import variant_order
from ..style import note


def build(job):
    results = job.results
    losses, quality, slices = results.table("losses"), results.table("quality"), results.table("slices")
    labels = results.labels()
    n_slices = max([int((slices["gpu"] == g).sum()) for g in labels] + [1])
    fig = plt.figure(figsize=(max(13, 2.2 * n_slices), 6.4 * len(labels)), layout="constrained")
    rows = fig.subfigures(len(labels), 1, squeeze=False)[:, 0]
    for subfig, gpu in zip(rows, labels):
        top, bottom = subfig.subfigures(2, 1, height_ratios=[1.3, 1])
        ax_loss, ax_ssim, ax_psnr = top.subplots(1, 3)
        top.suptitle(results.panel_label(gpu), x=0.01, ha="left", fontsize=11, fontweight="bold")
        curves = losses[losses["gpu"] == gpu] if len(losses) else losses
        for variant in variant_order(curves["variant"]) if len(curves) else []:
            curve = curves[curves["variant"] == variant]
            ax_loss.plot(curve["step"], curve["loss"], marker="o", markersize=3, label=variant)
        ax_loss.set_title("training loss", loc="left")
        ax_loss.set_xlabel("optimizer step")
        ax_loss.set_ylabel("training loss (L1 on noise)")
        if len(curves):
            ax_loss.legend(fontsize=8)
        else:
            note(ax_loss, f"no training steps recorded for {gpu}")
        qual = quality[quality["gpu"] == gpu] if len(quality) else quality
        if qual.empty:
            note(ax_ssim, f"no quality check for {gpu}")
            note(ax_psnr, f"no quality check for {gpu}")
        else:
            _scores(ax_ssim, ax_psnr, qual)
        panels = [(variant, results.slice_of(gpu, variant)) for variant in
                  ["real image"] + variant_order(set(slices.loc[slices["gpu"] == gpu, "variant"]) - {"real image"})]
        panels = [(title, image) for title, image in panels if image is not None]
        axes = bottom.subplots(1, max(len(panels), 1), squeeze=False)[0]
        if not panels:
            note(axes[0], f"no sample volumes for {gpu} (shipped reference sets carry timings, not volumes)")
        for ax, (title, image) in zip(axes, panels):
            ax.imshow(image, cmap="gray", vmin=-1, vmax=1)
            ax.set_title(title, fontsize=9)
            ax.axis("off")
        bottom.suptitle("middle axial slice of the first held-out mask (intensity range [-1, 1])", fontsize=9)
    return fig


def _scores(ax_ssim, ax_psnr, qual) -> None:
    order = variant_order(qual["variant"])
    q = qual.set_index("variant").loc[order]
    x = np.arange(len(order))
    ax_ssim.set_title("3D SSIM", loc="left")
    ax_ssim.bar(x - 0.2, q["ssim_vs_real"], width=0.4, label="vs real image")
    ax_ssim.bar(x + 0.2, q["ssim_vs_baseline"], width=0.4, label="vs baseline sample")
    ax_ssim.set_ylabel("3D SSIM (1 = identical)")
    ax_ssim.set_ylim(min(0.0, float(np.nanmin(q[["ssim_vs_real", "ssim_vs_baseline"]].to_numpy(dtype=float)))), 1.05)
    ax_ssim.set_xticks(x, order, rotation=25, ha="right")
    ax_ssim.legend(fontsize=8)
    ax_psnr.set_title("PSNR", loc="left")
    ax_psnr.bar(x - 0.2, q["psnr_vs_real_db"].astype(float), width=0.4, label="vs real image")
    psnr_base = q["psnr_vs_baseline_db"].astype(float)
    ax_psnr.bar(x + 0.2, psnr_base.fillna(0), width=0.4, label="vs baseline sample")
    for xi, same in enumerate(q["identical_to_baseline"]):
        if same:
            ax_psnr.annotate("identical\n(PSNR = inf)", (xi + 0.2, 0), ha="center", va="bottom", fontsize=7)
    ax_psnr.set_ylabel("PSNR (dB)")
    ax_psnr.set_xticks(x, order, rotation=25, ha="right")
    ax_psnr.legend(fontsize=8)
