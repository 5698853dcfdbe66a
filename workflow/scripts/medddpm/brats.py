"""The BraTS 2021 source of Med-DDPM's second configuration: both layouts in which BraTS folders occur, read and
prepared as upstream prepares them.

Layouts (file names `BraTS2021_<id>_<role>.nii.gz`, role one of t1, t1ce, t2, flair, seg):
- raw (what users download): one folder per case, `<root>/BraTS2021_<id>/BraTS2021_<id>_<role>.nii.gz`,
  240 x 240 x 155 at 1 mm, raw intensities, seg labels {0 background, 1 NCR, 2 ED, 4 ET};
- preprocessed (upstream's repository, after its `preprocess_brats_data.py`): one folder per role,
  `<root>/<role>/BraTS2021_<id>_<role>.nii.gz`, 192 x 192 x 144, float64 images already in [-1, 1], LPS, seg
  already relabelled to {0, 1, 2, 3, 4}.
A folder holds one layout; `layout: auto` finds which, and a folder holding both is refused.

Preparation (upstream's preprocessing, then its loader's ``label2masks``):
- crop or pad every volume about its centre to the target shape as torchio's ``CropOrPad`` does (of an odd
  difference the larger half comes off, or goes on, at the start; padding is 0 in raw files, -1 in preprocessed
  images, whose background is -1);
- raw images: each modality min-max rescaled to [-1, 1] over the cropped volume (torchio's ``RescaleIntensity``);
  preprocessed images are taken as they are (upstream's loader reads them unchanged) after checking their range;
- raw seg: label 4 (ET) becomes 3, then background voxels where the rescaled T1 is above -1 become 4 (brain);
  a preprocessed seg is already relabelled;
- four one-hot channels in {0, 1}: labels 1, 2, 3, 4 (upstream's BraTS model takes them without the {-1, +1}
  mapping of the whole-head mask); the image is the four modalities [t1, t1ce, t2, flair] on the fourth axis.
Volumes are read in their stored orientation, never reoriented; the crop moves the affine's origin only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .prepare import (
    Case,
    DatasetError,
    check_finite,
    check_labels,
    check_not_blank_mask,
    check_not_constant,
    check_same_grid,
    load_volume,
    nifti_files,
    one_hot,
    scale_volume,
)

MODALITIES = ("t1", "t1ce", "t2", "flair")
SEG = "seg"
ROLES = (*MODALITIES, SEG)
LAYOUTS = ("raw", "preprocessed")
RAW_LABELS = (0, 1, 2, 4)
PREPARED_LABELS = (0, 1, 2, 3, 4)
LABEL_NAMES = "background, NCR, ED, ET, brain"
MASK_CHANNELS = ("NCR (label 1)", "ED (label 2)", "ET (label 3; 4 in raw BraTS)", "brain (label 4)")
CONDITION_VALUES = (0.0, 1.0)
BRATS_SHAPE = (192, 192, 144)  # upstream's CropOrPad target
RAW_SHAPE = (240, 240, 155)  # BraTS 2021 as distributed
FILE_NAME = re.compile(r"^(?P<case>.+)_(?P<role>t1ce|t1|t2|flair|seg)\.nii(?:\.gz)?$", re.IGNORECASE)
# Largest excess over [-1, 1] that a preprocessed image may have (float rounding of upstream's rescale).
RANGE_TOLERANCE = 1e-5


def _expected(role: str = "<role>") -> str:
    return f"BraTS2021_<id>_{role}.nii.gz"


def _parse(path: Path) -> tuple[str, str]:
    match = FILE_NAME.match(path.name)
    if not match:
        raise DatasetError(f"{path}: not a BraTS file name (expected {_expected('{t1,t1ce,t2,flair,seg}')})")
    return match["case"], match["role"].lower()


def _subfolders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def detect_layout(root: Path) -> str:
    """"raw" (one folder per case) or "preprocessed" (one folder per role), from what `root` holds. A folder with
    both, NIfTI files directly in `root`, or no BraTS files at all is an error naming them."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: folder not found")
    loose = nifti_files(root)
    if loose:
        raise DatasetError(
            f"{loose[0]}: a NIfTI file directly in the BraTS folder; expected one folder per case "
            f"(raw: <case>/{_expected()}) or per role (preprocessed: t1/ t1ce/ t2/ flair/ seg/)"
        )
    folders = _subfolders(root)
    by_role = [p for p in folders if p.name.lower() in ROLES and nifti_files(p)]
    by_case = [p for p in folders if p.name.lower() not in ROLES and nifti_files(p)]
    if by_role and by_case:
        raise DatasetError(
            f"{root}: mixes preprocessed BraTS (per-modality folder {by_role[0].name}/, e.g. "
            f"{nifti_files(by_role[0])[0].name}) and raw BraTS (per-case folder {by_case[0].name}/, e.g. "
            f"{nifti_files(by_case[0])[0].name}); keep one layout per folder"
        )
    if by_role:
        return "preprocessed"
    if by_case:
        return "raw"
    if any(p.name.lower() in ROLES for p in folders):
        return "preprocessed"  # empty modality folders: reading names the first of them
    raise DatasetError(
        f"{root}: empty folder (no BraTS files; expected <case>/{_expected()} or <role>/{_expected()})"
    )


