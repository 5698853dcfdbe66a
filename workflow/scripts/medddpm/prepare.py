"""Preparation shared by every data source: validation, a seeded train/held-out split, files with their affine, and
a manifest with checksums; and the whole-head reader (pairing, upstream scaling, resizing, two-channel masks).

The whole-head transforms follow the upstream Med-DDPM loader (``NiftiPairImageGenerator`` with
``full_channel_mask=True``): per-slice min-max scaling of the image along the last axis (or, as an option, one
min-max over the whole volume), resizing only when the shape differs from the target, and a two-channel one-hot
mask (channel 0 = label 1 brain/head, channel 1 = label 2 tumor). What upstream does on every ``__getitem__`` is
done once here and stored, so that the loader only applies the tensor-level transforms (see ``medddpm.dataset``).
BraTS has its own reader (``medddpm.brats``) on the same preparation.

Every prepared file keeps the orientation and spacing of its source: the volume is never reoriented, and its
affine (adjusted for a resize or a crop) is written as both the qform and the sform, so that a viewer places the
prepared image, its mask and every volume sampled from that mask on the source's grid.
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
from dataclasses import dataclass, field
from pathlib import Path

import nibabel as nib
import numpy as np

from jobio.errors import ExpectedError

LABELS = (0, 1, 2)
MASK_CHANNELS = ("brain/head (label 1)", "tumor (label 2)")
MANIFEST_NAME = "manifest.json"
SPLITS = ("train", "heldout")
MANIFEST_SCHEMA = 2
SCALINGS = ("slice", "volume")
# What the loader makes of the one-hot mask's 0 and 1: upstream maps the whole-head mask to {-1, +1}.
WHOLEHEAD_CONDITION = (-1.0, 1.0)
# Role and modality words that a file name may carry besides its case id (compared lower-case).
ROLE_WORDS = frozenset({"image", "images", "img", "mask", "masks", "msk", "seg", "label", "labels",
                        "t1", "t1ce", "t2", "flair", "t1n", "t1c", "t2w", "t2f"})
NIFTI_SUFFIXES = (".nii.gz", ".nii")
# Largest difference (mm) between the affines of two files of one case that still counts as the same grid.
AFFINE_TOLERANCE = 1e-3


class DatasetError(ExpectedError, ValueError):
    """Bad input data; the message is one line that names the offending file or folder."""


@dataclass(frozen=True)
class Case:
    """One case of a raw dataset: its id and its files by role (whole-head: image, mask; BraTS: the modalities
    and seg)."""

    name: str
    files: dict[str, Path] = field(hash=False)

    @property
    def root(self) -> Path:
        """The dataset folder (every layout keeps a case's files one folder below it)."""
        return Path(next(iter(self.files.values()))).parent.parent


def as_shape(shape: Sequence[int]) -> tuple[int, int, int]:
    """Return `shape` as a tuple of three integers >= 2, or raise ValueError."""
    dims = tuple(int(n) for n in shape)
    if len(dims) != 3 or min(dims) < 2 or any(n != s for n, s in zip(dims, shape, strict=True)):
        raise ValueError(f"shape must be three integers >= 2, got {shape!r}")
    return dims  # type: ignore[return-value]


def write_nifti(data: np.ndarray, affine: np.ndarray, path: Path) -> str:
    """Write `data` as a gzip-compressed NIfTI-1 file with reproducible bytes; return the file's SHA-256.

    The affine goes into both the qform and the sform (code 1, scanner), so that every viewer reads the same grid."""
    img = nib.Nifti1Image(data, affine)
    img.set_qform(affine, code=1)
    img.set_sform(affine, code=1)
    img.header.set_xyzt_units("mm")
    # The gzip header carries a timestamp and a file name; fixing both makes equal data give equal bytes
    # whichever nibabel version or output path is used.
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0) as gz:
        gz.write(img.to_bytes())
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_shape(path: str | Path) -> list[int]:
    """(D, W, H) of a prepared volume, in the file's axis order (the dataset's `shape`)."""
    return [int(n) for n in nib.load(str(path)).shape[:3]]


def to_image_axes(volume) -> np.ndarray:
    """A (1, C, H, W, D) tensor in the loader's axis order (medddpm.dataset) -> a float32 array in the file's axis
    order: (D, W, H) for one channel, (D, W, H, C) for several (BraTS's modalities, as the prepared images store
    them). The inverse of the loader's axis swap, so `write_nifti` stores a sample on its mask's grid."""
    image = volume[0].float().permute(3, 2, 1, 0)
    if image.shape[-1] == 1:
        image = image[..., 0]
    return image.contiguous().cpu().numpy()


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


