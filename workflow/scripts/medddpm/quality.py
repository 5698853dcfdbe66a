"""Quality of a variant: numeric error against float64, loss-curve deviation and image similarity vs baseline."""

from __future__ import annotations

import math
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd
import torch
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

from .build import Workload
from .checkpoints import load_checkpoint, load_weights_into, workload_record
from .dataset import PreparedPairs
from .diffusion import GaussianDiffusion
from .runs import Run
from .sampling import UNetEvaluation
from .settings import QualitySettings
from .variants import autocast, compile_model, prepare_input, prepare_model

DATA_RANGE = 2.0  # images live in [-1, 1]


def relative_error(value: torch.Tensor, reference: torch.Tensor) -> float | None:
    """||value - reference|| / ||reference||, or None where the reference is exactly zero (undefined)."""
    norm = torch.linalg.vector_norm(reference.double())
    if norm == 0:
        return None
    return float(torch.linalg.vector_norm(value.double() - reference.double()) / norm)


def _forward_backward(diffusion: GaussianDiffusion, x, condition, t, noise):
    diffusion.zero_grad(set_to_none=True)
    out = diffusion.denoise(x, condition, t)
    (noise - out).abs().mean().backward()
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in diffusion.parameters()]
    return out.detach(), grads


def numeric_error(workload: Workload, quality: QualitySettings, run: Run, checkpoint: Path, dataset_dir: Path) -> dict:
    """One U-Net forward and its parameter gradients, through the variant's own execution path, against float64
    on the same inputs; and the forward of a sampling step through the variant's sampling path.

    The variant's path is everything its switches change: TF32, autocast, channels-last, the fused GroupNorm + SiLU,
    checkpointing, torch.compile (forward and backward) and, for the sampling forward, CUDA graph replay. The float64
    reference is the plain network. The inputs are a real training case noised at a fixed step, cropped at its
    centre to `reference_shape` when set (the U-Net is fully convolutional, and float64 convolutions are slow: at
    128^3 one float64 forward and backward takes minutes on an H200); the weights are the trained model's (at
    initialisation the output convolution is zero, which would make every relative error undefined).
    """
    state = load_checkpoint(checkpoint, workload_record(workload))["model"]
    case = PreparedPairs(dataset_dir, "train")[0]
    generator = torch.Generator().manual_seed(quality.seed)
    # reference_shape is (D, W, H), the file's axis order (as dataset.shape); the loader's tensors are (C, H, W, D).
    crop = None if quality.reference_shape is None else list(quality.reference_shape)[::-1]
    target = centre_crop(case["target"].unsqueeze(0), crop).contiguous()
    condition = centre_crop(case["input"].unsqueeze(0), crop).contiguous()
    noise = torch.randn(target.shape, generator=generator)
    t = torch.tensor([workload.diffusion.timesteps // 2], device=run.device)
    variant = run.variant

    def build() -> GaussianDiffusion:
        diffusion = workload.build(0)
        load_weights_into(diffusion, state, checkpoint, "model")
        return diffusion.to(run.device)

    reference = build().double()
    as64 = lambda v: v.to(run.device, torch.float64)  # noqa: E731
    x64 = reference.q_sample(as64(target), t, as64(noise))
    with torch.autocast(run.device.type, enabled=False):
        out64, grads64 = _forward_backward(reference, x64, as64(condition), t, as64(noise))
    del reference

    diffusion = build()
    prepare_model(diffusion, variant, run.device)
    compiled = compile_model(diffusion, variant)
    cast = lambda v: prepare_input(v.to(run.device), variant)  # noqa: E731
    x = diffusion.q_sample(cast(target), t, cast(noise))
    with autocast(variant, run.device):
        out, grads = _forward_backward(diffusion, x, cast(condition), t, cast(noise))
    # The sampling path: no gradients, weights as constants, compiled and/or replayed from a CUDA graph.
    diffusion.zero_grad(set_to_none=True)
    diffusion.requires_grad_(False).eval()
    evaluate = UNetEvaluation(diffusion, variant, run.device)
    with torch.no_grad(), autocast(variant, run.device):
        sampled = evaluate(x, cast(condition), t).clone()
    flat = lambda gs: torch.cat([g.flatten().cpu().double() for g in gs])  # noqa: E731
    return {
        "forward_relative_error": relative_error(out, out64),
        "gradient_relative_error": relative_error(flat(grads), flat(grads64)),
        "sampling_forward_relative_error": relative_error(sampled, out64),
        "execution": {"unet_compiled": compiled, "cuda_graph": evaluate.graphs,
                      "fused_norm_act": variant.fused_norm_act, "checkpointing": variant.checkpointing,
                      "autocast": variant.autocast, "channels_last": variant.channels_last},
        "reference_device": str(run.device),
        "input_shape": list(target.shape[2:])[::-1],  # (D, W, H), as reference_shape
    }


def centre_crop(volume: torch.Tensor, shape: list[int] | None) -> torch.Tensor:
    """The centred `shape` window of the three spatial axes of a (B, C, ...) tensor, in the tensor's axis order (all
    of it when `shape` is None)."""
    if shape is None:
        return volume
    starts = [(full - size) // 2 for full, size in zip(volume.shape[2:], shape)]
    return volume[..., starts[0]:starts[0] + shape[0], starts[1]:starts[1] + shape[1], starts[2]:starts[2] + shape[2]]


def loss_curve_deviation(steps_csv: Path, baseline_csv: Path) -> dict:
    """Per-step difference of the training losses from the baseline's (same seed, same data)."""
    steps = pd.read_csv(steps_csv)
    baseline = pd.read_csv(baseline_csv)
    merged = steps.merge(baseline, on="step", suffixes=("", "_baseline"))
    diff = (merged["loss"] - merged["loss_baseline"]).abs()
    relative = diff / merged["loss_baseline"].abs()
    return {
        "loss_steps_compared": int(len(merged)),
        "loss_abs_deviation_max": float(diff.max()),
        "loss_abs_deviation_mean": float(diff.mean()),
        "loss_rel_deviation_max": float(relative.max()),
    }


def _volume(path: Path, device: torch.device) -> torch.Tensor:
    """A volume as a (1, C, D, W, H) tensor: C = 1 for a 3-D file, the fourth axis (BraTS's modalities) of a 4-D
    one."""
    data = torch.from_numpy(np.asarray(nib.load(str(path)).get_fdata(), dtype=np.float32))
    channels = data[None] if data.ndim == 3 else data.permute(3, 0, 1, 2)
    return channels[None].to(device)


def image_similarity(samples: list[Path], references: list[Path], kernel: int,
                     device: torch.device = torch.device("cpu")) -> list[dict]:
    """3D SSIM and PSNR (torchmetrics) of each sample against its reference volume.

    Computed on `device`: 3D SSIM convolves five maps with a kernel^3 Gaussian, which takes minutes per 128^3
    pair on a CPU and well under a second on a GPU.
    """
    rows = []
    for sample, reference in zip(samples, references):
        pred, target = _volume(sample, device), _volume(reference, device)
        identical = bool(torch.equal(pred, target))
        psnr = None if identical else float(peak_signal_noise_ratio(pred, target, data_range=DATA_RANGE))
        ssim = float(
            structural_similarity_index_measure(pred, target, data_range=DATA_RANGE, kernel_size=kernel)
        )
        rows.append({"sample": Path(sample).name, "reference": Path(reference).name, "ssim": ssim,
                     "psnr_db": psnr, "identical": identical})
    return rows


def summarise_similarity(rows: list[dict]) -> dict:
    ssim = [r["ssim"] for r in rows]
    psnr = [r["psnr_db"] for r in rows if r["psnr_db"] is not None]
    return {
        "ssim_mean": float(np.mean(ssim)) if ssim else math.nan,
        "psnr_db_mean": float(np.mean(psnr)) if psnr else None,
        "identical": all(r["identical"] for r in rows),
        "per_sample": rows,
    }
