"""The bench table of one hardware label: every variant's training and sampling cost against the device's measured
ceilings and the model's FLOPs (results/<workload>/<label>/bench.csv and bench.md).

Model FLOPs are the faithful network's forward (a sampling step) and forward + backward (a training sample) without
any recomputation, the same for every variant, so TFLOP/s compare as speeds; recomputation (upstream's attention
checkpoint, the memory variant's ResBlocks) is work a variant adds, listed apart as executed FLOPs.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, fields
from pathlib import Path

import pandas as pd

from errors import ExpectedError
from measurement.throughput import COLUMNS as THROUGHPUT, run_columns as throughput_columns, single_size_sweep
from medddpm import compile_cache
from medddpm.switches import Variant

from .derived import speedup

GIB = 2**30
SPEEDUP_REFERENCES = ("baseline", "tf32")
# The optional switches and their upstream defaults, as medddpm.switches.Variant declares them.
DEFAULT_SWITCHES = {f.name: f.default for f in fields(Variant) if f.default is not MISSING}


def describe_switches(switches: dict, effective: dict | None = None) -> str:
    """The variant's switches in a few words: precision and layout, then every switch away from its default,
    marked where the run's device gave it no effect (`effective`, from the run's provenance)."""
    effective = effective or {}
    words = []
    if switches.get("autocast"):
        words.append(f"{switches['autocast']} autocast")
    elif switches.get("cudnn_tf32") and switches.get("matmul_tf32"):
        words.append("tf32")
    elif switches.get("cudnn_tf32"):
        words.append("tf32 conv")
    else:
        words.append("fp32")
    if switches.get("channels_last"):
        words.append("channels-last")
    for key, default in DEFAULT_SWITCHES.items():
        value = switches.get(key, default)
        if key == "autocast" or value == default:
            continue
        word = key.replace("_", " ") if value is True else f"{key.replace('_', ' ')} {value}"
        words.append(word if effective.get(key, True) else f"{word} (no effect here)")
    return ", ".join(words)


def _json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def _variant_of(path: Path) -> str:
    return Path(path).parent.name


def recorded_flops(train: dict, path: Path) -> dict:
    """The FLOP counts a training job recorded with its step time (medddpm.flops.step_flops)."""
    if "flops" not in train:
        raise ExpectedError(f"{path}: no FLOP count (`flops`); a training job of an older version of the workflow "
                            "wrote it: run that job again (snakemake --forcerun train)")
    return train["flops"]


def bench_frame(train_files: list[Path], sample_files: list[Path], rates: dict) -> pd.DataFrame:
    """One row per variant, with the FLOPs each training job counted at the volume it trained on."""
    samples = {_variant_of(p): _json(p) for p in sample_files}
    bf16 = rates["bf16_matmul_tflops"]
    rows = []
    for path in train_files:
        variant = _variant_of(path)
        train = _json(path)
        sample = samples.get(variant)
        switches = train["provenance"].get("switches", {})
        per_step = train["settings"]["gradient_accumulation"]
        flops = recorded_flops(train, path)
        model, executed = flops["model"], flops["executed"]
        ms = train["train_ms_per_sample"]
        tflops = model["train_micro_batch"]["total"] / ms / 1e9
        row = {
            "variant": variant,
            "switches": describe_switches(switches, train["provenance"].get("switches_effective")),
            "train_ms_per_sample": ms,
            "train_ms_per_sample_q1": train["step_time"]["q1_ms"] / per_step,
            "train_ms_per_sample_q3": train["step_time"]["q3_ms"] / per_step,
            "train_model_tflops": tflops,
            "train_fraction_of_bf16_rate": tflops / bf16,
            "train_executed_tflop_per_sample": executed["train_micro_batch"]["total"] / 1e12,
            "train_peak_gib": train["peak_memory_bytes"] / GIB,
            "train_compile_s": train.get("compile_seconds"),
            "train_compile_cache": compile_cache.state(train.get("compile_cache")),
            "bare_loop_ms_per_sample": train.get("bare_loop_ms_per_sample"),
            "sample_step_ms": None, "sample_step_q1_ms": None, "sample_step_q3_ms": None,
            "sample_model_tflops": None, "sample_fraction_of_bf16_rate": None, "sample_volume_s": None,
            "timesteps": None, "sample_peak_gib": None, "sample_compile_s": None, "sample_compile_cache": None,
            "memory_kind": train.get("peak_memory_kind"),
            **dict.fromkeys(THROUGHPUT),
        }
        if sample is not None:
            step = sample["step_time"]["median_ms"]
            if list(sample["volume_shape"]) != model["shape"]:
                raise ExpectedError(f"{path.parent / 'sample.json'}: sampled volumes of {sample['volume_shape']}, "
                                    f"but {path} trained on {model['shape']}: run both jobs on one dataset")
            forward = model["forward"]["total"]
            row.update(
                sample_step_ms=step,
                sample_step_q1_ms=sample["step_time"]["q1_ms"],
                sample_step_q3_ms=sample["step_time"]["q3_ms"],
                sample_model_tflops=forward / step / 1e9,
                sample_fraction_of_bf16_rate=forward / step / 1e9 / bf16,
                sample_volume_s=sample["volume_seconds_estimate"],
                timesteps=sample["timesteps"],
                sample_peak_gib=sample["peak_memory_bytes"] / GIB,
                sample_compile_s=sample.get("compile_seconds"),
                sample_compile_cache=compile_cache.state(sample.get("compile_cache")),
                **throughput_columns(sample),  # None where the sampling job ran no throughput sweep
            )
        rows.append(row)
    frame = pd.DataFrame(rows)
    one_label = frame.assign(gpu="")  # reporting.derived computes speed-ups per hardware label
    for reference in SPEEDUP_REFERENCES:
        for phase, column in (("train", "train_ms_per_sample"), ("sample", "sample_step_ms")):
            frame[f"{phase}_speedup_vs_{reference}"] = speedup(one_label, column, reference).to_numpy()
    bare = frame["bare_loop_ms_per_sample"].astype(float)
    frame["bare_loop_gap_pct"] = 100 * (frame["train_ms_per_sample"] / bare - 1)  # what the timed loop adds
    return frame


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _fmt(value, spec: str) -> str:
    if _missing(value):
        return "-"
    return format(value, spec)


def rate_text(value) -> str:
    """Volumes per hour as written in the tables: three significant digits, no exponent (570, 14.6, 7,200)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def throughput_cells(row) -> list[str]:
    """The bench's two throughput cells of a row: volumes per hour at batch 1, and at the best batch with its size;
    "batch 1 only" where the sweep timed batch 1 alone, "not measured" where the sampling job ran no throughput
    sweep, "-" where there is no sampling run."""
    if _missing(row.sample_step_ms) and _missing(row.sample_volume_s):
        return ["-", "-"]
    one, best, batch = row.sample_volumes_per_hour_b1, row.sample_volumes_per_hour_best, row.sample_best_batch
    best_cell = ("batch 1 only" if single_size_sweep(one, best) else "not measured" if _missing(best)
                 else f"{rate_text(best)} (batch {int(batch)})")
    return ["not measured" if _missing(one) else rate_text(one), best_cell]