def _raw_cases(root: Path) -> dict[str, dict[str, Path]]:
    cases: dict[str, dict[str, Path]] = {}
    for folder in _subfolders(root):
        files = nifti_files(folder)
        if not files:
            raise DatasetError(f"{folder}: empty folder (a raw BraTS case folder holds {_expected()} files)")
        for path in files:
            case, role = _parse(path)
            if case != folder.name:
                raise DatasetError(f"{path}: case {case} in the folder of case {folder.name}")
            if role in cases.setdefault(case, {}):
                raise DatasetError(f"{path}: a second {role} file of case {case} (also {cases[case][role].name})")
            cases[case][role] = path
    return cases


def _preprocessed_cases(root: Path) -> dict[str, dict[str, Path]]:
    cases: dict[str, dict[str, Path]] = {}
    for role in ROLES:
        folder = root / role
        if not folder.is_dir():
            raise DatasetError(f"{folder}: folder not found (preprocessed BraTS has t1/ t1ce/ t2/ flair/ seg/)")
        files = nifti_files(folder)
        if not files:
            raise DatasetError(f"{folder}: empty folder (expected {_expected(role)} files)")
        for path in files:
            case, found = _parse(path)
            if found != role:
                raise DatasetError(f"{path}: a {found} file in the {role}/ folder")
            if role in cases.setdefault(case, {}):
                raise DatasetError(f"{path}: a second {role} file of case {case} (also {cases[case][role].name})")
            cases[case][role] = path
    return cases


