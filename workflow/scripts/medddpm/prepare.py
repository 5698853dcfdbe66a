"""Preparation shared by every whole-head data source: pairing, validation, upstream scaling, resizing, one-hot
masks, a seeded train/held-out split, and a manifest with checksums.

The transforms follow the upstream Med-DDPM whole-head loader (``NiftiPairImageGenerator`` with
``full_channel_mask=True``): per-slice min-max scaling of the image along the last axis, resizing only when the
shape differs from the target, and a two-channel one-hot mask (channel 0 = label 1 brain/head, channel 1 =
label 2 tumor). What upstream does on every ``__getitem__`` is done once here and stored, so that the loader only
applies the tensor-level transforms (see ``medddpm.dataset``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import nibabel as nib
import numpy as np
from scipy.ndimage import zoom

from errors import ExpectedError

LABELS = (0, 1, 2)
MASK_CHANNELS = ("brain/head (label 1)", "tumor (label 2)")
MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "heldout")
MANIFEST_SCHEMA = 1


class DatasetError(ExpectedError, ValueError):
    """Bad input data; the message is one line that names the offending file or folder."""


def as_shape(shape: Sequence[int]) -> tuple[int, int, int]:
    """Return `shape` as a tuple of three integers >= 2, or raise ValueError."""
    dims = tuple(int(n) for n in shape)
    if len(dims) != 3 or min(dims) < 2 or any(n != s for n, s in zip(dims, shape, strict=True)):
        raise ValueError(f"shape must be three integers >= 2, got {shape!r}")
    return dims  # type: ignore[return-value]


def write_nifti(data: np.ndarray, affine: np.ndarray, path: Path) -> str:
    """Write `data` as a gzip-compressed NIfTI-1 file with reproducible bytes; return the file's SHA-256."""
    img = nib.Nifti1Image(data, affine)
    img.header.set_xyzt_units("mm")
    # The gzip header carries a timestamp and a file name; fixing both makes equal data give equal bytes
    # whichever nibabel version or output path is used.
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0) as gz:
        gz.write(img.to_bytes())
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def staged_directory(final: Path, owned: set[str]) -> Iterator[Path]:
    """Yield an empty temporary sibling folder of `final`; it replaces `final` when the block succeeds and is
    removed when it fails. An existing `final` is replaced only if it holds nothing but the names in `owned`
    (an earlier output of the same writer), so that a mistyped path cannot wipe unrelated data."""
    if final.exists():
        foreign = sorted(p.name for p in final.iterdir() if p.name not in owned)
        if foreign:
            raise DatasetError(f"{final}: refusing to replace a folder that holds other files ({', '.join(foreign)})")
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield staging
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _digits(name: str) -> int | None:
    # Upstream asserts int("".join(digits)) equal for both members of a pair, so "case_03" pairs with "case_3".
    digits = "".join(re.findall(r"\d", name))
    return int(digits) if digits else None


def read_wholehead_pairs(root: Path) -> list[tuple[Path, Path]]:
    """Pair `root/image/*.nii.gz` with `root/mask/*.nii.gz` by sorted order, requiring equal digits in the names."""
    root = Path(root)
    listings = {}
    for sub in ("image", "mask"):
        folder = root / sub
        if not folder.is_dir():
            raise DatasetError(f"{folder}: folder not found")
        listings[sub] = sorted(folder.glob("*.nii.gz"))
        if not listings[sub]:
            raise DatasetError(f"{folder}: no *.nii.gz files")
    images, masks = listings["image"], listings["mask"]
    if len(images) != len(masks):
        raise DatasetError(f"{root}: {len(images)} files in image/ but {len(masks)} in mask/")
    for image, mask in zip(images, masks, strict=True):
        if _digits(image.name) != _digits(mask.name):
            raise DatasetError(f"{image}: digits in the name do not match its paired mask {mask.name}")
    return list(zip(images, masks, strict=True))