def nifti_files(folder: Path) -> list[Path]:
    """The NIfTI files (*.nii.gz, *.nii) directly in `folder`, sorted by name."""
    return sorted(p for p in Path(folder).iterdir() if p.is_file() and p.name.lower().endswith(NIFTI_SUFFIXES))


def strip_nifti_suffix(name: str) -> str:
    return re.sub(r"\.nii(\.gz)?$", "", name, flags=re.IGNORECASE)


def case_id(name: str) -> tuple:
    """A file's case id: the words of its name (split at _ - . and spaces), without the extension and without role
    or modality words (image, mask, seg, t1, flair, ...), numbers compared by value.

    `sample_3.nii.gz` in image/ and in mask/ are case ("sample", 3); so are `sample_03` and `sample_3`;
    `BraTS2021_00014_t1` and `BraTS2021_00014_seg` are case ("brats2021", 14). Upstream compared every digit of the
    two names joined into one number, which fails on the digit of "t1"."""
    words = [w.lower() for w in re.split(r"[_\-. ]+", strip_nifti_suffix(name)) if w]
    return tuple(int(w) if w.isdigit() else w for w in words if w not in ROLE_WORDS)


def _show_id(key: tuple) -> str:
    return "_".join(map(str, key)) or "(no id)"


def read_wholehead_cases(root: Path) -> list[Case]:
    """Pair `root/image/*.nii.gz` with `root/mask/*.nii.gz` by case id (`case_id`), in the sorted order of the
    image files. A file without a partner, or two files of one case in one folder, is an error naming them."""
    root = Path(root)
    by_id: dict[str, dict[tuple, Path]] = {}
    for sub in ("image", "mask"):
        folder = root / sub
        if not folder.is_dir():
            raise DatasetError(f"{folder}: folder not found")
        files = nifti_files(folder)
        if not files:
            raise DatasetError(f"{folder}: empty folder (no *.nii.gz files)")
        by_id[sub] = {}
        for path in files:
            key = case_id(path.name)
            if key in by_id[sub]:
                raise DatasetError(f"{path}: same case id {_show_id(key)} as {by_id[sub][key].name} in {sub}/")
            by_id[sub][key] = path
    images, masks = by_id["image"], by_id["mask"]
    unpaired = [f"image/{p.name} has no mask" for k, p in images.items() if k not in masks]
    unpaired += [f"mask/{p.name} has no image" for k, p in masks.items() if k not in images]
    if unpaired:
        counts = f"{len(images)} files in image/ but {len(masks)} in mask/; " if len(images) != len(masks) else ""
        shown = ", ".join(unpaired[:3]) + (f", ... ({len(unpaired)} unpaired)" if len(unpaired) > 3 else "")
        raise DatasetError(f"{root}: {counts}unpaired files (paired by case id): {shown}")
    return [Case(_show_id(key), {"image": images[key], "mask": masks[key]}) for key in images]


