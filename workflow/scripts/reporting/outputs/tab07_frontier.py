"""tab07 (beyond the paper): per hardware label and variant, what the bench measured: ms per training sample with
its interquartile range, the model's TFLOP/s and its share of the device's measured bf16 matrix-product rate, the
sampling step and the full-chain volume, peak memory, compile seconds, speed-ups and the bare-loop time."""

from __future__ import annotations

from ..render import Table

COLUMNS = ["gpu", "variant", "origin", "device", "switches", "train_ms_per_sample", "train_ms_per_sample_q1",
           "train_ms_per_sample_q3", "train_model_tflops", "train_fraction_of_bf16_rate", "sample_step_ms",
           "sample_volume_s", "train_peak_gib", "sample_peak_gib", "train_compile_s", "sample_compile_s",
           "train_speedup_vs_baseline", "train_speedup_vs_tf32", "sample_speedup_vs_baseline",
           "bare_loop_ms_per_sample"]
CAPTION = ("Frontier: every variant against its device's own ceilings. Model FLOPs (counted once on the U-Net's "
           "shapes, without recomputation) per measured time, as a share of the bf16 matrix-product rate measured on "
           "the same device; sampling per volume = median step x T; compile time apart from every step time")


def build(job) -> Table:
    bench = job.results.table("bench")
    return Table(bench.reindex(columns=COLUMNS), CAPTION)
