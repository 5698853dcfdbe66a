"""The bench: every variant's training and sampling cost against the device's measured ceilings and the model's FLOPs.

Computed once from the collected runs table (reporting.results, the one reader of train.json and sample.json) and each
label's device_rates.json: the bundle's `bench` table that fig11, tab07 and tab04 read, and a label's
results/<workload>/<label>/bench.csv and bench.md (the bench_table job, through the same reader and `bench_rows`).

Model FLOPs are the faithful network's forward (a sampling step) and forward + backward (a training sample) without
any recomputation, the same for every variant, so TFLOP/s compare as speeds; recomputation (upstream's attention
checkpoint, the memory variant's ResBlocks) is work a variant adds, listed apart as executed FLOPs.

The memory floor (profiling.memory_floor) is the bytes the kernels of a step profiled by Nsight Compute moved, at the
label's measured copy bandwidth: the bundle's `memory_floor` table per step and kernel class (memory_floor_rows), and
in the collected bench per variant beside the FLOP floor (with_memory_floors). bench.csv and bench.md, which a label's
bench job writes before any profile, have neither.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, fields

import pandas as pd

from jobio.errors import ExpectedError
from measurement.throughput import COLUMNS as THROUGHPUT, single_size_sweep
from medddpm import compile_cache
from medddpm.switches import Variant
from profiling import memory_floor

from .derived import speedup

GIB = 2**30
SPEEDUP_REFERENCES = ("baseline", "tf32")
SAMPLE_COLUMNS = ("sample_step_ms", "sample_step_q1_ms", "sample_step_q3_ms", "sample_model_tflops",
                  "sample_fraction_of_bf16_rate", "sample_volume_s", "timesteps", "sample_peak_gib", "sample_compile_s",
                  "sample_compile_cache")
# bench.csv's columns, in order (a label's file has no gpu column; the collected bench table has one first).
BENCH_COLUMNS = ("variant", "switches", "train_ms_per_sample", "train_ms_per_sample_q1", "train_ms_per_sample_q3",
                 "train_model_tflops", "train_fraction_of_bf16_rate", "train_executed_tflop_per_sample",
                 "train_peak_gib", "train_compile_s", "train_compile_cache", "bare_loop_ms_per_sample",
                 *SAMPLE_COLUMNS, "memory_kind", *THROUGHPUT,
                 *(f"{phase}_speedup_vs_{reference}{end}" for reference in SPEEDUP_REFERENCES
                   for phase in ("train", "sample") for end in ("", "_low", "_high")),
                 "bare_loop_gap_pct", "data_parallel", "data_parallel_one_process", "data_parallel_speedup",
                 "data_parallel_efficiency")
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


def bench_rows(runs: pd.DataFrame, rates: dict[str, dict], refuse_uncounted: bool = True) -> pd.DataFrame:
    """The bench of every label with measured ceilings (`rates`: label -> its device_rates.json): one row per run of
    the runs table (reporting.results, the one reader of train.json and sample.json) with its time against the
    model's FLOPs (the ones its training job counted at the volume it trained on) and the device's bf16 rate, its
    peaks and compile times, and its speed-ups over baseline and tf32 of the same label.

    A run whose train.json has no FLOP count (written by a version of before the counts) is refused in one line
    (`refuse_uncounted`: the bench job of a label measured here) or left out (the collected tables, which read shipped
    sets of every age)."""
    if runs.empty or "train_ms_per_sample" not in runs:
        return pd.DataFrame(columns=["gpu", *BENCH_COLUMNS])
    chosen = runs["gpu"].isin(list(rates)) & runs["train_ms_per_sample"].notna()
    if not refuse_uncounted:
        chosen &= runs["train_model_flop_per_sample"].notna()
    rows = [_bench_row(run, rates[run.gpu]["bf16_matmul_tflops"]) for run in runs[chosen].itertuples(index=False)]
    frame = pd.DataFrame(rows, columns=["gpu", *BENCH_COLUMNS])
    if frame.empty:
        return frame
    counted = runs[chosen].reset_index(drop=True)
    for reference in SPEEDUP_REFERENCES:
        for phase, column in (("train", "train_ms_per_sample"), ("sample", "sample_step_ms")):
            # From the label's paired rounds where it has them (medddpm.comparison), else the two jobs' times.
            # The interval only where the ratio is the paired rounds' own: two separate jobs' medians have none.
            ratio = speedup(frame, column, reference)
            low = high = pd.Series(math.nan, index=counted.index)
            paired = f"{phase}_vs_{reference}_speedup"
            if paired in counted:
                ratio = counted[paired].astype(float).fillna(ratio)
                low = counted[f"{phase}_vs_{reference}_low"].astype(float)
                high = counted[f"{phase}_vs_{reference}_high"].astype(float)
            frame[f"{phase}_speedup_vs_{reference}"] = ratio.to_numpy()
            frame[f"{phase}_speedup_vs_{reference}_low"] = low.to_numpy()
            frame[f"{phase}_speedup_vs_{reference}_high"] = high.to_numpy()
    bare = frame["bare_loop_ms_per_sample"].astype(float)
    frame["bare_loop_gap_pct"] = 100 * (frame["train_ms_per_sample"].astype(float) / bare - 1)  # what the loop adds
    scaling = data_parallel_scaling(counted)
    for column in scaling:
        frame[column] = scaling[column].to_numpy()
    return frame


def _processes(switches: dict) -> int:
    return int(switches.get("data_parallel") or 1)  # a train.json of before data_parallel: one process


def data_parallel_scaling(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run of the runs table: the processes its training ran on (`data_parallel`, one GPU each) and, for a run
    of several, the run of the same label with the same switches on one process: its time per training sample over
    this run's (the speed-up) and that speed-up per process (the scaling efficiency: 1 where N processes train N
    times as fast). No one-process run: no speed-up (NaN), said so in bench.md."""
    described = []  # (run, its processes, its label and switches but the processes)
    for run, text in zip(runs.itertuples(index=False), runs["switches"]):
        own = json.loads(text)
        rest = json.dumps({k: v for k, v in own.items() if k != "data_parallel"}, sort_keys=True)
        described.append((run, _processes(own), (run.gpu, rest)))
    alone = {key: run for run, processes, key in described if processes == 1}
    rows = []
    for run, processes, key in described:
        row = {"data_parallel": processes, "data_parallel_one_process": None, "data_parallel_speedup": math.nan,
               "data_parallel_efficiency": math.nan}
        one = alone.get(key)
        if processes > 1 and one is not None:
            speedup_over_one = one.train_ms_per_sample / run.train_ms_per_sample
            row.update(data_parallel_one_process=one.variant, data_parallel_speedup=speedup_over_one,
                       data_parallel_efficiency=speedup_over_one / processes)
        rows.append(row)
    return pd.DataFrame(rows, columns=["data_parallel", "data_parallel_one_process", "data_parallel_speedup",
                                       "data_parallel_efficiency"])


