"""tab07 (beyond the paper): per hardware label and variant, what the bench measured: ms per training sample with
its interquartile range, the model's TFLOP/s and its share of the device's measured bf16 matrix-product rate, the
FLOP floor, the memory floor and the kernel-by-kernel limit of the profiled steps, the sampling step and the full-chain
volume, volumes per hour at batch 1 and at the best batch, peak memory, compile seconds, speed-ups and the bare-loop
time.

Times and peaks are the run's own (train.json, sample.json), the numbers tab04, fig08 and fig11 show; the bench
(reporting.bench, computed from the collected runs) adds the device's rate, the model's FLOPs and the memory floors
of the steps Nsight Compute profiled (profiling.memory_floor)."""

from __future__ import annotations

from measurement.throughput import COLUMNS as THROUGHPUT, single_size_sweep
from medddpm import compile_cache
from profiling.memory_floor import NO_DRAM_BYTES

from ..derived import speedup_verdict, verdict_notes
from ..prose import Context, num
from ..render import Table

COLUMNS = ["gpu", "variant", "origin", "device", "switches", "train_ms_per_sample", "train_ms_per_sample_q1",
           "train_ms_per_sample_q3", "train_model_tflops", "train_fraction_of_bf16_rate",
           "train_flop_floor_ms_per_sample", "train_memory_floor_ms_per_sample", "train_kernel_limit_ms_per_sample",
           "sample_step_ms", "sample_flop_floor_ms", "sample_memory_floor_ms", "sample_kernel_limit_ms",
           "sample_volume_s", *THROUGHPUT, "train_peak_gib",
           "sample_peak_gib", "train_compile_s", "sample_compile_s", "train_speedup_vs_baseline", "train_speedup_low",
           "train_speedup_high", "train_verdict", "paired", "train_speedup_vs_tf32", "sample_speedup_vs_baseline",
           "sample_speedup_low", "sample_speedup_high", "sample_verdict", "bare_loop_ms_per_sample",
           "memory_floor_note"]
CAPTION = ("Frontier: every variant against its device's own ceilings. Model FLOPs (counted once on the U-Net's "
           "shapes, without recomputation) per measured time, as a share of the bf16 matrix-product rate measured on "
           "the same device, and their time at that rate, the FLOP floor (per training sample; per U-Net evaluation "
           "for sampling). The memory floor: the DRAM bytes Nsight Compute measured for the kernels of the profiled "
           "step (each kernel alone, caches flushed), at the copy bandwidth measured on the same device; the kernel "
           "limit: per kernel the larger of its memory floor and its FLOPs at the bf16 rate, summed "
           "(memory_floor_note says why a phase has none). Sampling per volume = median step x T; volumes per hour "
           "= 3600 x batch / (T x median step seconds), at batch 1 and at the batch size that gives the most among "
           "those that fit in memory (its size in sample_best_batch); compile time apart from every step time. Times "
           "are each run's own (train.json, sample.json), as in tab04; the speed-ups over baseline with their "
           "interval and verdict from the label's paired rounds, as in tab04 (paired = no: separately timed jobs, "
           "the range between their step-time quartiles)")


def frontier_table(bench, runs, load_difference_cores: float = 0.5):
    frame = bench.reset_index(drop=True)
    if frame.empty:
        return frame.reindex(columns=COLUMNS), []
    for phase in ("train", "sample"):  # the speed-up is the bench's (paired where measured so); its interval, verdict
        verdict = speedup_verdict(runs, phase)
        columns = {"low": f"{phase}_speedup_low", "high": f"{phase}_speedup_high", "verdict": f"{phase}_verdict"}
        if phase == "train":
            verdict["paired"] = verdict["paired"].map({True: "yes", False: "no"})
            columns["paired"] = "paired"
        frame = frame.merge(verdict[["gpu", "variant", *columns]].rename(columns=columns), on=["gpu", "variant"],
                            how="left")
    cache_notes = warm_compile_notes(frame) + no_ceiling_notes(frame) + memory_floor_notes(frame)
    frame = frame.reindex(columns=COLUMNS)
    frame["sample_best_batch"] = frame["sample_best_batch"].astype(float).round().astype("Int64")  # a count: 8, not 8.0
    shown = runs[runs["variant"].isin(set(frame["variant"]))]
    return frame, (verdict_notes(shown, load_difference_cores=load_difference_cores) + unmeasured_throughput_notes(frame)
                   + single_size_notes(frame) + cache_notes)


def no_ceiling_notes(frame) -> list[str]:
    """One line per label whose variants run the model's arithmetic faster than its measured bf16 matrix rate (a CPU
    without bf16 matrix units emulates them): there the rate is no ceiling and its share, above 100 %, no efficiency."""
    notes = []
    for gpu, rows in frame.groupby("gpu", sort=False):
        if (rows["train_fraction_of_bf16_rate"].astype(float) > 1).any():
            notes.append(f"{gpu}: the model's arithmetic runs faster than the measured bf16 matrix rate (no bf16 "
                         "matrix units): that rate is no ceiling there, and its share above 100 % no efficiency.")
    return notes