def load_volume(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a 3-D NIfTI volume in its stored orientation as float64 data and its affine."""
    try:
        img = nib.load(path)
        data = img.get_fdata()
    except Exception as err:  # nibabel, gzip and zlib raise many unrelated types for damaged files
        detail = str(err).splitlines()[0] if str(err) else ""
        raise DatasetError(f"{path}: unreadable NIfTI file ({type(err).__name__}: {detail})") from err
    if data.ndim == 4 and data.shape[3] == 1:
        data = data[..., 0]  # a singleton fourth axis still holds one volume
    if data.ndim != 3:
        raise DatasetError(f"{path}: expected 3-D data, got shape {data.shape}")
    return data, img.affine


def check_finite(image: np.ndarray, path: Path) -> None:
    if not np.isfinite(image).all():
        raise DatasetError(f"{path}: image contains {np.count_nonzero(~np.isfinite(image))} NaN/inf voxels")


def check_not_constant(image: np.ndarray, path: Path) -> None:
    """A blank image (every voxel one value) would be scaled to a constant -1 without a word: refused."""
    if image.size and float(image.min()) == float(image.max()):
        raise DatasetError(
            f"{path}: image is blank (every voxel is {float(image.min()):g}), so scaling would make it all -1; "
            "fix: replace it with the real scan, or remove the case (its image and mask) from the folder"
        )


def check_not_blank_mask(labels: np.ndarray, path: Path, what: str) -> None:
    """A mask without one labelled voxel would condition every sample on nothing (as an all-zero image would be scaled
    to a constant): refused, as a blank image is."""
    if labels.size and not labels.any():
        raise DatasetError(
            f"{path}: mask is blank (every voxel is 0, background), so it conditions on no {what}; fix: use the mask "
            "that belongs to this case, or remove the case (its image and mask) from the folder"
        )


def check_same_grid(data: np.ndarray, affine: np.ndarray, path: Path, ref_data: np.ndarray, ref_affine: np.ndarray,
                    ref_path: Path) -> None:
    """`path` must have the shape and the affine of `ref_path` (the image its mask belongs to, or a case's T1)."""
    if data.shape != ref_data.shape:
        raise DatasetError(f"{path}: shape {data.shape} differs from {ref_path.name} {ref_data.shape}")
    difference = float(np.abs(affine - ref_affine).max())
    if difference > AFFINE_TOLERANCE:
        raise DatasetError(
            f"{path}: affine differs from that of {ref_path.name} (largest difference {difference:.4g}); the files "
            f"of one case must lie on one grid"
        )


def check_labels(mask: np.ndarray, path: Path, allowed: Sequence[int], convention: str, hint: str = "") -> np.ndarray:
    """Return `mask` as uint8 labels after checking that it holds only `allowed` values."""
    values = np.unique(mask)
    bad = values[~np.isin(values, allowed)]
    if bad.size:
        shown = ", ".join(f"{v:g}" for v in bad[:10]) + (f", ... ({bad.size} values)" if bad.size > 10 else "")
        expected = ", ".join(map(str, allowed))
        raise DatasetError(f"{path}: unknown mask labels {shown} (expected {expected}: {convention}){hint}")
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


def scale_volume(image: np.ndarray) -> np.ndarray:
    """Min-max scale the whole volume to [-1, 1] (one minimum and maximum; a constant volume becomes -1)."""
    low = image.min()
    span = image.max() - low
    if span < 10 * np.finfo(np.float64).eps:
        span = 1.0
    return (image - low) / span * 2.0 - 1.0


def _resize(data: np.ndarray, affine: np.ndarray, shape: tuple[int, int, int], order: int):
    """Resample `data` to `shape` (corner voxel centres kept fixed, as scipy's zoom does) and adapt the affine."""
    if data.shape == shape:
        return data, affine
    # Imported here: every training, sampling and quality job reads prepared cases through this module, and only
    # preparation resamples (scipy.ndimage is a quarter of a second of each job's start-up).
    from scipy.ndimage import zoom

    resized = zoom(data, [t / s for t, s in zip(shape, data.shape, strict=True)], order=order)
    step = [(s - 1) / (t - 1) for s, t in zip(data.shape, shape, strict=True)]
    return resized, affine @ np.diag([*step, 1.0])


def one_hot(labels: np.ndarray, values: Sequence[int] = (1, 2)) -> np.ndarray:
    """One channel per label in `values`, uint8 (D, W, H, len(values)); upstream's whole-head mask is (1, 2)."""
    return np.stack([labels == value for value in values], axis=-1).astype(np.uint8)


@dataclass(frozen=True)
class WholeHeadReader:
    """Prepares one whole-head case: per-slice (upstream) or per-volume scaling, resize only when the shape
    differs, two-channel one-hot mask."""

    scaling: str = "slice"

    def __post_init__(self) -> None:
        if self.scaling not in SCALINGS:
            raise ValueError(f"scaling must be one of {SCALINGS}, got {self.scaling!r}")

    def description(self) -> dict:
        return {"workload": "wholehead", "image_channels": ["image"], "mask_channels": list(MASK_CHANNELS),
                "condition_values": list(WHOLEHEAD_CONDITION), "scaling": self.scaling}

    def prepare(self, case: Case, shape: tuple[int, int, int]):
        """Read, validate and transform one pair; return (image float32, one-hot mask uint8, affine)."""
        image_path, mask_path = case.files["image"], case.files["mask"]
        image, affine = load_volume(image_path)
        check_finite(image, image_path)
        check_not_constant(image, image_path)
        mask, mask_affine = load_volume(mask_path)
        check_same_grid(mask, mask_affine, mask_path, image, affine, image_path)
        brats = " (BraTS labels? use dataset.source: brats)" if np.isin(np.unique(mask), (0, 1, 2, 3, 4)).all() else ""
        labels = check_labels(mask, mask_path, LABELS, "background, brain/head, tumor", brats)
        check_not_blank_mask(labels, mask_path, "brain/head or tumor")
        scaled = scale_slices(image) if self.scaling == "slice" else scale_volume(image)
        image, out_affine = _resize(scaled, affine, shape, order=1)
        labels, _ = _resize(labels, affine, shape, order=0)
        return image.astype(np.float32), one_hot(labels), out_affine


def split_cases(count: int, heldout: int, seed: int) -> dict[str, list[int]]:
    """Seeded shuffle of case indices into held-out and training cases (each list in ascending order)."""
    order = np.random.default_rng(seed).permutation(count)
    return {"train": sorted(order[heldout:].tolist()), "heldout": sorted(order[:heldout].tolist())}


def _as_cases(cases: Sequence) -> list[Case]:
    """Cases as they are; (image, mask) path pairs as whole-head cases."""
    return [c if isinstance(c, Case) else Case(_show_id(case_id(Path(c[0]).name)),
                                               {"image": Path(c[0]), "mask": Path(c[1])}) for c in cases]


def prepare_dataset(cases: Sequence, out_dir: Path, shape: Sequence[int], heldout: int, seed: int,
                    reader=None) -> dict:
    """Validate and transform `cases` with `reader` (default: whole-head, per-slice scaling) into
    `out_dir/{train,heldout}/{image,mask}_<k>.nii.gz` plus `out_dir/manifest.json`; return the manifest.
    `out_dir` appears only when everything succeeded."""
    out_dir = Path(out_dir)
    shape = as_shape(shape)
    reader = reader or WholeHeadReader()
    cases = _as_cases(cases)
    if not cases:
        raise DatasetError(f"{out_dir}: no cases to prepare")
    if heldout < 0 or len(cases) - heldout < 1:
        raise DatasetError(
            f"{cases[0].root}: {len(cases)} cases are too few to hold out {heldout} and keep at least 1 for training"
        )
    splits = split_cases(len(cases), heldout, seed)
    files = []
    with staged_directory(out_dir, owned={*SPLITS, MANIFEST_NAME}) as staging:
        for split in SPLITS:
            (staging / split).mkdir()
            for k, index in enumerate(splits[split]):
                case = cases[index]
                image, mask, affine = reader.prepare(case, shape)
                sources = {role: path.relative_to(case.root).as_posix() for role, path in case.files.items()}
                for role, data in (("image", image), ("mask", mask)):
                    relative = f"{split}/{role}_{k:03d}.nii.gz"
                    entry = {"path": relative, "split": split, "role": role, "index": k, "case": case.name,
                             "sources": sources}
                    if set(case.files) == {"image", "mask"}:
                        entry |= {"source_image": case.files["image"].name, "source_mask": case.files["mask"].name}
                    files.append(
                        entry | {"shape": list(data.shape), "dtype": str(data.dtype),
                                 "sha256": write_nifti(data, affine, staging / relative)}
                    )
        manifest = {
            "schema": MANIFEST_SCHEMA,
            "shape": list(shape),
            **reader.description(),
            "seed": seed,
            "counts": {"cases": len(cases), **{split: len(splits[split]) for split in SPLITS}},
            "files": files,
        }
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(out_dir: Path) -> dict:
    return json.loads((Path(out_dir) / MANIFEST_NAME).read_text())


def manifest_files(out_dir: Path, split: str, role: str) -> list[Path]:
    """Paths of the prepared `role` ("image" or "mask") files of `split`, in index order, from the manifest."""
    manifest = read_manifest(out_dir)
    entries = [f for f in manifest["files"] if f["split"] == split and f["role"] == role]
    return [Path(out_dir) / f["path"] for f in sorted(entries, key=lambda f: f["index"])]


def condition_values(out_dir: Path) -> tuple[float, float]:
    """What the loader makes of a one-hot 0 and 1 for this prepared dataset (whole-head {-1, +1}, BraTS {0, 1});
    manifests written before the key existed are whole-head (a migration shim for datasets prepared before manifest
    schema 2, 2026-11-30: remove it once none is left; preparing a dataset again takes minutes)."""
    low, high = read_manifest(out_dir).get("condition_values", WHOLEHEAD_CONDITION)
    return float(low), float(high)


def heldout_masks(out_dir: Path) -> list[Path]:
    """The prepared one-hot masks of the held-out cases (conditions for sampling), in index order."""
    return manifest_files(out_dir, "heldout", "mask")


def heldout_images(out_dir: Path) -> list[Path]:
    """The prepared images of the held-out cases (references for evaluation), in index order."""
    return manifest_files(out_dir, "heldout", "image")