def data_parallel_lines(frame: pd.DataFrame) -> list[str]:
    """bench.md's words on each data-parallel run: its processes, its time per sample against the one-process run
    of the same switches, the speed-up and the scaling efficiency; or that the one-process run is not there."""
    lines = []
    for row in frame.itertuples(index=False):
        processes = getattr(row, "data_parallel", 1)
        if _missing(processes) or processes <= 1:
            continue
        said = (f"{row.variant} trains with {int(processes)} processes, one device each: "
                f"{row.train_ms_per_sample:.1f} ms per sample")
        if _missing(row.data_parallel_speedup):
            lines.append(f"{said}; no run of the same switches on one process here, so no scaling efficiency.")
            continue
        one = frame.loc[frame["variant"] == row.data_parallel_one_process, "train_ms_per_sample"].iloc[0]
        lines.append(f"{said} against {row.data_parallel_one_process}'s {one:.1f} on one: "
                     f"{row.data_parallel_speedup:.2f}x, a scaling efficiency of "
                     f"{100 * row.data_parallel_efficiency:.0f} % (the speed-up over {int(processes)} processes).")
    return ["Data parallel: " + " ".join(lines), ""] if lines else []


MEMORY_FLOOR_COLUMNS = ["gpu", "variant", "phase", *memory_floor.CLASS_COLUMNS, "copy_gb_per_s", "bf16_tflops",
                        "reason"]


