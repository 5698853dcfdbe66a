"""Reads the per-(hardware label, variant) result files into tidy pandas tables."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def run_key(path: Path) -> tuple[str, str]:
    """(hardware label, variant) of results/<gpu>/<variant>/<file>."""
    path = Path(path)
    return path.parent.parent.name, path.parent.name


def origin(path: Path) -> str:
    """Whether a result file was measured by this checkout or shipped under data/reference/."""
    return "shipped reference" if "reference" in Path(path).parts[:-3] else "measured here"


def device_of(provenance: dict) -> str:
    """Device name from a provenance dict ('NVIDIA H200', the host CPU, ...), marking emulation."""
    name = provenance.get("device_name")
    if not name:
        kind = provenance.get("device_type", "?")
        name = f"CPU ({provenance['host_cpu']})" if kind == "cpu" and provenance.get("host_cpu") else kind
    return name + (" (emulated on CPU)" if provenance.get("emulated_on_cpu") else "")


def date_of(provenance: dict) -> str:
    return (provenance.get("measured_at") or "")[:10]


def _source(provenance: dict, path: Path) -> str:
    """'<device>, <origin>, <date>': what every panel of a run says about where its data came from."""
    return ", ".join(part for part in (device_of(provenance), origin(path), date_of(provenance)) if part)


def end_to_end(train_files: list[Path], sample_files: list[Path]) -> pd.DataFrame:
    """One row per (gpu, variant): training time per sample, sampling time per step and per volume, peak memory."""
    rows = {}
    for path in train_files:
        data = json.loads(Path(path).read_text())
        rows[run_key(path)] = {
            "gpu": run_key(path)[0],
            "variant": run_key(path)[1],
            "device": data["provenance"].get("device_name"),
            "source": _source(data["provenance"], path),
            "parameters": data["parameters"],
            "train_ms_per_sample": data["train_ms_per_sample"],
            "train_step_q1_ms": data["step_time"]["q1_ms"],
            "train_step_q3_ms": data["step_time"]["q3_ms"],
            "train_step_median_ms": data["step_time"]["median_ms"],
            "train_steps_measured": data["step_time"]["n"],
            "train_peak_memory_gib": data["peak_memory_bytes"] / 2**30,
            "memory_kind": data["peak_memory_kind"],
        }
    for path in sample_files:
        data = json.loads(Path(path).read_text())
        rows.setdefault(run_key(path), {"gpu": run_key(path)[0], "variant": run_key(path)[1]}).update(
            sample_step_median_ms=data["step_time"]["median_ms"],
            sample_step_q1_ms=data["step_time"]["q1_ms"],
            sample_step_q3_ms=data["step_time"]["q3_ms"],
            sample_volume_s=data["volume_seconds_estimate"],
            sample_timesteps=data["timesteps"],
            sample_chain_complete=data["chain_complete"],
            sample_peak_memory_gib=data["peak_memory_bytes"] / 2**30,
        )
    return pd.DataFrame(list(rows.values())).sort_values(["gpu", "variant"]).reset_index(drop=True)


def quality(quality_files: list[Path]) -> pd.DataFrame:
    rows = []
    for path in quality_files:
        data = json.loads(Path(path).read_text())
        gpu, variant = run_key(path)
        rows.append(
            {
                "gpu": gpu,
                "variant": variant,
                "source": _source(data["provenance"], path),
                "forward_rel_error": data["numeric"]["forward_relative_error"],
                "gradient_rel_error": data["numeric"]["gradient_relative_error"],
                "loss_abs_deviation_max": data["loss_curve"]["loss_abs_deviation_max"],
                "ssim_vs_real": data["vs_real"]["ssim_mean"],
                "psnr_vs_real_db": data["vs_real"]["psnr_db_mean"],
                "ssim_vs_baseline": data["vs_baseline"]["ssim_mean"],
                "psnr_vs_baseline_db": data["vs_baseline"]["psnr_db_mean"],
                "identical_to_baseline": data["vs_baseline"]["identical"],
            }
        )
    return pd.DataFrame(rows).sort_values(["gpu", "variant"]).reset_index(drop=True)


def loss_curves(step_files: list[Path]) -> pd.DataFrame:
    frames = []
    for path in step_files:
        gpu, variant = run_key(path)
        frame = pd.read_csv(path)
        frames.append(frame.assign(gpu=gpu, variant=variant))
    return pd.concat(frames, ignore_index=True)