def compile_text(seconds, cache) -> str:
    """A compile time as the tables write it, marked where inductor's cache held some or all of it (a cold compile
    of the same graphs takes longer; medddpm.compile_cache)."""
    text = _fmt(seconds, ".1f")
    return f"{text} ({cache} cache)" if text != "-" and cache in compile_cache.WARM else text


def bench_markdown(frame: pd.DataFrame, label: str, rates: dict, provenance: dict, model_flops: dict) -> str:
    """The bench table as Markdown, with the device, its measured ceilings and the FLOP floors."""
    bf16 = rates["bf16_matmul_tflops"]
    train_flop = model_flops["train_micro_batch"]["total"]
    forward_flop = model_flops["forward"]["total"]
    kind = "a CPU" if rates.get("device_kind") == "cpu" else "a GPU"
    lines = [
        f"# Bench: {label} ({provenance.get('device_name', '?')})",
        "",
        f"Measured on {kind} with torch {provenance.get('torch', '?')}, {(provenance.get('measured_at') or '')[:10]}"
        + (f"; {rates['note']}." if rates.get("note") else "."),
        f"Device ceilings measured here: dense bf16 matrix product {bf16:.3g} TFLOP/s "
        f"({rates['matmul'][0]['n']}^3, median of {rates['matmul'][0]['time']['n']}), "
        f"device-to-device copy {rates['copy_gb_per_s']:.4g} GB/s (read + write).",
        f"Model FLOPs at {' x '.join(map(str, model_flops['shape']))}: {forward_flop / 1e12:.4g} TFLOP per U-Net "
        f"forward, {train_flop / 1e12:.4g} TFLOP per training sample (forward + backward, no recomputation); "
        f"floors at the measured bf16 rate: {train_flop / bf16 / 1e9:.4g} ms per training sample, "
        f"{forward_flop / bf16 / 1e9:.4g} ms per U-Net evaluation.",
        "",
    ]
    header = ["variant", "switches", "train ms/sample (q1-q3)", "TFLOP/s", "of bf16", "bare ms/sample",
              "sample step ms", "s/volume", "volumes/h batch 1", "volumes/h best batch", "peak GiB train/sample",
              "x baseline train/sample", "x tf32 train/sample", "compile s train/sample"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for row in frame.itertuples(index=False):
        cells = [
            row.variant,
            row.switches,
            f"{_fmt(row.train_ms_per_sample, '.1f')} ({_fmt(row.train_ms_per_sample_q1, '.1f')}-"
            f"{_fmt(row.train_ms_per_sample_q3, '.1f')})",
            _fmt(row.train_model_tflops, '.3g'),
            _fmt(100 * row.train_fraction_of_bf16_rate, '.1f') + " %",
            _fmt(row.bare_loop_ms_per_sample, '.1f'),
            _fmt(row.sample_step_ms, '.2f'),
            _fmt(row.sample_volume_s, '.3g'),
            *throughput_cells(row),
            f"{_fmt(row.train_peak_gib, '.2f')} / {_fmt(row.sample_peak_gib, '.2f')}",
            f"{_fmt(row.train_speedup_vs_baseline, '.2f')} / {_fmt(row.sample_speedup_vs_baseline, '.2f')}",
            f"{_fmt(row.train_speedup_vs_tf32, '.2f')} / {_fmt(row.sample_speedup_vs_tf32, '.2f')}",
            f"{compile_text(row.train_compile_s, row.train_compile_cache)} / "
            f"{compile_text(row.sample_compile_s, row.sample_compile_cache)}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Training: median over the measured optimizer steps divided by the samples per step (quartiles in "
        "brackets); TFLOP/s are model FLOPs per second; bare = forward, backward and Adam on resident tensors "
        "(no loss.item(), EMA or data loading), as the upstream code was timed. Sampling: median U-Net "
        "evaluation step; s/volume = that median x T. Volumes per hour: 3600 x batch / (T x the median step "
        "seconds), the sampling step timed at each batch size of sample.batch_sizes after warm-up steps (compilation "
        "and CUDA graph capture apart), at batch 1 and at the batch that gives the most (best batch, among those "
        "that fit in memory); batch 1 only = sample.batch_sizes held batch 1 alone; not measured = a sampling run "
        "of before the throughput sweep. Peak memory: "
        + ("the CUDA allocator's peak." if kind == "a GPU" else "the process's peak RSS (a CPU).")
        + " Compile: seconds spent compiling (and capturing CUDA graphs) before the timed loops; - = nothing "
        "compiled; (warm cache) = inductor's on-disk cache held every graph compiled, (partly warm cache) some: "
        "a cold compile of the same graphs takes longer.",
        "",
    ]
    return "\n".join(lines)


# -- one number per (gpu, variant) ------------------------------------------------------------------------------------
# Which measurement a table or figure shows for a (gpu, variant): the run's own train.json and sample.json (the `runs`
# table), always. They are the files the run's profiles, quality checks and provenance belong to, and a label's
# bench.csv is built from them. A shipped bench.csv can still hold rows of another run of the same (gpu, variant) (the
# H200 set's baseline and tf32 rows come from a later run than its baseline/ and tf32/ folders): bench_on_runs keeps
# from the bench what is the device's and the model's (the measured bf16 rate, the FLOP counts), takes every time and
# peak from the run, and keeps the bench's own time apart as the other run's, so that the spread between the two is
# stated (spread_notes) instead of shown as a second number.
RUN_TIMES = {  # per phase: bench column -> runs column (the first: the time that names the run)
    "train": {"train_ms_per_sample": "train_ms_per_sample", "train_peak_gib": "train_peak_memory_gib"},
    "sample": {"sample_step_ms": "sample_step_median_ms", "sample_step_q1_ms": "sample_step_q1_ms",
               "sample_step_q3_ms": "sample_step_q3_ms", "sample_volume_s": "sample_volume_s",
               "sample_peak_gib": "sample_peak_memory_gib", "timesteps": "sample_timesteps"},
}
# What only the bench's own run measured: kept where the bench row is the run, dropped where it is another run.
OWN_RUN_ONLY = {"train": ("train_compile_s", "train_compile_cache", "bare_loop_ms_per_sample"),
                "sample": ("sample_compile_s", "sample_compile_cache")}
OTHER_RUN = {"train": "train_ms_other_run", "sample": "sample_step_ms_other_run"}


def _same(a: pd.Series, b: pd.Series) -> pd.Series:
    """Two times of one run (equal up to the CSV's rounding); NaN on either side counts as the same."""
    a, b = a.astype(float), b.astype(float)
    return (a.isna() | b.isna() | ((a - b).abs() <= 1e-6 * b.abs())).astype(bool)


def bench_on_runs(bench: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The bench rows (gpu, variant, ...) with every time and peak taken from the run's train.json/sample.json (see
    the comment above), TFLOP/s, shares of the bf16 rate and speed-ups recomputed from those times, and the bench's
    time where it came from another run in train_ms_other_run / sample_step_ms_other_run (NaN where the bench row is
    the run). Rows without a run keep the bench's numbers."""
    frame = bench.reset_index(drop=True).copy()
    for column in OTHER_RUN.values():
        frame[column] = math.nan
    if frame.empty or runs.empty:
        return frame
    keys = pd.MultiIndex.from_frame(frame[["gpu", "variant"]])
    run = runs.drop_duplicates(["gpu", "variant"]).set_index(["gpu", "variant"]).reindex(keys).reset_index(drop=True)

    def of_run(column: str) -> pd.Series:
        return run[column] if column in run else pd.Series(math.nan, index=frame.index)

    phases = (("train", "train_ms_per_sample", ("train_model_tflops", "train_fraction_of_bf16_rate")),
              ("sample", "sample_step_ms", ("sample_model_tflops", "sample_fraction_of_bf16_rate")))
    for phase, time, rates in phases:
        if time not in frame:
            continue
        old, new = frame[time].astype(float), of_run(RUN_TIMES[phase][time]).astype(float)
        replace = new.notna()
        other = replace & ~_same(old, new)
        frame[OTHER_RUN[phase]] = old.where(other)
        ratio = old / new  # rates scale with 1 / time: model FLOPs and the device's rate are the bench's
        if phase == "sample" and "sample_volume_s" in frame:  # a bench without the step: its volume time
            ratio = ratio.fillna(frame["sample_volume_s"].astype(float) / of_run("sample_volume_s").astype(float))
        for column in rates:
            if column in frame:
                frame[column] = frame[column].astype(float).mask(replace, frame[column].astype(float) * ratio)
        for column in OWN_RUN_ONLY[phase]:
            if column in frame:
                values = frame[column] if column.endswith("_cache") else frame[column].astype(float)
                frame[column] = values.mask(other)
        if phase == "sample":  # volumes per hour are the run's too: missing there (not measured) stays missing
            for column in THROUGHPUT:
                if column in frame or column in run:
                    ours = frame[column] if column in frame else pd.Series(math.nan, index=frame.index)
                    frame[column] = ours.astype(float).mask(replace, of_run(column).astype(float))
        for column, source in RUN_TIMES[phase].items():
            if column in frame and source in run:
                frame[column] = frame[column].mask(replace, run[source])
        if phase == "train" and "train_ms_per_sample_q1" in frame and "samples_per_step" in run:
            for quartile in ("q1", "q3"):
                step = of_run(f"train_step_{quartile}_ms").astype(float) / run["samples_per_step"].astype(float)
                frame[f"train_ms_per_sample_{quartile}"] = frame[f"train_ms_per_sample_{quartile}"].astype(float).mask(
                    replace & step.notna(), step)
    for reference in SPEEDUP_REFERENCES:
        for phase, column in (("train", "train_ms_per_sample"), ("sample", "sample_step_ms")):
            if column in frame and f"{phase}_speedup_vs_{reference}" in frame:
                frame[f"{phase}_speedup_vs_{reference}"] = speedup(frame, column, reference).to_numpy()
    if "bare_loop_gap_pct" in frame:
        frame["bare_loop_gap_pct"] = 100 * (frame["train_ms_per_sample"].astype(float)
                                            / frame["bare_loop_ms_per_sample"].astype(float) - 1)
    return frame


def spread_notes(frame: pd.DataFrame) -> list[str]:
    """One line per (gpu, variant) whose shipped set holds a second run (bench_on_runs' *_other_run columns): the
    numbers shown and which run they are, the other run's numbers and the spread between the two."""
    phases = (("train", "train_ms_per_sample", "ms per training sample", ".1f"),
              ("sample", "sample_step_ms", "ms per sampling step", ".2f"))
    present = [(OTHER_RUN[phase], column, unit, spec) for phase, column, unit, spec in phases
               if OTHER_RUN[phase] in frame and column in frame]
    if not present:
        return []
    notes = []
    others = frame[frame[[other for other, *_ in present]].notna().any(axis=1)]
    for _, row in others.iterrows():
        shown, second = [], []
        for other, column, unit, spec in present:
            if pd.notna(row[other]):
                value, again = float(row[column]), float(row[other])
                shown.append(f"{format(value, spec)} {unit}")
                second.append(f"{format(again, spec)} ({100 * (again / value - 1):+.1f} %)")
        notes.append(f"{row['gpu']} {row['variant']}: two shipped runs. Shown: {', '.join(shown)}, the run of "
                     f"{row['variant']}/train.json and sample.json (authoritative everywhere); the label's bench.csv "
                     f"holds another run of it: {', '.join(second)}, the spread between two runs of one "
                     "configuration; what only that run measured (bare loop, compile time) is left out.")
    return notes
