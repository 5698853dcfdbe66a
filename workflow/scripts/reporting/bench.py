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
            "bare_loop_ms_per_sample": train.get("bare_loop_ms_per_sample"),
            "sample_step_ms": None, "sample_step_q1_ms": None, "sample_step_q3_ms": None,
            "sample_model_tflops": None, "sample_fraction_of_bf16_rate": None, "sample_volume_s": None,
            "timesteps": None, "sample_peak_gib": None, "sample_compile_s": None,
            "memory_kind": train.get("peak_memory_kind"),
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


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


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
              "sample step ms", "s/volume", "peak GiB train/sample", "x baseline train/sample",
              "x tf32 train/sample", "compile s train/sample"]
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
            f"{_fmt(row.train_peak_gib, '.2f')} / {_fmt(row.sample_peak_gib, '.2f')}",
            f"{_fmt(row.train_speedup_vs_baseline, '.2f')} / {_fmt(row.sample_speedup_vs_baseline, '.2f')}",
            f"{_fmt(row.train_speedup_vs_tf32, '.2f')} / {_fmt(row.sample_speedup_vs_tf32, '.2f')}",
            f"{_fmt(row.train_compile_s, '.1f')} / {_fmt(row.sample_compile_s, '.1f')}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Training: median over the measured optimizer steps divided by the samples per step (quartiles in "
        "brackets); TFLOP/s are model FLOPs per second; bare = forward, backward and Adam on resident tensors "
        "(no loss.item(), EMA or data loading), as the upstream code was timed. Sampling: median U-Net "
        "evaluation step; s/volume = that median x T. Peak memory: "
        + ("the CUDA allocator's peak." if kind == "a GPU" else "the process's peak RSS (a CPU).")
        + " Compile: seconds spent compiling (and capturing CUDA graphs) before the timed loops; - = nothing "
        "compiled.",
        "",
    ]
    return "\n".join(lines)
