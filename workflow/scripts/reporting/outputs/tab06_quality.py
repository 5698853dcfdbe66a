"""tab06: the quality study per hardware label, variant and seed (the baseline at every seed gives the seed-to-seed
spread); and, as a second CSV, the quality checks of the timing runs (float64 errors through each variant's paths at
the weights of a few training steps)."""

from __future__ import annotations

from ..render import Table

# No times: tab06 is the same between two clean runs of one configuration (the study's times are in
# results/<workload>/<label>/study/summary.md and the collected study table).
COLUMNS = ["gpu", "variant", "seed", "origin", "device", "date", "volume_shape", "timesteps", "optimizer_steps",
           "final_loss", "ssim_vs_real", "psnr_vs_real_db", "wasserstein_vs_real",
           "lesion_contrast", "lesion_contrast_real", "ssim_vs_baseline", "psnr_vs_baseline_db",
           "max_abs_diff_vs_baseline", "loss_deviation_vs_baseline", "forward_rel_error", "gradient_rel_error"]
CAPTION = ("Quality study: every variant trained from the same seed, data and number of optimizer steps, the baseline "
           "also from further seeds. Against the held-out real images of the sampled masks: 3D SSIM, PSNR, the "
           "Wasserstein distance of the intensities per mask label (mean over labels and masks) and the lesion "
           "contrast (mean lesion minus mean surrounding tissue; of the samples, and of the real images). Against the "
           "baseline's samples at the variants' seed, from the same noise and masks: 3D SSIM, PSNR (empty: the same "
           "volumes), largest absolute difference; mean absolute difference of the smoothed loss curves. Relative "
           "errors of the forward and of all gradients against float64 at the trained weights")


def build(job) -> Table:
    study = job.results.table("study")
    frame = study.reindex(columns=COLUMNS)
    checks = job.results.table("quality")
    return Table(frame, CAPTION, extra={"checks": checks})
