"""A quality study's result files with known numbers, in the layout medddpm.study writes and
data/reference/<workload>/<label>/study/ ships (run.json, comparison.json, losses.csv, slice.npy per run)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from planning.set_manifest import seal, set_folder

SWITCHES = {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False, "autocast": None}
VARIANT_SWITCHES = {"baseline": {}, "tf32": {"cudnn_tf32": True, "matmul_tf32": True},
                    "channels_last": {"channels_last": True},
                    "tf32_channels_last": {"cudnn_tf32": True, "matmul_tf32": True, "channels_last": True},
                    "bf16": {"cudnn_tf32": True, "matmul_tf32": True, "autocast": "bfloat16"}}


def write_study_run(root: Path, gpu: str, variant: str, seed: int, wasserstein: float, ssim: float = 0.6,
                    steps: int = 40, device_name: str = "NVIDIA A100-SXM4-80GB", effective: bool = True,
                    ssim_vs_baseline: float = 0.95, loss_offset: float = 0.0) -> list[Path]:
    """One run's four files under root/<gpu>/study/<variant>/seed<seed>/ (root: a workload's folder); returns their
    paths."""
    folder = Path(root) / gpu / "study" / variant / f"seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    switches = SWITCHES | VARIANT_SWITCHES[variant]
    provenance = {"device_type": "cuda", "device_name": device_name, "emulated_on_cpu": False,
                  "measured_at": "2026-12-01T10:00:00+00:00", "hardware_label": gpu, "variant": variant,
                  "switches": switches, "switches_effective": {name: effective for name in switches}}
    vs_real = {"ssim_mean": ssim, "psnr_db_mean": 20.0 + seed, "wasserstein_mean": wasserstein, "max_abs_diff": 1.5,
               "lesion_contrast_mean": 0.2, "lesion_contrast_real_mean": 0.25, "identical": False, "per_sample": []}
    run = {"provenance": provenance, "parameters": 40226433, "volume_shape": [32, 32, 32], "timesteps": 250,
           "wall_seconds": 70.0,
           "settings": {}, "vs_real": vs_real,
           "training": {"optimizer_steps": steps, "seconds": 60.0, "compile_seconds": None, "final_loss": 0.1,
                        "ms_per_step": 40.0},
           "sampling": {"seconds_per_volume": 1.5},
           "numeric": {"forward_relative_error": 1e-3, "gradient_relative_error": 2e-3,
                       "sampling_forward_relative_error": 1e-3}}
    (folder / "run.json").write_text(json.dumps(run))
    reference = variant == "baseline" and seed == 0
    comparison = {"variant": variant, "seed": seed, "reference": {"variant": "baseline", "seed": 0},
                  "vs_baseline": {"ssim_mean": 1.0 if reference else ssim_vs_baseline,
                                  "psnr_db_mean": None if reference else 30.0,
                                  "max_abs_diff": 0.0 if reference else 0.5, "identical": reference},
                  "loss_curve": {"mean_abs_deviation": 0.0 if reference else 0.01}}
    (folder / "comparison.json").write_text(json.dumps(comparison))
    steps_index = np.arange(steps)
    pd.DataFrame({"step": steps_index, "loss": 0.8 * np.exp(-steps_index / 10) + 0.1 + loss_offset}).to_csv(
        folder / "losses.csv", index=False)
    ramp = np.linspace(-1, 1, 32 * 32, dtype=np.float32).reshape(32, 32)
    np.save(folder / "slice.npy", np.stack([ramp * (0.5 + 0.1 * seed), ramp]))
    return [folder / name for name in ("run.json", "comparison.json", "losses.csv", "slice.npy")]


def write_study(root: Path, gpu: str, distances: dict[tuple[str, int], float], **kwargs) -> list[Path]:
    """Runs with the given distances to the real images, {(variant, seed): distance}; a shipped set's (root under
    data/reference/) with the set's manifest.sha256, as every shipped set carries one."""
    paths = [path for (variant, seed), value in distances.items()
             for path in write_study_run(root, gpu, variant, seed, value, **kwargs)]
    if set_folder(paths[0]) is not None:
        seal(set_folder(paths[0]))
    return paths