def read_case_list(path: Path) -> list[str]:
    """Case names, one per line (upstream's `selected_samples.csv`: `BraTS2021_00014`); blank lines and lines
    starting with # are skipped, repeated names kept once."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: case list not found")
    # utf-8-sig: a byte-order mark (a spreadsheet's export) is not part of the first name.
    names = [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines()]
    names = list(dict.fromkeys(n for n in names if n and not n.startswith("#")))
    if not names:
        raise DatasetError(f"{path}: the case list names no case")
    return names


def read_brats_cases(root: Path, layout: str = "auto", case_list: Path | None = None) -> tuple[str, list[Case]]:
    """(layout, cases in name order) of a BraTS folder; `case_list` keeps only the cases it names. A case read
    without one of its five files is an error naming the missing file; one the case list leaves out is not read."""
    root = Path(root)
    if layout not in ("auto", *LAYOUTS):
        raise ValueError(f"layout must be auto, raw or preprocessed, got {layout!r}")
    found = detect_layout(root)
    if layout != "auto" and layout != found:
        raise DatasetError(f"{root}: holds {found} BraTS files, but the config says dataset.layout: {layout}")
    cases = _raw_cases(root) if found == "raw" else _preprocessed_cases(root)
    names = sorted(cases)
    if case_list is not None:
        listed = read_case_list(Path(case_list))
        missing = [name for name in listed if name not in cases]
        if missing:
            raise DatasetError(f"{case_list}: case {missing[0]} not found in {root}"
                               + (f" ({len(missing)} listed cases missing)" if len(missing) > 1 else ""))
        names = sorted(listed)
    # Only the cases read must be complete: a case the list leaves out may lack files.
    for case in names:
        files = cases[case]
        for role in ROLES:
            if role not in files:
                where = root / case if found == "raw" else root / role
                present = next(iter(files.values()))
                raise DatasetError(
                    f"{where / f'{case}_{role}.nii.gz'}: missing ({role} of case {case}, which has {present.name})"
                )
    return found, [Case(name, {role: cases[name][role] for role in ROLES}) for name in names]


def crop_or_pad_bounds(size: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
    """Per axis, the source index of the output's first voxel: positive when cropping, negative when padding; of
    an odd difference, the larger half at the start (torchio's CropOrPad: ceil(difference / 2))."""
    return tuple(math.ceil((n - t) / 2) if n >= t else -math.ceil((t - n) / 2) for n, t in zip(size, shape))


def crop_or_pad(data: np.ndarray, shape: Sequence[int], fill: float) -> np.ndarray:
    """`data` cropped or padded (with `fill`) about its centre to `shape` on its first three axes."""
    starts = crop_or_pad_bounds(data.shape[:3], shape)
    out = np.full((*shape, *data.shape[3:]), fill, dtype=data.dtype)
    source, target = [], []
    for start, n, t in zip(starts, data.shape[:3], shape):
        low, high = max(start, 0), min(start + t, n)
        source.append(slice(low, high))
        target.append(slice(low - start, high - start))
    out[tuple(target)] = data[tuple(source)]
    return out


def shifted_affine(affine: np.ndarray, starts: Sequence[int]) -> np.ndarray:
    """The affine of a crop whose voxel 0 is source voxel `starts`: same orientation and spacing, moved origin."""
    shift = np.eye(4)
    shift[:3, 3] = starts
    return affine @ shift


@dataclass(frozen=True)
class BratsReader:
    """Prepares one BraTS case of the given layout (module docstring): (modalities float32 (D, W, H, 4), one-hot
    uint8 (D, W, H, 4), affine)."""

    layout: str

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")

    def description(self) -> dict:
        return {"workload": "brats", "layout": self.layout, "image_channels": list(MODALITIES),
                "mask_channels": list(MASK_CHANNELS), "condition_values": list(CONDITION_VALUES)}

    def prepare(self, case: Case, shape: tuple[int, int, int]):
        raw = self.layout == "raw"
        reference = case.files["t1"]
        volumes = {}
        for role in ROLES:
            path = case.files[role]
            data, affine = load_volume(path)
            if volumes:
                check_same_grid(data, affine, path, volumes["t1"][0], volumes["t1"][1], reference)
            volumes[role] = (data, affine)
        starts = crop_or_pad_bounds(volumes["t1"][0].shape, shape)
        images = []
        for role in MODALITIES:
            path, data = case.files[role], volumes[role][0]
            check_finite(data, path)
            check_not_constant(data, path)
            if raw:
                images.append(scale_volume(crop_or_pad(data, shape, 0.0)))
                continue
            low, high = float(data.min()), float(data.max())
            if low < -1 - RANGE_TOLERANCE or high > 1 + RANGE_TOLERANCE:
                raise DatasetError(
                    f"{path}: values in [{low:.4g}, {high:.4g}], but preprocessed BraTS images lie in [-1, 1] "
                    f"(a raw file among preprocessed ones? raw BraTS has one folder per case)"
                )
            images.append(crop_or_pad(np.clip(data, -1.0, 1.0), shape, -1.0))
        seg_path = case.files[SEG]
        if raw:
            hint = (" (3 is a relabelled ET: a preprocessed file among raw ones? preprocessed BraTS has one folder "
                    "per modality)") if 3 in np.unique(volumes[SEG][0]) else ""
            labels = check_labels(volumes[SEG][0], seg_path, RAW_LABELS, "raw BraTS: background, NCR, ED, ET", hint)
            labels = crop_or_pad(labels, shape, 0)
            relabelled = np.where(labels == 4, 3, labels).astype(np.uint8)
            relabelled[(relabelled == 0) & (images[0] > -1.0)] = 4
        else:
            labels = check_labels(volumes[SEG][0], seg_path, PREPARED_LABELS, f"preprocessed BraTS: {LABEL_NAMES}")
            relabelled = crop_or_pad(labels, shape, 0)
        check_not_blank_mask(relabelled, seg_path, "tumour region or brain")
        image = np.stack(images, axis=-1).astype(np.float32)
        return image, one_hot(relabelled, (1, 2, 3, 4)), shifted_affine(volumes["t1"][1], starts)
