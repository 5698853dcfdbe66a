"""The BraTS 2021 source: both layouts written here as small files with BraTS's names, dtypes, labels and
orientation, prepared, and checked value by value against the upstream rules computed independently below."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import nibabel as nib
import numpy as np
import pytest
import torch

from medddpm.brats import BratsReader, detect_layout, read_brats_cases
from medddpm.dataset import PreparedPairs
from medddpm.prepare import DatasetError, prepare_dataset

MODALITIES = ("t1", "t1ce", "t2", "flair")
TARGET = (12, 12, 10)
# An odd crop on x (15 -> 12), an odd pad on y (9 -> 12), an even crop on z (12 -> 10).
RAW = (15, 9, 12)
# BraTS's own orientation: x and y flipped (LPS), 1 mm voxels.
RAW_AFFINE = np.array([[-1.0, 0, 0, 7.0], [0, -1.0, 0, 4.0], [0, 0, 1.0, -5.0], [0, 0, 0, 1]])
PRE_AFFINE = np.array([[-1.0, 0, 0, 5.0], [0, -1.0, 0, 6.0], [0, 0, 1.0, -4.0], [0, 0, 0, 1]])


def read(path: Path) -> np.ndarray:
    return np.asarray(nib.load(path).dataobj)


def save(data: np.ndarray, affine: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(data, affine), path)


def raw_case(seed: int, shape=RAW) -> dict[str, np.ndarray]:
    """Skull-stripped raw intensities (0 outside a brain box; int16 and float dtypes, as in the wild) and a seg
    with BraTS's raw labels {0, 1, 2, 4} inside the brain."""
    rng = np.random.default_rng(seed)
    brain = np.zeros(shape, bool)
    brain[2:-2, 1:-1, 2:-2] = True
    volumes = {}
    for role, dtype, scale in (("t1", np.int16, 900), ("t1ce", np.float32, 1500.5), ("t2", np.int16, 2000),
                               ("flair", np.float64, 700.25)):
        values = rng.uniform(50, scale, shape) * brain
        volumes[role] = values.astype(dtype)
    seg = np.zeros(shape, np.uint8)
    centre = tuple(n // 2 for n in shape)
    seg[centre[0] - 2:centre[0] + 2, centre[1] - 2:centre[1] + 2, centre[2] - 2:centre[2] + 2] = 2
    seg[centre[0] - 1:centre[0] + 1, centre[1] - 1:centre[1] + 1, centre[2] - 1:centre[2] + 1] = 4
    seg[centre] = 1
    volumes["seg"] = seg
    return volumes


def preprocessed_case(seed: int, shape=TARGET) -> dict[str, np.ndarray]:
    """As upstream's preprocessed files: float64 images in [-1, 1] (background -1), seg relabelled {0, ..., 4}."""
    rng = np.random.default_rng(seed)
    brain = np.zeros(shape, bool)
    brain[1:-1, 2:-2, 1:-1] = True
    volumes = {role: np.where(brain, rng.uniform(-0.9, 1.0, shape), -1.0) for role in MODALITIES}
    for role in MODALITIES:
        volumes[role][tuple(n // 2 for n in shape)] = 1.0
    seg = np.where(brain, 4, 0).astype(np.uint8)
    seg[4:6, 4:7, 3:6] = 2
    seg[5, 5, 4] = 3
    seg[4, 5, 4] = 1
    volumes["seg"] = seg
    return volumes


def write_raw_layout(root: Path, cases: dict[str, dict[str, np.ndarray]], affine=RAW_AFFINE) -> Path:
    for case, volumes in cases.items():
        for role, data in volumes.items():
            save(data, affine, root / case / f"{case}_{role}.nii.gz")
    return root


def write_preprocessed_layout(root: Path, cases: dict[str, dict[str, np.ndarray]], affine=PRE_AFFINE) -> Path:
    for case, volumes in cases.items():
        for role, data in volumes.items():
            save(data, affine, root / role / f"{case}_{role}.nii.gz")
    return root


# --- the upstream rules, computed independently, voxel by voxel ---------------------------------------------------


def torchio_start(size: int, target: int) -> int:
    """Source index of the first output voxel under torchio's CropOrPad: it removes (crop) or adds (pad)
    ceil(difference / 2) voxels at the start."""
    difference = size - target
    if difference >= 0:
        return (difference + 1) // 2
    return -((-difference + 1) // 2)


def centred(volume: np.ndarray, fill: float) -> np.ndarray:
    starts = [torchio_start(n, t) for n, t in zip(volume.shape, TARGET)]
    out = np.full(TARGET, fill, dtype=np.float64)
    for i, j, k in np.ndindex(*TARGET):
        a, b, c = i + starts[0], j + starts[1], k + starts[2]
        if 0 <= a < volume.shape[0] and 0 <= b < volume.shape[1] and 0 <= c < volume.shape[2]:
            out[i, j, k] = volume[a, b, c]
    return out


def rescaled(volume: np.ndarray) -> np.ndarray:
    """torchio's RescaleIntensity((-1, 1)): one minimum and maximum over the (cropped) volume."""
    values = list(volume.flat)
    low, high = min(values), max(values)
    out = np.empty(volume.shape)
    for index in np.ndindex(*volume.shape):
        out[index] = (volume[index] - low) / (high - low) * 2 - 1
    return out


def upstream_raw(volumes: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(modalities (D, W, H, 4), one-hot (D, W, H, 4)) of a raw case by upstream's preprocessing and loader."""
    images = [rescaled(centred(volumes[role].astype(np.float64), 0.0)) for role in MODALITIES]
    seg = centred(volumes["seg"].astype(np.float64), 0.0)
    labels = np.zeros(TARGET, int)
    for index in np.ndindex(*TARGET):
        label = int(seg[index])
        if label == 4:
            label = 3
        elif label == 0 and images[0][index] > -1:
            label = 4
        labels[index] = label
    one_hot = np.zeros((*TARGET, 4), np.uint8)
    for index in np.ndindex(*TARGET):
        if labels[index]:
            one_hot[(*index, labels[index] - 1)] = 1
    return np.stack(images, axis=-1), one_hot


def prepared_case(out: Path, manifest: dict, case: str) -> tuple[np.ndarray, np.ndarray, nib.Nifti1Image]:
    entries = {f["role"]: f for f in manifest["files"] if f["case"] == case}
    image = nib.load(out / entries["image"]["path"])
    return np.asarray(image.dataobj), read(out / entries["mask"]["path"]), image


# --- raw layout ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def raw_prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("brats") / "raw"
    cases = {f"BraTS2021_{n:05d}": raw_case(n) for n in (14, 16, 46)}
    write_raw_layout(root, cases)
    layout, found = read_brats_cases(root)
    out = root.parent / "prepared"
    return cases, out, prepare_dataset(found, out, TARGET, heldout=1, seed=0, reader=BratsReader(layout))


def test_raw_layout_is_prepared_as_upstream_prepares_it(raw_prepared):
    cases, out, manifest = raw_prepared
    assert manifest["workload"] == "brats" and manifest["layout"] == "raw"
    assert manifest["image_channels"] == list(MODALITIES) and len(manifest["mask_channels"]) == 4
    assert manifest["condition_values"] == [0.0, 1.0]
    for case, volumes in cases.items():
        image, one_hot, _ = prepared_case(out, manifest, case)
        expected_image, expected_one_hot = upstream_raw(volumes)
        assert image.shape == (*TARGET, 4) and image.dtype == np.float32
        assert one_hot.shape == (*TARGET, 4) and one_hot.dtype == np.uint8
        np.testing.assert_allclose(image, expected_image, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(one_hot, expected_one_hot)
        assert {int(v) for v in np.unique(one_hot)} == {0, 1} and one_hot.sum(-1).max() == 1
        assert one_hot[..., 2].any() and one_hot[..., 3].any()  # ET (4 -> 3) and brain (-> 4) both present


def test_raw_layout_keeps_orientation_spacing_and_world_position(raw_prepared):
    cases, out, manifest = raw_prepared
    image = prepared_case(out, manifest, "BraTS2021_00014")[2]
    assert nib.aff2axcodes(image.affine) == nib.aff2axcodes(RAW_AFFINE) == ("L", "P", "S")
    np.testing.assert_array_equal(nib.affines.voxel_sizes(image.affine), [1, 1, 1])
    starts = [torchio_start(n, t) for n, t in zip(RAW, TARGET)]
    assert starts == [2, -2, 1]
    for corner in np.ndindex(2, 2, 2):
        voxel = np.array(corner) * (np.array(TARGET) - 1)
        np.testing.assert_allclose(nib.affines.apply_affine(image.affine, voxel),
                                   nib.affines.apply_affine(RAW_AFFINE, voxel + starts))
    mask = nib.load(out / next(f["path"] for f in manifest["files"] if f["role"] == "mask"))
    np.testing.assert_array_equal(mask.affine, nib.load(out / manifest["files"][0]["path"]).affine)


def test_loader_gives_upstream_brats_tensors(raw_prepared):
    cases, out, manifest = raw_prepared
    dataset = PreparedPairs(out, "train")
    item = dataset[0]
    # (D, W, H) = (12, 12, 10) comes out as (10, 12, 12), four channels each; the mask stays in {0, 1}.
    assert item["input"].shape == item["target"].shape == (4, 10, 12, 12)
    assert set(item["input"].unique().tolist()) == {0.0, 1.0}
    image = read(out / "train" / "image_000.nii.gz")
    one_hot = read(out / "train" / "mask_000.nii.gz")
    for channel in range(4):
        assert torch.equal(item["target"][channel], torch.from_numpy(image[..., channel]).permute(2, 1, 0))
        assert torch.equal(item["input"][channel], torch.from_numpy(one_hot[..., channel]).float().permute(2, 1, 0))


# --- preprocessed layout ------------------------------------------------------------------------------------------


def test_preprocessed_layout_is_taken_as_it_is(tmp_path):
    cases = {f"BraTS2021_{n:05d}": preprocessed_case(n) for n in (529, 1306)}
    root = write_preprocessed_layout(tmp_path / "brats2021", cases)
    layout, found = read_brats_cases(root)
    assert layout == "preprocessed" and [c.name for c in found] == sorted(cases)
    out = tmp_path / "prepared"
    manifest = prepare_dataset(found, out, TARGET, heldout=1, seed=0, reader=BratsReader(layout))
    assert manifest["layout"] == "preprocessed"
    for case, volumes in cases.items():
        image, one_hot, img = prepared_case(out, manifest, case)
        for channel, role in enumerate(MODALITIES):
            np.testing.assert_array_equal(image[..., channel], volumes[role].astype(np.float32))
        for channel in range(4):
            np.testing.assert_array_equal(one_hot[..., channel], volumes["seg"] == channel + 1)
        np.testing.assert_array_equal(img.affine, PRE_AFFINE)  # LPS kept, nothing reoriented
        assert nib.aff2axcodes(img.affine) == ("L", "P", "S")


def test_preprocessed_volumes_of_another_shape_are_padded_with_their_background(tmp_path):
    volumes = preprocessed_case(3, shape=(12, 11, 10))
    root = write_preprocessed_layout(tmp_path / "pre", {"BraTS2021_00003": volumes, "BraTS2021_00004": volumes})
    layout, found = read_brats_cases(root, layout="preprocessed")
    out = tmp_path / "prepared"
    manifest = prepare_dataset(found, out, TARGET, heldout=1, seed=0, reader=BratsReader(layout))
    image, one_hot, img = prepared_case(out, manifest, "BraTS2021_00003")
    assert (image[:, 0] == -1).all() and not one_hot[:, 0].any()  # one voxel of padding at the start of y
    np.testing.assert_array_equal(image[:, 1:, :, 0], volumes["t1"].astype(np.float32))
    np.testing.assert_allclose(nib.affines.apply_affine(img.affine, [0, 1, 0]), PRE_AFFINE[:3, 3])


# --- layouts, case lists ------------------------------------------------------------------------------------------


def test_layout_detected_or_taken_from_the_config(tmp_path):
    raw = write_raw_layout(tmp_path / "raw", {"BraTS2021_00001": raw_case(1)})
    pre = write_preprocessed_layout(tmp_path / "pre", {"BraTS2021_00001": preprocessed_case(1)})
    assert detect_layout(raw) == "raw" and detect_layout(pre) == "preprocessed"
    assert read_brats_cases(raw, layout="raw")[0] == "raw"
    with pytest.raises(DatasetError, match="holds raw BraTS files, but the config says dataset.layout: preprocessed"):
        read_brats_cases(raw, layout="preprocessed")


def test_case_list_selects_cases(tmp_path):
    root = write_raw_layout(tmp_path / "raw", {f"BraTS2021_{n:05d}": raw_case(n) for n in (1, 2, 3)})
    listing = tmp_path / "selected_samples.csv"
    listing.write_text("# upstream's list\nBraTS2021_00003\n\nBraTS2021_00001\nBraTS2021_00003\n")
    assert [c.name for c in read_brats_cases(root, case_list=listing)[1]] == ["BraTS2021_00001", "BraTS2021_00003"]
    listing.write_text("\ufeffBraTS2021_00003\n")  # a spreadsheet's byte-order mark is not part of the first name
    assert [c.name for c in read_brats_cases(root, case_list=listing)[1]] == ["BraTS2021_00003"]
    listing.write_text("BraTS2021_00001\nBraTS2021_00009\n")
    with pytest.raises(DatasetError, match=r"selected_samples\.csv: case BraTS2021_00009 not found"):
        read_brats_cases(root, case_list=listing)


@pytest.mark.parametrize("layout", ["raw", "preprocessed"])
def test_an_incomplete_case_the_list_leaves_out_is_not_read(tmp_path, layout):
    """A folder with one incomplete case (its flair deleted) is refused without a case list, and read with a list
    that leaves that case out; a list that names it still refuses it, naming the missing file."""
    write = write_raw_layout if layout == "raw" else write_preprocessed_layout
    make = raw_case if layout == "raw" else preprocessed_case
    root = write(tmp_path / layout, {f"BraTS2021_{n:05d}": make(n) for n in (1, 2, 3)})
    (next(root.rglob("BraTS2021_00002_flair.nii.gz"))).unlink()
    with pytest.raises(DatasetError, match=r"BraTS2021_00002_flair\.nii\.gz: missing \(flair of case BraTS2021_00002"):
        read_brats_cases(root)
    listing = tmp_path / "selected_samples.csv"
    listing.write_text("BraTS2021_00001\nBraTS2021_00003\n")
    assert [c.name for c in read_brats_cases(root, case_list=listing)[1]] == ["BraTS2021_00001", "BraTS2021_00003"]
    listing.write_text("BraTS2021_00002\n")
    with pytest.raises(DatasetError, match=r"BraTS2021_00002_flair\.nii\.gz: missing"):
        read_brats_cases(root, case_list=listing)


# --- what real folders contain: one line naming the file, nothing written -----------------------------------------


def _raw(root, n=2):
    return write_raw_layout(root, {f"BraTS2021_{k:05d}": raw_case(k) for k in range(n)})


def _missing_modality_raw(root):
    _raw(root)
    (root / "BraTS2021_00001" / "BraTS2021_00001_flair.nii.gz").unlink()
    return "BraTS2021_00001/BraTS2021_00001_flair.nii.gz: missing"


def _missing_modality_preprocessed(root):
    write_preprocessed_layout(root, {f"BraTS2021_{k:05d}": preprocessed_case(k) for k in range(2)})
    (root / "t2" / "BraTS2021_00000_t2.nii.gz").unlink()
    return "t2/BraTS2021_00000_t2.nii.gz: missing"


def _seg_without_images(root):
    write_preprocessed_layout(root, {f"BraTS2021_{k:05d}": preprocessed_case(k) for k in range(2)})
    save(preprocessed_case(7)["seg"], PRE_AFFINE, root / "seg" / "BraTS2021_00007_seg.nii.gz")
    return "BraTS2021_00007_t1.nii.gz: missing"


def _four_d(root):
    _raw(root)
    t2 = raw_case(1)["t2"]
    save(np.stack([t2, t2], axis=-1), RAW_AFFINE, root / "BraTS2021_00001" / "BraTS2021_00001_t2.nii.gz")
    return "BraTS2021_00001_t2.nii.gz: expected 3-D data"


def _relabelled_seg_in_raw_layout(root):
    _raw(root)
    seg = raw_case(1)["seg"]
    seg[seg == 4] = 3
    save(seg, RAW_AFFINE, root / "BraTS2021_00001" / "BraTS2021_00001_seg.nii.gz")
    return "BraTS2021_00001_seg.nii.gz: unknown mask labels 3"


def _unknown_label_preprocessed(root):
    volumes = preprocessed_case(0)
    volumes["seg"][0, 0, 0] = 5
    write_preprocessed_layout(root, {"BraTS2021_00000": volumes, "BraTS2021_00001": preprocessed_case(1)})
    return "BraTS2021_00000_seg.nii.gz: unknown mask labels 5"


def _blank_seg_preprocessed(root):
    volumes = preprocessed_case(0)
    volumes["seg"][...] = 0  # neither tumour nor brain: the samples would be conditioned on nothing
    write_preprocessed_layout(root, {"BraTS2021_00000": volumes, "BraTS2021_00001": preprocessed_case(1)})
    return "BraTS2021_00000_seg.nii.gz: mask is blank (every voxel is 0, background)"


def _shape_mismatch(root):
    _raw(root)
    save(raw_case(1)["seg"][:, :, :-1], RAW_AFFINE, root / "BraTS2021_00001" / "BraTS2021_00001_seg.nii.gz")
    return "BraTS2021_00001_seg.nii.gz: shape"


def _affine_mismatch(root):
    _raw(root)
    flipped = RAW_AFFINE.copy()
    flipped[0, 0] = 1.0
    save(raw_case(1)["seg"], flipped, root / "BraTS2021_00001" / "BraTS2021_00001_seg.nii.gz")
    return "BraTS2021_00001_seg.nii.gz: affine differs"


def _empty_root(root):
    return "empty folder"


def _empty_case_folder(root):
    _raw(root)
    (root / "BraTS2021_00002").mkdir()
    return "BraTS2021_00002: empty folder"


def _empty_modality_folder(root):
    write_preprocessed_layout(root, {f"BraTS2021_{k:05d}": preprocessed_case(k) for k in range(2)})
    for path in (root / "flair").iterdir():
        path.unlink()
    return "flair: empty folder"


def _mixture(root):
    _raw(root)
    write_preprocessed_layout(root, {"BraTS2021_00005": preprocessed_case(5)})
    return "mixes preprocessed BraTS (per-modality folder flair/"


def _raw_file_among_preprocessed(root):
    write_preprocessed_layout(root, {f"BraTS2021_{k:05d}": preprocessed_case(k) for k in range(2)})
    save(raw_case(1, TARGET)["t1ce"], PRE_AFFINE, root / "t1ce" / "BraTS2021_00001_t1ce.nii.gz")
    return "t1ce/BraTS2021_00001_t1ce.nii.gz: values in"


def _foreign_name(root):
    _raw(root)
    save(raw_case(1)["t1"], RAW_AFFINE, root / "BraTS2021_00001" / "BraTS2021_00001_t1_copy.nii.gz")
    return "BraTS2021_00001_t1_copy.nii.gz: not a BraTS file name"


def _case_in_the_wrong_folder(root):
    _raw(root)
    folder = root / "BraTS2021_00001"
    (folder / "BraTS2021_00001_t2.nii.gz").rename(folder / "BraTS2021_00011_t2.nii.gz")
    return "BraTS2021_00011_t2.nii.gz: case BraTS2021_00011 in the folder of case BraTS2021_00001"


def _modality_in_the_wrong_folder(root):
    write_preprocessed_layout(root, {f"BraTS2021_{k:05d}": preprocessed_case(k) for k in range(2)})
    (root / "t2" / "BraTS2021_00001_t2.nii.gz").rename(root / "t2" / "BraTS2021_00001_flair.nii.gz")
    return "t2/BraTS2021_00001_flair.nii.gz: a flair file in the t2/ folder"


def _loose_file(root):
    _raw(root)
    save(raw_case(1)["t1"], RAW_AFFINE, root / "BraTS2021_00001_t1.nii.gz")
    return "BraTS2021_00001_t1.nii.gz: a NIfTI file directly in the BraTS folder"


def _nan(root):
    _raw(root)
    t1ce = raw_case(0)["t1ce"]
    t1ce[3, 3, 3] = np.nan
    save(t1ce, RAW_AFFINE, root / "BraTS2021_00000" / "BraTS2021_00000_t1ce.nii.gz")
    return "BraTS2021_00000_t1ce.nii.gz: image contains 1 NaN/inf"


@pytest.mark.parametrize("make", [
    _missing_modality_raw, _missing_modality_preprocessed, _seg_without_images, _four_d,
    _relabelled_seg_in_raw_layout, _unknown_label_preprocessed, _blank_seg_preprocessed, _shape_mismatch,
    _affine_mismatch, _empty_root, _empty_case_folder, _empty_modality_folder, _mixture, _raw_file_among_preprocessed,
    _foreign_name, _case_in_the_wrong_folder, _modality_in_the_wrong_folder, _loose_file, _nan,
])
def test_bad_folders_raise_one_clear_line_and_write_nothing(make, tmp_path):
    root = tmp_path / "brats"
    root.mkdir()
    named = make(root)
    parent = tmp_path / "results"
    parent.mkdir()
    with pytest.raises(DatasetError) as caught:
        layout, cases = read_brats_cases(root)
        prepare_dataset(cases, parent / "prepared", TARGET, heldout=1, seed=0, reader=BratsReader(layout))
    message = str(caught.value)
    assert named in message and "\n" not in message, message
    assert list(parent.iterdir()) == []


# --- config/brats.yaml: what differs from the embedded default ------------------------------------------------


def _leaves(mapping: dict, prefix: tuple = ()):
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


def _value(mapping: dict, key_path: tuple):
    for key in key_path:
        mapping = mapping.get(key, {}) if isinstance(mapping, dict) else {}
    return mapping


def test_the_brats_overlay_sets_only_what_differs_from_the_defaults():
    """A value of config/brats.yaml is BraTS's own, or one that config/paper.yaml changes (the overlay serves alone
    and after paper.yaml); none repeats what config.yaml already sets and paper.yaml leaves alone."""
    import yaml

    repo = Path(__file__).resolve().parents[1]
    default, paper, brats = (yaml.safe_load((repo / name).read_text())
                             for name in ("config.yaml", "config/paper.yaml", "config/brats.yaml"))
    repeated = [".".join(key_path) for key_path, value in _leaves(brats)
                if value == _value(default, key_path) and _value(paper, key_path) in ({}, value)]
    assert repeated == []


# --- synthetic BraTS (for timing the workload without the data) ---------------------------------------------------


def test_synthetic_brats_is_raw_brats_2021(tmp_path):
    from medddpm.synthetic_brats import raw_shape, write_synthetic_brats

    assert raw_shape((192, 192, 144)) == (240, 240, 155)
    shape = (32, 32, 16)
    write_synthetic_brats(tmp_path / "a", 2, shape, seed=0)
    write_synthetic_brats(tmp_path / "b", 2, shape, seed=0)
    files = sorted(p.relative_to(tmp_path / "a").as_posix() for p in (tmp_path / "a").rglob("*.nii.gz"))
    assert files == [f"BraTS2021_{n:05d}/BraTS2021_{n:05d}_{role}.nii.gz" for n in range(2)
                     for role in sorted((*MODALITIES, "seg"))]
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)
    case = tmp_path / "a" / "BraTS2021_00001" / "BraTS2021_00001"
    t1, seg = nib.load(f"{case}_t1.nii.gz"), nib.load(f"{case}_seg.nii.gz")
    assert t1.shape == seg.shape == raw_shape(shape) == (40, 40, 17)
    assert t1.get_data_dtype() == np.int16 and seg.get_data_dtype() == np.uint8
    assert nib.aff2axcodes(t1.affine) == ("L", "P", "S") and np.array_equal(t1.affine, seg.affine)
    labels = set(np.unique(read(f"{case}_seg.nii.gz")).tolist())
    assert labels <= {0, 1, 2, 4} and {0, 2} <= labels
    data = read(f"{case}_t1.nii.gz")
    assert data.min() == 0 and (data > 0).mean() > 0.2  # skull-stripped: background 0, brain above it
    assert (read(f"{case}_seg.nii.gz")[data == 0] == 0).all()  # tumour only inside the brain

    layout, cases = read_brats_cases(tmp_path / "a")
    out = tmp_path / "prepared"
    manifest = prepare_dataset(cases, out, shape, heldout=1, seed=0, reader=BratsReader(layout))
    assert layout == "raw" and manifest["counts"] == {"cases": 2, "train": 1, "heldout": 1}
    one_hot = read(out / "train" / "mask_000.nii.gz")
    assert one_hot.shape == (*shape, 4) and one_hot[..., 3].mean() > 0.2  # brain relabelled 4


# --- the BraTS workload through the jobs: four image channels, a {0, 1} condition, samples on the mask's grid ----


def test_training_sampling_and_quality_jobs_take_four_modalities(raw_prepared, tmp_path):
    from medddpm.build import ModelSpec
    from medddpm.jobs import run_sampling, run_training
    from medddpm.prepare import heldout_images, heldout_masks
    from medddpm.quality import image_similarity, numeric_error
    from medddpm.runs import start_run
    from config_settings import configured
    from medddpm.settings import DeviceSpec, QualitySettings, SampleSettings, TrainSettings
    from medddpm.switches import Variant

    _, dataset, _ = raw_prepared
    # BraTS's network in miniature: 8 inputs, 4 outputs, two ResBlocks per level, attention in the middle only.
    model = {"in_channels": 8, "out_channels": 4, "base_width": 32, "channel_mult": [1, 2], "num_res_blocks": 2,
             "attention_downsample_rates": [], "num_heads": 1, "dropout": 0.0}
    model_spec = ModelSpec.from_params(model, {"timesteps": 3})
    run = start_run(DeviceSpec("cpu", "cpu", None, False), Variant("baseline", False, False, False), Path.cwd(), {})
    train = configured(TrainSettings, "train", lr=1e-3, gradient_accumulation=1, warmup_steps=1, measured_steps=1,
                       bare_loop_steps=0)
    files = {name: tmp_path / name for name in ("train.json", "train.csv", "ckpt.pt", "sample.json", "sample.csv",
                                                "sample_000.nii.gz")}
    run_training(model_spec, train, run, dataset, files["train.json"], files["train.csv"], files["ckpt.pt"])
    assert json.loads(files["train.json"].read_text())["volume_shape"] == list(TARGET)
    sampling = configured(SampleSettings, "sample", masks=1, warmup_steps=0)
    run_sampling(model_spec, sampling, run, files["ckpt.pt"], dataset,
                 files["sample.json"], files["sample.csv"], [files["sample_000.nii.gz"]])
    sample, mask = nib.load(files["sample_000.nii.gz"]), nib.load(heldout_masks(dataset)[0])
    assert sample.shape == (*TARGET, 4) and mask.shape == (*TARGET, 4)
    np.testing.assert_array_equal(sample.affine, mask.affine)  # opens aligned with its mask
    assert nib.aff2axcodes(sample.affine) == ("L", "P", "S")
    data = np.asarray(sample.dataobj)
    assert np.isfinite(data).all() and data.min() >= -1.0 - 1e-6 and data.max() <= 1.0 + 1e-6
    assert len(set(np.round(data[..., c].std(), 6) for c in range(4))) > 1  # four channels, not one repeated
    numeric = numeric_error(model_spec, QualitySettings(ssim_kernel=3, reference_shape=(8, 12, 4), seed=0), run,
                            files["ckpt.pt"], dataset)
    assert numeric["input_shape"] == [8, 12, 4]  # (D, W, H), as reference_shape and dataset.shape are given
    assert numeric["forward_relative_error"] < 1e-4
    [row] = image_similarity([files["sample_000.nii.gz"]], heldout_images(dataset), kernel=3)
    assert -1 <= row["ssim"] <= 1 and row["psnr_db"] is not None


def test_a_quality_study_run_takes_four_modalities_and_the_brats_lesion_labels(raw_prepared, tmp_path):
    from medddpm.build import ModelSpec
    from medddpm.runs import start_run
    from config_settings import configured
    from medddpm.settings import DeviceSpec, StudySettings, TrainSettings
    from medddpm.study import RunFiles, run_study
    from medddpm.switches import Variant

    _, dataset, _ = raw_prepared
    model = {"in_channels": 8, "out_channels": 4, "base_width": 32, "channel_mult": [1, 2], "num_res_blocks": 1,
             "attention_downsample_rates": [], "num_heads": 1, "dropout": 0.0}
    run = start_run(DeviceSpec("cpu", "cpu", None, False), Variant("baseline", False, False, False), Path.cwd(), {})
    out = {name: tmp_path / name for name in ("run.json", "losses.csv", "slice.npy", "sample_000.nii.gz")}
    train = configured(TrainSettings, "train", lr=1e-3, gradient_accumulation=1)
    run_study(ModelSpec.from_params(model, {"timesteps": 3}), train,
              StudySettings(steps=1, masks=1, noise_seed=0, ssim_kernel=3, sample_batch=1, deterministic=True,
                            graphs=True),
              run, dataset, {0: RunFiles(out["run.json"], out["losses.csv"], out["slice.npy"],
                                         [out["sample_000.nii.gz"]])}, rerun=False)
    result = json.loads(out["run.json"].read_text())
    real = result["vs_real"]
    assert (real["lesion_labels"], real["tissue_label"]) == ([1, 2, 3], 4)
    assert set(real["per_sample"][0]["wasserstein_by_label"]) <= {"0", "1", "2", "3", "4"}
    assert real["lesion_contrast_real_mean"] is not None and len(real["per_sample"][0]["lesion_contrast"]) == 4
    assert result["numeric"]["forward_relative_error"] < 1e-4 and result["volume_shape"] == list(TARGET)
    assert np.load(out["slice.npy"]).shape == (2, TARGET[1], TARGET[0])  # the first modality's middle axial slice


def test_entry_points_write_and_prepare_synthetic_and_listed_brats(tmp_path):
    from test_data import Files, run_script

    raw, logs = tmp_path / "raw", tmp_path / "logs"
    logs.mkdir()
    run_script("synthetic_dataset.py", params=SimpleNamespace(source="synthetic_brats", cases=3, shape=[16, 16, 16],
                                                           seed=1),
               output=Files(raw), log=Files(logs / "synthetic.log"))
    assert "wrote 15 files: 3 raw BraTS cases of shape (20, 20, 17)" in (logs / "synthetic.log").read_text()
    listing = tmp_path / "cases.txt"
    listing.write_text("BraTS2021_00000\nBraTS2021_00002\n")
    params = SimpleNamespace(source={"source": "brats", "layout": "auto"}, shape=[16, 16, 16], heldout=1, seed=0)
    run_script("prepare_dataset.py", params=params, input=Files(raw=raw, case_list=listing),
               output=Files(prepared=tmp_path / "prepared"), log=Files(logs / "prepare.log"))
    manifest = json.loads((tmp_path / "prepared" / "manifest.json").read_text())
    assert manifest["layout"] == "raw" and {f["case"] for f in manifest["files"]} == {"BraTS2021_00000",
                                                                                     "BraTS2021_00002"}
    assert "(brats, raw layout)" in (logs / "prepare.log").read_text()
    params.source = {"source": "brats", "layout": "preprocessed"}
    with pytest.raises(SystemExit) as caught:
        run_script("prepare_dataset.py", params=params, input=Files(raw=raw), output=Files(prepared=tmp_path / "x"),
                   log=Files(logs / "failed.log"))
    assert "holds raw BraTS files, but the config says dataset.layout: preprocessed" in str(caught.value)
    assert not (tmp_path / "x").exists()
