"""Quality of a variant: numeric error against float64, loss-curve deviation, image similarity vs baseline, and the
quality study's comparisons with the held-out real images (SSIM, PSNR, per-label intensity distances, lesion
contrast)."""

from __future__ import annotations

import math
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd
import torch
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

from .build import ModelSpec
from .checkpoints import load_checkpoint, load_weights_into, workload_record
from .dataset import PreparedPairs
from .diffusion import GaussianDiffusion
from .engine import Placement
from .runs import Run
from .settings import QualitySettings
from .unet import set_gather_upsampling

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


def numeric_error(model_spec: ModelSpec, quality: QualitySettings, run: Run, checkpoint: Path,
                  dataset_dir: Path) -> dict:
    """One U-Net forward and its parameter gradients, through the variant's own execution path, against float64
    on the same inputs; and the forward of a sampling step through the variant's sampling path.

    The variant's path is everything its switches change: TF32, autocast, channels-last, the fused GroupNorm + SiLU,
    checkpointing, torch.compile (forward and backward) and, for the sampling forward, CUDA graph replay. The float64
    reference is the plain network. The inputs are a real training case noised at a fixed step, cropped at its
    centre to `reference_shape` when set (the U-Net is fully convolutional, and float64 convolutions are slow: at
    128^3 one float64 forward and backward takes minutes on an H200); the weights are the trained model's (at
    initialisation the output convolution is zero, which would make every relative error undefined).
    """
    state = load_checkpoint(checkpoint, workload_record(model_spec))["model"]
    diffusion = model_spec.build(0)
    load_weights_into(diffusion, state, checkpoint, "model")  # weights of another network: one line naming the file
    inputs = fidelity_inputs(model_spec, quality, run, dataset_dir)
    reference = float64_reference(model_spec, state, run, inputs)
    placement = Placement.of(run)
    placement.model(diffusion)
    compiled = placement.compile(diffusion)
    # The sampling path: no gradients, weights as constants, compiled and/or replayed from a CUDA graph. The same
    # module serves both paths here (its gradients are dropped after the training-path check).
    errors = variant_errors(diffusion, lambda: placement.evaluation(diffusion.requires_grad_(False).eval()), run,
                            inputs, reference)
    errors["execution"]["unet_compiled"] = compiled
    return errors