def memory_floor_rows(ncu_kernels: pd.DataFrame, rates: dict[str, dict]) -> pd.DataFrame:
    """Per step profiled by Nsight Compute (gpu, variant, phase of `ncu_kernels`) its memory floor per kernel class
    and "all" (profiling.memory_floor.class_floors) at its label's measured copy bandwidth and bf16 rate (`rates`:
    label -> its device_rates.json), `reason` empty; a step without a floor one "all" row with the reason."""
    if ncu_kernels.empty:  # no step profiled with Nsight Compute (the collected table then has no phase column)
        return pd.DataFrame(columns=MEMORY_FLOOR_COLUMNS)
    frames = []
    for (gpu, variant, phase), kernels in ncu_kernels.groupby(["gpu", "variant", "phase"], sort=False):
        copy, bf16 = (rates.get(gpu, {}).get(key) for key in ("copy_gb_per_s", "bf16_matmul_tflops"))
        why = memory_floor.reason(kernels, copy)
        floors = memory_floor.class_floors(kernels, copy, bf16) if why is None else pd.DataFrame(
            [{"kernel_class": "all"}])
        frames.append(floors.assign(gpu=gpu, variant=variant, phase=phase, copy_gb_per_s=copy, bf16_tflops=bf16,
                                    reason=why or ""))
    return pd.concat(frames, ignore_index=True).reindex(columns=MEMORY_FLOOR_COLUMNS)