def _load(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a 3-D NIfTI volume as float64 data and its affine."""
    try:
        img = nib.load(path)
        data = img.get_fdata()
    except Exception as err:  # nibabel, gzip and zlib raise many unrelated types for damaged files
        detail = str(err).splitlines()[0] if str(err) else ""
        raise DatasetError(f"{path}: unreadable NIfTI file ({type(err).__name__}: {detail})") from err
    if data.ndim != 3:
        raise DatasetError(f"{path}: expected 3-D data, got shape {data.shape}")
    return data, img.affine


def _check_labels(mask: np.ndarray, path: Path) -> np.ndarray:
    """Return `mask` as uint8 labels after checking that it holds only 0, 1 and 2."""
    values = np.unique(mask)
    bad = values[~np.isin(values, LABELS)]
    if bad.size:
        shown = ", ".join(f"{v:g}" for v in bad[:10]) + (f", ... ({bad.size} values)" if bad.size > 10 else "")
        raise DatasetError(f"{path}: unknown mask labels {shown} (expected 0, 1, 2)")
    return mask.astype(np.uint8)


def scale_slices(image: np.ndarray) -> np.ndarray:
    """Min-max scale each slice along the last axis to [0, 1] independently, then map to [-1, 1].

    This reproduces upstream's ``MinMaxScaler().fit_transform(img.reshape(-1, img.shape[-1]))`` followed by
    ``x * 2 - 1``; like scikit-learn, a constant slice becomes 0 (so -1).
    """
    low = image.min(axis=(0, 1), keepdims=True)
    span = image.max(axis=(0, 1), keepdims=True) - low
    span[span < 10 * np.finfo(span.dtype).eps] = 1.0
    return (image - low) / span * 2.0 - 1.0


def _resize(data: np.ndarray, affine: np.ndarray, shape: tuple[int, int, int], order: int):
    """Resample `data` to `shape` (corner voxel centres kept fixed, as scipy's zoom does) and adapt the affine."""
    if data.shape == shape:
        return data, affine
    resized = zoom(data, [t / s for t, s in zip(shape, data.shape, strict=True)], order=order)
    step = [(s - 1) / (t - 1) for s, t in zip(data.shape, shape, strict=True)]
    return resized, affine @ np.diag([*step, 1.0])


def one_hot(labels: np.ndarray) -> np.ndarray:
    """Upstream's whole-head one-hot mask: uint8 (D, W, H, 2), channel 0 = label 1, channel 1 = label 2."""
    return np.stack([labels == 1, labels == 2], axis=-1).astype(np.uint8)


def _prepare_case(image_path: Path, mask_path: Path, shape: tuple[int, int, int]):
    """Read, validate and transform one pair; return (image float32, one-hot mask uint8, affine)."""
    image, affine = _load(image_path)
    if not np.isfinite(image).all():
        raise DatasetError(f"{image_path}: image contains {np.count_nonzero(~np.isfinite(image))} NaN/inf voxels")
    mask, _ = _load(mask_path)
    if mask.shape != image.shape:
        raise DatasetError(f"{mask_path}: mask shape {mask.shape} differs from image shape {image.shape}")
    labels = _check_labels(mask, mask_path)
    image, out_affine = _resize(scale_slices(image), affine, shape, order=1)
    labels, _ = _resize(labels, affine, shape, order=0)
    return image.astype(np.float32), one_hot(labels), out_affine


def split_cases(count: int, heldout: int, seed: int) -> dict[str, list[int]]:
    """Seeded shuffle of case indices into held-out and training cases (each list in ascending order)."""
    order = np.random.default_rng(seed).permutation(count)
    return {"train": sorted(order[heldout:].tolist()), "heldout": sorted(order[:heldout].tolist())}


def prepare_dataset(
    pairs: Sequence[tuple[Path, Path]], out_dir: Path, shape: Sequence[int], heldout: int, seed: int
) -> dict:
    """Validate and transform `pairs` into `out_dir/{train,heldout}/{image,mask}_<k>.nii.gz` plus
    `out_dir/manifest.json`; return the manifest. `out_dir` appears only when everything succeeded."""
    out_dir = Path(out_dir)
    shape = as_shape(shape)
    if not pairs:
        raise DatasetError(f"{out_dir}: no image/mask pairs to prepare")
    if heldout < 0 or len(pairs) - heldout < 1:
        source = Path(pairs[0][0]).parent.parent
        raise DatasetError(
            f"{source}: {len(pairs)} cases are too few to hold out {heldout} and keep at least 1 for training"
        )
    splits = split_cases(len(pairs), heldout, seed)
    files = []
    with staged_directory(out_dir, owned={*SPLITS, MANIFEST_NAME}) as staging:
        for split in SPLITS:
            (staging / split).mkdir()
            for k, case in enumerate(splits[split]):
                image_path, mask_path = map(Path, pairs[case])
                image, mask, affine = _prepare_case(image_path, mask_path, shape)
                for role, data in (("image", image), ("mask", mask)):
                    relative = f"{split}/{role}_{k:03d}.nii.gz"
                    files.append(
                        {
                            "path": relative,
                            "split": split,
                            "role": role,
                            "index": k,
                            "source_image": image_path.name,
                            "source_mask": mask_path.name,
                            "shape": list(data.shape),
                            "dtype": str(data.dtype),
                            "sha256": write_nifti(data, affine, staging / relative),
                        }
                    )
        manifest = {
            "schema": MANIFEST_SCHEMA,
            "shape": list(shape),
            "mask_channels": list(MASK_CHANNELS),
            "seed": seed,
            "counts": {"cases": len(pairs), **{split: len(splits[split]) for split in SPLITS}},
            "files": files,
        }
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def manifest_files(out_dir: Path, split: str, role: str) -> list[Path]:
    """Paths of the prepared `role` ("image" or "mask") files of `split`, in index order, from the manifest."""
    manifest = json.loads((Path(out_dir) / MANIFEST_NAME).read_text())
    entries = [f for f in manifest["files"] if f["split"] == split and f["role"] == role]
    return [Path(out_dir) / f["path"] for f in sorted(entries, key=lambda f: f["index"])]


def heldout_masks(out_dir: Path) -> list[Path]:
    """The prepared one-hot masks of the held-out cases (conditions for sampling), in index order."""
    return manifest_files(out_dir, "heldout", "mask")


def heldout_images(out_dir: Path) -> list[Path]:
    """The prepared images of the held-out cases (references for evaluation), in index order."""
    return manifest_files(out_dir, "heldout", "image")