def fidelity_inputs(model_spec: ModelSpec, quality: QualitySettings, run: Run, dataset_dir: Path) -> dict:
    """The fixed input of the float64 comparison: the first training case (centre-cropped to `reference_shape`
    when set), noise drawn from `quality.seed`, and the middle diffusion step."""
    case = PreparedPairs(dataset_dir, "train")[0]
    generator = torch.Generator().manual_seed(quality.seed)
    # reference_shape is (D, W, H), the file's axis order (as dataset.shape); the loader's tensors are (C, H, W, D).
    crop = None if quality.reference_shape is None else list(quality.reference_shape)[::-1]
    target = centre_crop(case["target"].unsqueeze(0), crop).contiguous()
    condition = centre_crop(case["input"].unsqueeze(0), crop).contiguous()
    noise = torch.randn(target.shape, generator=generator)
    t = torch.tensor([model_spec.diffusion.timesteps // 2], device=run.device)
    return {"target": target, "condition": condition, "noise": noise, "t": t}


def float64_reference(model_spec: ModelSpec, state: dict, run: Run, inputs: dict,
                      sampling_state: dict | None = None) -> dict:
    """The plain network in float64 at the weights `state`: the forward and all parameter gradients on `inputs`,
    and the forward alone at `sampling_state` (the weights the sampling path evaluates; default `state`)."""

    def build(weights: dict) -> GaussianDiffusion:
        diffusion = model_spec.build(0)
        diffusion.load_state_dict(weights)
        # The variant's formulation of the upsampling (the same function): under deterministic algorithms (the
        # quality study) F.interpolate's CUDA backward is refused.
        set_gather_upsampling(diffusion, run.variant.gather_upsampling)
        return diffusion.to(run.device).double()

    as64 = lambda v: v.to(run.device, torch.float64)  # noqa: E731
    reference = build(state)
    x64 = reference.q_sample(as64(inputs["target"]), inputs["t"], as64(inputs["noise"]))
    with torch.autocast(run.device.type, enabled=False):
        out64, grads64 = _forward_backward(reference, x64, as64(inputs["condition"]), inputs["t"],
                                           as64(inputs["noise"]))
        sampled64 = out64
        if sampling_state is not None:
            del reference
            with torch.no_grad():
                sampled64 = build(sampling_state).denoise(x64, as64(inputs["condition"]), inputs["t"])
    return {"out": out64, "grads": grads64, "sampled": sampled64}


def variant_errors(diffusion: GaussianDiffusion, evaluation, run: Run, inputs: dict, reference: dict) -> dict:
    """Relative errors of the variant's paths against `reference` (float64_reference): the forward and the
    gradients through `diffusion` (prepared, and compiled, as the variant trains), then the forward through the
    sampling evaluation that `evaluation()` returns (a UNetEvaluation; called after the training-path check)."""
    variant = run.variant
    placement = Placement.of(run)
    cast = placement.input
    x = diffusion.q_sample(cast(inputs["target"]), inputs["t"], cast(inputs["noise"]))
    with placement.autocast():
        out, grads = _forward_backward(diffusion, x, cast(inputs["condition"]), inputs["t"], cast(inputs["noise"]))
    diffusion.zero_grad(set_to_none=True)
    evaluate = evaluation()
    with torch.no_grad(), placement.autocast():
        sampled = evaluate(x.detach(), cast(inputs["condition"]), inputs["t"]).clone()
    flat = lambda gs: torch.cat([g.flatten().cpu().double() for g in gs])  # noqa: E731
    return {
        "forward_relative_error": relative_error(out, reference["out"]),
        "gradient_relative_error": relative_error(flat(grads), flat(reference["grads"])),
        "sampling_forward_relative_error": relative_error(sampled, reference["sampled"]),
        "execution": {"unet_compiled": variant.compile is not None, "cuda_graph": evaluate.graphs,
                      "fused_norm_act": variant.fused_norm_act, "ndhwc": variant.ndhwc,
                      "checkpointing": variant.checkpointing,
                      "autocast": variant.autocast, "channels_last": variant.channels_last},
        "reference_device": str(run.device),
        "input_shape": list(inputs["target"].shape[2:])[::-1],  # (D, W, H), as reference_shape
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
    return torch.from_numpy(channels(path))[None].to(device)


def channels(path: Path) -> np.ndarray:
    """A volume as a float32 (C, D, W, H) array: C = 1 for a 3-D file, the fourth axis of a 4-D one."""
    data = np.asarray(nib.load(str(path)).get_fdata(), dtype=np.float32)
    return np.ascontiguousarray(data[None] if data.ndim == 3 else np.moveaxis(data, 3, 0))


def ssim_sigma(kernel: int) -> float:
    """The Gaussian width that gives torchmetrics' 3D SSIM a `kernel`-voxel window: torchmetrics sizes a Gaussian
    window from sigma alone (2 * int(3.5 sigma + 0.5) + 1 voxels) and uses `kernel_size` only to pad the last axis;
    sigma = 1.5 kernel / 11 keeps the standard SSIM (11 voxels, sigma 1.5) and gives every odd window up to 43 its
    size."""
    return 1.5 * kernel / 11


def ssim3d(pred: torch.Tensor, target: torch.Tensor, kernel: int = 11) -> float:
    """3D SSIM (torchmetrics) of two (1, C, D, W, H) volumes in [-1, 1], with a Gaussian window of `kernel` voxels."""
    return float(structural_similarity_index_measure(pred, target, data_range=DATA_RANGE, kernel_size=kernel,
                                                     sigma=ssim_sigma(kernel)))


def image_similarity(samples: list[Path], references: list[Path], kernel: int,
                     device: torch.device = torch.device("cpu")) -> list[dict]:
    """3D SSIM and PSNR (torchmetrics) and the largest absolute voxel difference of each sample against its
    reference volume.

    Computed on `device`: 3D SSIM convolves five maps with a kernel^3 Gaussian, which takes minutes per 128^3
    pair on a CPU and well under a second on a GPU.
    """
    rows = []
    for sample, reference in zip(samples, references):
        pred, target = _volume(sample, device), _volume(reference, device)
        identical = bool(torch.equal(pred, target))
        psnr = None if identical else float(peak_signal_noise_ratio(pred, target, data_range=DATA_RANGE))
        rows.append({"sample": Path(sample).name, "reference": Path(reference).name,
                     "ssim": ssim3d(pred, target, kernel), "psnr_db": psnr, "max_abs_diff": float((pred - target).abs().max()), "identical": identical})
    return rows


def summarise_similarity(rows: list[dict]) -> dict:
    ssim = [r["ssim"] for r in rows]
    psnr = [r["psnr_db"] for r in rows if r["psnr_db"] is not None]
    return {
        "ssim_mean": float(np.mean(ssim)) if ssim else math.nan,
        "psnr_db_mean": float(np.mean(psnr)) if psnr else None,
        "max_abs_diff": max((r["max_abs_diff"] for r in rows if "max_abs_diff" in r), default=None),
        "identical": all(r["identical"] for r in rows),
        "per_sample": rows,
    }


# -- the quality study's comparisons with the real images ---------------------------------------------------------
# Per workload: the labels of the lesion the mask asks for, and the label of the tissue around it whose intensity
# the lesion is contrasted with (whole-head: tumour 2 in brain/head 1; BraTS: NCR 1, ED 2, ET 3 in brain 4).
LESION_LABELS = {"wholehead": ((2,), 1), "brats": ((1, 2, 3), 4)}


def label_map(mask_path: Path) -> np.ndarray:
    """The labels of a prepared one-hot mask (D, W, H, K) as a uint8 (D, W, H) array: label k where channel k - 1 is
    set (prepare.one_hot writes one channel per label 1..K), 0 where none is."""
    one_hot = np.asarray(nib.load(str(mask_path)).dataobj)
    labels = (np.argmax(one_hot, axis=-1) + 1).astype(np.uint8)
    labels[one_hot.max(axis=-1) == 0] = 0
    return labels


def wasserstein_by_label(sample: np.ndarray, real: np.ndarray, labels: np.ndarray) -> dict[int, float]:
    """Per label of `labels` (D, W, H): the 1-Wasserstein distance (scipy) between the intensity distributions of
    `sample` and `real` (C, D, W, H) inside that label, averaged over channels."""
    # Imported here: scipy.stats takes most of a second to load, and only the quality study's runs compare with the
    # real images (the quality and comparison jobs import this module too).
    from scipy.stats import wasserstein_distance

    distances = {}
    for label in np.unique(labels):
        inside = labels == label
        distances[int(label)] = float(np.mean([wasserstein_distance(s[inside], r[inside])
                                               for s, r in zip(sample, real)]))
    return distances


def region_contrast(volume: np.ndarray, labels: np.ndarray, lesion: tuple[int, ...], tissue: int) -> list[float] | None:
    """Per channel of `volume` (C, D, W, H): mean intensity inside the lesion labels minus the mean inside the tissue
    label; None when the mask has no lesion or no tissue voxel."""
    inside, around = np.isin(labels, lesion), labels == tissue
    if not inside.any() or not around.any():
        return None
    return [float(c[inside].mean() - c[around].mean()) for c in volume]


def compare_with_real(samples: list[Path], images: list[Path], masks: list[Path], workload: str, kernel: int,
                      device: torch.device = torch.device("cpu")) -> dict:
    """Each sample against the held-out real image of its mask: 3D SSIM, PSNR, the Wasserstein distance of the
    intensities per label (and their mean over the labels), and the lesion contrast of sample and image."""
    rows = image_similarity(samples, images, kernel, device)
    lesion, tissue = LESION_LABELS[workload]
    for row, sample, image, mask in zip(rows, samples, images, masks):
        labels, pred, real = label_map(mask), channels(sample), channels(image)
        distances = wasserstein_by_label(pred, real, labels)
        row["wasserstein_by_label"] = {str(label): value for label, value in distances.items()}
        row["wasserstein"] = float(np.mean(list(distances.values())))
        row["lesion_contrast"] = region_contrast(pred, labels, lesion, tissue)
        row["lesion_contrast_real"] = region_contrast(real, labels, lesion, tissue)
    summary = summarise_similarity(rows)
    contrasts = [(np.mean(r["lesion_contrast"]), np.mean(r["lesion_contrast_real"])) for r in rows
                 if r["lesion_contrast"] is not None]
    summary.update(
        wasserstein_mean=float(np.mean([r["wasserstein"] for r in rows])),
        lesion_contrast_mean=float(np.mean([c[0] for c in contrasts])) if contrasts else None,
        lesion_contrast_real_mean=float(np.mean([c[1] for c in contrasts])) if contrasts else None,
        lesion_labels=list(lesion), tissue_label=tissue,
    )
    return summary