def with_memory_floors(bench: pd.DataFrame, floors: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The bench with, per variant, the FLOP floor (the model's FLOPs at the bf16 rate), the memory floor and the
    kernel-by-kernel limit of its profiled steps (`floors`: memory_floor_rows), in ms: train_*_per_sample for the
    training step divided by its samples, sample_* for the sampling step, which is one U-Net evaluation at batch 1 as
    sample_step_ms is; and memory_floor_note, why a phase has none (memory_floor.NO_EXPORT where Nsight Compute did
    not profile it), empty where both have one."""
    frame = bench.copy()
    frame["train_flop_floor_ms_per_sample"] = frame["train_ms_per_sample"] * frame["train_fraction_of_bf16_rate"]
    frame["sample_flop_floor_ms"] = frame["sample_step_ms"] * frame["sample_fraction_of_bf16_rate"]
    steps = floors[floors["kernel_class"] == "all"].set_index(["gpu", "variant", "phase"]) if len(floors) else None
    samples = runs.set_index(["gpu", "variant"])["samples_per_step"] if len(runs) else pd.Series(dtype=float)
    columns = {"train": ("train_memory_floor_ms_per_sample", "train_kernel_limit_ms_per_sample"),
               "sample": ("sample_memory_floor_ms", "sample_kernel_limit_ms")}
    cells: dict[str, list] = {name: [] for pair in columns.values() for name in pair}
    notes = []
    for gpu, variant in zip(frame["gpu"], frame["variant"]):
        missing = []
        for phase, (floor_column, limit_column) in columns.items():
            key = (gpu, variant, phase)
            step = steps.loc[key] if steps is not None and key in steps.index else None
            why = memory_floor.NO_EXPORT if step is None else step["reason"]
            per = float(samples.get((gpu, variant), math.nan)) if phase == "train" else 1.0
            cells[floor_column].append(math.nan if why else step["memory_floor_ns"] / 1e6 / per)
            cells[limit_column].append(math.nan if why else step["limit_ns"] / 1e6 / per)
            if why:
                missing.append(f"{phase}: {why}")
        notes.append("; ".join(missing))
    for name, values in cells.items():
        frame[name] = values
    frame["memory_floor_note"] = notes
    return frame


def _bench_row(run, bf16: float) -> dict:
    where = f"{run.gpu} {run.variant}"
    if pd.isna(run.train_model_flop_per_sample):
        raise ExpectedError(f"{where}: its train.json has no FLOP count (`flops`); a training job of an older version "
                            "of the workflow wrote it: run that job again (snakemake --forcerun train)")
    ms = run.train_ms_per_sample
    per_step = run.samples_per_step
    tflops = run.train_model_flop_per_sample / ms / 1e9
    row = {
        "gpu": run.gpu, "variant": run.variant,
        "switches": describe_switches(json.loads(run.switches), json.loads(run.switches_effective)),
        "train_ms_per_sample": ms,
        "train_ms_per_sample_q1": run.train_step_q1_ms / per_step,
        "train_ms_per_sample_q3": run.train_step_q3_ms / per_step,
        "train_model_tflops": tflops,
        "train_fraction_of_bf16_rate": tflops / bf16,
        "train_executed_tflop_per_sample": run.train_executed_flop_per_sample / 1e12,
        "train_peak_gib": run.train_peak_memory_gib,
        "train_compile_s": run.train_compile_s,
        "train_compile_cache": run.train_compile_cache,
        "bare_loop_ms_per_sample": run.bare_loop_ms_per_sample,
        "memory_kind": run.memory_kind,
        **dict.fromkeys(SAMPLE_COLUMNS), **dict.fromkeys(THROUGHPUT),
    }
    step = getattr(run, "sample_step_median_ms", math.nan)
    if pd.notna(step):
        if run.sample_volume_shape != run.flop_shape:
            raise ExpectedError(f"{where}: sampled volumes of {run.sample_volume_shape} (sample.json), but trained "
                                f"on {run.flop_shape} (train.json): run both jobs on one dataset")
        forward = run.forward_model_flop
        row.update(
            sample_step_ms=step, sample_step_q1_ms=run.sample_step_q1_ms, sample_step_q3_ms=run.sample_step_q3_ms,
            sample_model_tflops=forward / step / 1e9, sample_fraction_of_bf16_rate=forward / step / 1e9 / bf16,
            sample_volume_s=run.sample_volume_s, timesteps=run.sample_timesteps,
            sample_peak_gib=run.sample_peak_memory_gib, sample_compile_s=run.sample_compile_s,
            sample_compile_cache=run.sample_compile_cache,
            **{column: getattr(run, column) for column in THROUGHPUT},
        )
    return row


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


def speedup_text(row, phase: str, reference: str) -> str:
    """A bench speed-up cell: the ratio, with its interval in brackets where paired rounds measured it."""
    ratio = getattr(row, f"{phase}_speedup_vs_{reference}")
    low, high = (getattr(row, f"{phase}_speedup_vs_{reference}_{end}", math.nan) for end in ("low", "high"))
    text = _fmt(ratio, ".2f")
    if row.variant == reference or _missing(low) or _missing(high):  # the reference itself: 1 by definition
        return text
    return f"{text} [{low:.2f}-{high:.2f}]"


def compile_text(seconds, cache) -> str:
    """A compile time as the tables write it, marked where inductor's cache held some or all of it (a cold compile
    of the same graphs takes longer; medddpm.compile_cache)."""
    text = _fmt(seconds, ".1f")
    return f"{text} ({cache} cache)" if text != "-" and cache in compile_cache.WARM else text


def bench_markdown(frame: pd.DataFrame, label: str, rates: dict, provenance: dict, run) -> str:
    """The bench table as Markdown, with the device, its measured ceilings and the FLOP floors (the model's FLOPs of
    `run`, a row of the runs table)."""
    bf16 = rates["bf16_matmul_tflops"]
    train_flop, forward_flop = run["train_model_flop_per_sample"], run["forward_model_flop"]
    kind = "a CPU" if rates.get("device_kind") == "cpu" else "a GPU"
    lines = [
        f"# Bench: {label} ({provenance.get('device_name', '?')})",
        "",
        f"Measured on {kind} with torch {provenance.get('torch', '?')}, {(provenance.get('measured_at') or '')[:10]}"
        + (f"; {rates['note']}." if rates.get("note") else "."),
        f"Device ceilings measured here: dense bf16 matrix product {bf16:.3g} TFLOP/s "
        f"({rates['matmul'][0]['n']}^3, median of {rates['matmul'][0]['time']['n']}), "
        f"device-to-device copy {rates['copy_gb_per_s']:.4g} GB/s (read + write).",
        f"Model FLOPs at {run['flop_shape'].replace('x', ' x ')}: {forward_flop / 1e12:.4g} TFLOP per U-Net "
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
            *(" / ".join(speedup_text(row, phase, reference) for phase in ("train", "sample"))
              for reference in SPEEDUP_REFERENCES),
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
        "a cold compile of the same graphs takes longer. x baseline, x tf32: the reference's time over the "
        "variant's (training sample / sampling step), from the label's paired rounds (comparison.json: the "
        "variants timed in alternating rounds, each in a process of its own) with their confidence interval in "
        "brackets, else the two separately timed jobs' medians (no interval).",
        "",
        *data_parallel_lines(frame),
    ]
    return "\n".join(lines)
