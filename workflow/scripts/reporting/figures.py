"""The end-to-end and quality figures (fig08, fig09)."""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt

from .style import note, variant_order

END_TO_END_PANELS = [
    ("train_ms_per_sample", "training time per sample (ms)", ("train_step_q1_ms", "train_step_q3_ms")),
    ("sample_volume_s", "sampling time per volume (s)", None),
    ("train_peak_memory_gib", "peak memory in training (GiB)", None),
]


def _panel_title(frame: pd.DataFrame, gpu: str) -> str:
    sources = sorted(set(frame["source"].dropna()))
    return f"{gpu}: " + "; ".join(sources) if sources else gpu


def plot_end_to_end(frame: pd.DataFrame, gpus: list[str]):
    """Rows: hardware labels (each with its own scale); columns: training, sampling, memory; bars: variants."""
    fig, axes = plt.subplots(len(gpus), 3, figsize=(13, 3.6 * len(gpus)), squeeze=False, layout="constrained")
    for row, gpu in enumerate(gpus):
        data = frame[frame["gpu"] == gpu]
        order = variant_order(data["variant"])
        for col, (column, label, spread) in enumerate(END_TO_END_PANELS):
            ax = axes[row, col]
            if data.empty or column not in data or data[column].isna().all():
                note(ax, f"no {label} measured for {gpu}")
                continue
            values = data.set_index("variant").loc[order]
            ax.bar(range(len(order)), values[column], color="tab:blue")
            if spread:
                # IQR of the optimizer-step time, scaled to one sample like the bar.
                scale = values[column] / values["train_step_median_ms"]
                low = values[column] - values[spread[0]] * scale
                high = values[spread[1]] * scale - values[column]
                ax.errorbar(range(len(order)), values[column], yerr=[low, high], fmt="none", color="black",
                            capsize=3, label="interquartile range")
            for x, value in enumerate(values[column]):
                ax.annotate(f"{value:.4g}", (x, value), ha="center", va="bottom", fontsize=8)
            ax.set_xticks(range(len(order)), order, rotation=25, ha="right")
            ax.set_ylabel(label)
            ax.set_title(_panel_title(data, gpu) if col == 0 else gpu, loc="left")
    return fig


def _middle_slice(path) -> np.ndarray:
    volume = np.asarray(nib.load(str(path)).get_fdata(), dtype=np.float32)
    return np.rot90(volume[:, :, volume.shape[2] // 2])


def plot_quality(losses: pd.DataFrame, quality: pd.DataFrame, slices: dict, gpus: list[str]):
    """Per hardware label: loss curves, SSIM and PSNR against real images and baseline, middle slices."""
    n_slices = max((len(v) for v in slices.values()), default=1)
    fig = plt.figure(figsize=(max(13, 2.2 * n_slices), 6.4 * len(gpus)), layout="constrained")
    rows = fig.subfigures(len(gpus), 1, squeeze=False)[:, 0]
    for subfig, gpu in zip(rows, gpus):
        top, bottom = subfig.subfigures(2, 1, height_ratios=[1.3, 1])
        ax_loss, ax_ssim, ax_psnr = top.subplots(1, 3)
        data = losses[losses["gpu"] == gpu]
        qual = quality[quality["gpu"] == gpu]
        top.suptitle(f"{gpu}: " + "; ".join(sorted(set(qual["source"]))), x=0.01, ha="left", fontsize=11)
        for variant in variant_order(data["variant"]):
            curve = data[data["variant"] == variant]
            ax_loss.plot(curve["step"], curve["loss"], marker="o", markersize=3, label=variant)
        ax_loss.set_xlabel("optimizer step")
        ax_loss.set_ylabel("training loss (L1 on noise)")
        ax_loss.legend(fontsize=8)
        order = variant_order(qual["variant"])
        q = qual.set_index("variant").loc[order]
        x = np.arange(len(order))
        ax_ssim.bar(x - 0.2, q["ssim_vs_real"], width=0.4, label="vs real image")
        ax_ssim.bar(x + 0.2, q["ssim_vs_baseline"], width=0.4, label="vs baseline sample")
        ax_ssim.set_ylabel("3D SSIM (1 = identical)")
        ax_ssim.set_ylim(min(0.0, float(np.nanmin(q[["ssim_vs_real", "ssim_vs_baseline"]].values))), 1.05)
        ax_ssim.set_xticks(x, order, rotation=25, ha="right")
        ax_ssim.legend(fontsize=8)
        psnr_real = q["psnr_vs_real_db"].astype(float)
        ax_psnr.bar(x - 0.2, psnr_real, width=0.4, label="vs real image")
        psnr_base = q["psnr_vs_baseline_db"].astype(float)
        ax_psnr.bar(x + 0.2, psnr_base.fillna(0), width=0.4, label="vs baseline sample")
        for xi, (value, same) in enumerate(zip(psnr_base, q["identical_to_baseline"])):
            if same:
                ax_psnr.annotate("identical\n(PSNR = inf)", (xi + 0.2, 0), ha="center", va="bottom", fontsize=7)
        ax_psnr.set_ylabel("PSNR (dB)")
        ax_psnr.set_xticks(x, order, rotation=25, ha="right")
        ax_psnr.legend(fontsize=8)
        panels = slices.get(gpu, [])
        axes = bottom.subplots(1, max(len(panels), 1), squeeze=False)[0]
        if not panels:
            note(axes[0], f"no sample volumes for {gpu} (shipped reference sets carry timings, not volumes)")
        for ax, (title, path) in zip(axes, panels):
            ax.imshow(_middle_slice(path), cmap="gray", vmin=-1, vmax=1)
            ax.set_title(title, fontsize=9)
            ax.axis("off")
        bottom.suptitle("middle axial slice of the first held-out mask (intensity range [-1, 1])", fontsize=9)
    return fig