def memory_floor_notes(frame) -> list[str]:
    """One line per label whose profiled training steps hold no DRAM bytes (the training step's one-pass metric set):
    which variants, and the metric set that collects them."""
    notes = []
    no_bytes = frame["memory_floor_note"].fillna("").str.contains(f"train: {NO_DRAM_BYTES}", regex=False) \
        if "memory_floor_note" in frame else frame["variant"].map(lambda _: False)
    for gpu, rows in frame[no_bytes].groupby("gpu", sort=False):
        notes.append(f"{gpu}: the training steps of {', '.join(rows['variant'])} were profiled without DRAM bytes "
                     "(Nsight Compute's one-pass set, config/ncu-metrics.yaml's train_one_pass), so they have no "
                     "memory floor; the set train_memory_floor collects them, at three replay passes per kernel.")
    return notes


def warm_compile_notes(frame) -> list[str]:
    """One line per label whose compile seconds came in whole or in part out of inductor's on-disk cache (the bench's
    train_compile_cache / sample_compile_cache, medddpm.compile_cache): which variants and phases. A bench of before
    those columns marks nothing."""
    notes = []
    for gpu, rows in frame.groupby("gpu", sort=False):
        marked = [f"{row['variant']} ({phase}, {row[f'{phase}_compile_cache']})" for _, row in rows.iterrows()
                  for phase in ("train", "sample") if row.get(f"{phase}_compile_cache") in compile_cache.WARM]
        if marked:
            notes.append(f"{gpu}: compile seconds out of a warm inductor cache for {', '.join(marked)}; a cold "
                         "compile of the same graphs takes longer.")
    return notes


def unmeasured_throughput_notes(frame) -> list[str]:
    """One line per label whose sampling runs have no volumes per hour (sample.json of before the throughput
    sweep): which variants, and how to measure them. Their cells stay empty: nothing is derived from s/volume."""
    sampled = frame["sample_step_ms"].notna() | frame["sample_volume_s"].notna()
    missing = frame[sampled & frame["sample_volumes_per_hour_b1"].isna() & frame["sample_volumes_per_hour_best"].isna()]
    notes = []
    for gpu, rows in missing.groupby("gpu", sort=False):
        every = len(rows) == int((sampled & (frame["gpu"] == gpu)).sum())
        which = f"any of its {len(rows)} variants" if every else ", ".join(rows["variant"])
        notes.append(f"{gpu}: volumes per hour not measured for {which}: no throughput sweep in the sample.json "
                     "(written before sample.batch_sizes existed); running the sample jobs again measures them.")
    return notes


def single_size_notes(frame) -> list[str]:
    """One line per label with sampling runs that timed batch 1 alone (sample.batch_sizes: [1]): which variants.
    Their best-batch cells stay empty: one size is no choice of a best one."""
    alone = [single_size_sweep(one, best) for one, best in
             zip(frame["sample_volumes_per_hour_b1"], frame["sample_volumes_per_hour_best"])]
    swept = frame["sample_volumes_per_hour_best"].notna()
    notes = []
    for gpu, rows in frame[alone].groupby("gpu", sort=False):
        label = frame["gpu"] == gpu
        others = frame[swept & label]["variant"].tolist()
        # The shorter list: a ladder sampled at batch 1 but for two rungs names those two (when no row is neither).
        which = (f"every variant but {', '.join(others)}"
                 if others and len(others) < len(rows) and len(others) + len(rows) == int(label.sum())
                 else ", ".join(rows["variant"]))
        notes.append(f"{gpu}: {which} sampled at batch 1 alone (sample.batch_sizes), so no best batch.")
    return notes


def build(job) -> Table:
    results = job.results
    table, notes = frontier_table(results.table("bench"), results.table("runs"),
                                  job.settings["comparison"]["load_difference_cores"])
    return Table(table, CAPTION, notes=notes)


# The article's table shows these columns, with these headers (the CSV keeps them all).
ARTICLE_COLUMNS = [("gpu", "label"), ("variant", "variant"), ("train_ms_per_sample", "train ms/sample"),
                   ("train_model_tflops", "TFLOP/s"), ("train_fraction_of_bf16_rate", "of bf16 rate"),
                   ("sample_volume_s", "s/volume"),
                   ("sample_volumes_per_hour_b1", "vol/h batch 1"), ("sample_volumes_per_hour_best", "vol/h best"),
                   ("sample_best_batch", "best batch"), ("train_peak_gib", "peak GiB"),
                   ("train_compile_s", "compile s"), ("train_speedup_vs_baseline", "speed-up")]
# Shown as percentages (fractions in the CSV).
ARTICLE_PERCENT_COLUMNS = {"train_fraction_of_bf16_rate"}
ARTICLE_SHOWN_ONCE = ("gpu",)  # the label once, above its rows


def describe(context: Context) -> str:
    inputs = context.inputs
    frontier = inputs.table("tab07_frontier")
    if frontier.empty:
        return "The bench table is empty for the same reason."
    text = "Per variant: time, model TFLOP/s and their share of the measured bf16 rate, sampling, memory, compilation."
    # Within each label only: another label is another workload (its title says which), never ranked against it.
    peaks = frontier.dropna(subset=["train_peak_gib"]) if "train_peak_gib" in frontier else frontier.iloc[:0]
    said = []
    for gpu, rows in peaks.groupby("gpu", sort=False):
        low = rows.loc[rows["train_peak_gib"].astype(float).idxmin()]
        said.append(f"{num(low['train_peak_gib'])} GiB ({low['variant']}) on {gpu}")
    if said:
        text += " The smallest training peak of each label: " + "; ".join(said) + "."
    return text
