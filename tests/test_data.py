"""Tests of the data path: synthetic stand-in dataset, shared preparation, and the upstream-style loader."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import nibabel as nib
import numpy as np
import pytest
import torch

from conftest import Files, run_script
from medddpm.dataset import PreparedPairs, load_condition
from medddpm.prepare import heldout_images, heldout_masks
from medddpm.prepare import DatasetError, WholeHeadReader, case_id, prepare_dataset, read_wholehead_cases
from medddpm.prepare import split_cases
from medddpm import synthetic
from medddpm.synthetic import write_synthetic_dataset

RAW_SHAPE = (24, 24, 24)
PREPARED_SHAPE = (16, 16, 16)


def read(path: Path) -> np.ndarray:
    """A NIfTI file's data with its stored dtype."""
    return np.asarray(nib.load(path).dataobj)


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under `root`, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_raw(root: Path, images: list[np.ndarray], masks: list[np.ndarray], affine=None, names=None) -> Path:
    """A raw whole-head dataset (`sample_<i>.nii.gz` in image/ and mask/) written with plain nibabel."""
    for sub, volumes in (("image", images), ("mask", masks)):
        (root / sub).mkdir(parents=True, exist_ok=True)
        for i, volume in enumerate(volumes):
            name = names[sub][i] if names else f"sample_{i}.nii.gz"
            nib.save(nib.Nifti1Image(volume, np.eye(4) if affine is None else affine), root / sub / name)
    return root


def toy_case(shape=(6, 8, 10), seed=0) -> tuple[np.ndarray, np.ndarray]:
    """A random image and a mask with head (1) everywhere but the border, and one tumour voxel at (1, 2, 3)."""
    image = np.random.default_rng(seed).uniform(0, 100, shape).astype(np.float32)
    mask = np.zeros(shape, np.uint8)
    mask[1:-1, 1:-1, 1:-1] = 1
    mask[1, 2, 3] = 2
    return image, mask


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("raw") / "synthetic"
    write_synthetic_dataset(root, 3, RAW_SHAPE, seed=0)
    return root


@pytest.fixture(scope="module")
def prepared(raw, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("prepared") / "data"
    return out, prepare_dataset(read_wholehead_cases(raw), out, PREPARED_SHAPE, heldout=1, seed=0)


# --- synthetic dataset ------------------------------------------------------------------------------------------


def test_synthetic_layout(raw):
    names = [f"sample_{i}.nii.gz" for i in range(3)]
    assert sorted(p.name for p in (raw / "image").iterdir()) == names
    assert sorted(p.name for p in (raw / "mask").iterdir()) == names
    for name in names:
        image, mask = nib.load(raw / "image" / name), nib.load(raw / "mask" / name)
        assert image.get_data_dtype() == np.float32 and mask.get_data_dtype() == np.uint8
        assert image.shape == mask.shape == RAW_SHAPE
        assert nib.aff2axcodes(image.affine) == ("R", "A", "S")
        np.testing.assert_array_equal(image.affine, mask.affine)
        spacing = nib.affines.voxel_sizes(image.affine)
        assert np.allclose(spacing, spacing[0]) and spacing[0] > 1  # isotropic, coarser than the 1 mm template
        data, labels = read(raw / "image" / name), read(raw / "mask" / name)
        assert data.min() == -1.0 and data.max() <= 1.0
        assert set(np.unique(labels)) == {0, 1, 2}
        assert (data[labels == 0] < data[labels == 1].mean()).mean() > 0.99  # background dark, brain bright
        assert (labels > 0).mean() > 0.2  # the brain fills a good part of the volume


def test_synthetic_is_deterministic_and_cases_differ(raw, tmp_path):
    write_synthetic_dataset(tmp_path / "again", 3, RAW_SHAPE, seed=0)
    assert tree_bytes(tmp_path / "again") == tree_bytes(raw)
    write_synthetic_dataset(tmp_path / "other", 3, RAW_SHAPE, seed=1)
    name = "image/sample_0.nii.gz"
    assert not np.array_equal(read(tmp_path / "other" / name), read(raw / name))
    images = [read(raw / "image" / f"sample_{i}.nii.gz") for i in range(3)]
    masks = [read(raw / "mask" / f"sample_{i}.nii.gz") for i in range(3)]
    assert not np.array_equal(images[0], images[1]) and not np.array_equal(images[1], images[2])
    assert not np.array_equal(masks[0], masks[1])
    assert gzip.decompress((raw / name).read_bytes())[:4] == (348).to_bytes(4, "little")  # a NIfTI-1 header


@pytest.fixture(scope="module")
def tissue_stack() -> tuple[np.ndarray, ...]:
    """nilearn's T1 template and GM/WM maps low-passed for a RAW_SHAPE grid: (T1, GM, WM, affine, grid affine)."""
    template, affine = synthetic.load_template()
    maps, _ = synthetic.load_tissue_maps()
    grid = synthetic.grid_affine(template, affine, RAW_SHAPE)
    (t1, gm, wm), low_affine = synthetic.antialiased(np.concatenate([template[None], maps]), affine, grid[0, 0])
    return t1, gm, wm, low_affine, grid


def test_synthetic_uses_the_tissue_maps(tmp_path, monkeypatch):
    maps, affine = synthetic.load_tissue_maps()
    assert maps.shape == (2, *synthetic.load_template()[0].shape) and maps.min() == 0.0 and maps.max() == 1.0
    write_synthetic_dataset(tmp_path / "normal", 2, RAW_SHAPE, seed=0)
    # GM and WM swapped: the same GM + WM, so the same brain and tumour labels, but other tissue contrast.
    monkeypatch.setattr(synthetic, "load_tissue_maps", lambda: (maps[::-1].copy(), affine))
    write_synthetic_dataset(tmp_path / "swapped", 2, RAW_SHAPE, seed=0)
    for i in range(2):
        name = f"sample_{i}.nii.gz"
        normal, swapped = (read(tmp_path / kind / "mask" / name) for kind in ("normal", "swapped"))
        np.testing.assert_array_equal(swapped, normal)
        normal, swapped = (read(tmp_path / kind / "image" / name) for kind in ("normal", "swapped"))
        assert np.abs(normal - swapped).max() > 0.01  # well above float rounding


def test_synthetic_brain_label_comes_from_the_tissue_maps(tissue_stack):
    t1, gm, wm, low_affine, grid = tissue_stack
    without = np.stack([t1, np.zeros_like(gm), np.zeros_like(wm)])
    image, labels = synthetic.synthesize_case(np.random.default_rng(0), without, low_affine, grid, RAW_SHAPE)
    assert not labels.any() and (image > 0).mean() > 0.1  # a bright T1 alone makes no brain label
    with pytest.raises(ValueError, match="stack"):
        synthetic.synthesize_case(np.random.default_rng(0), t1, low_affine, grid, RAW_SHAPE)


def test_synthetic_tissue_contrast_is_drawn_per_case(tissue_stack):
    """All tissue as GM, then all as WM (same T1, same GM + WM, same seed): only the drawn tissue gains differ, so
    the image difference in brain is 2 (wm_gain - gm_gain) times the bias field, in sign and size, per case."""
    t1, gm, wm, low_affine, grid = tissue_stack
    zero = np.zeros_like(gm)
    as_gm, as_wm = np.stack([t1, gm + wm, zero]), np.stack([t1, zero, gm + wm])
    contrasts, checked = [], 0
    for seed in range(6):
        gm_gain, wm_gain = synthetic.draw_tissue_contrast(np.random.default_rng(seed))
        image_gm, labels = synthetic.synthesize_case(np.random.default_rng(seed), as_gm, low_affine, grid, RAW_SHAPE)
        image_wm, labels_wm = synthetic.synthesize_case(np.random.default_rng(seed), as_wm, low_affine, grid, RAW_SHAPE)
        np.testing.assert_array_equal(labels, labels_wm)
        brain = (labels == 1) & (image_gm < 0.95) & (image_wm < 0.95)  # clear of clipping and tumours
        difference = (image_wm - image_gm)[brain] / 2
        assert brain.sum() > 100 and np.median(difference) != 0
        if abs(wm_gain - gm_gain) > 0.02:
            assert (np.sign(difference) == np.sign(wm_gain - gm_gain)).mean() > 0.95
            assert 0.6 < np.median(difference / (wm_gain - gm_gain)) < 1.6  # partial volume times bias field
            checked += 1
        contrasts.append(wm_gain - gm_gain)
    assert checked >= 4 and np.ptp(contrasts) > 0.05  # cases differ in tissue contrast
    low, high = synthetic.WM_GAIN[0] - synthetic.GM_GAIN[1], synthetic.WM_GAIN[1] - synthetic.GM_GAIN[0]
    assert all(low <= c <= high for c in contrasts)


def test_synthetic_replaces_own_output_but_not_foreign_folders(tmp_path):
    root = tmp_path / "syn"
    write_synthetic_dataset(root, 2, (12, 12, 12), seed=0)
    write_synthetic_dataset(root, 1, (12, 12, 12), seed=0)
    assert sorted(p.name for p in (root / "image").iterdir()) == ["sample_0.nii.gz"]
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "notes.txt").write_text("mine")
    with pytest.raises(DatasetError, match=r"notes\.txt"):
        write_synthetic_dataset(tmp_path / "keep", 1, (12, 12, 12), seed=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep", "syn"]


# --- preparation ------------------------------------------------------------------------------------------------


def test_prepared_layout_and_manifest(prepared):
    out, manifest = prepared
    assert manifest == json.loads((out / "manifest.json").read_text())
    assert manifest["shape"] == list(PREPARED_SHAPE)
    assert manifest["counts"] == {"cases": 3, "train": 2, "heldout": 1}
    expected = {
        f"{split}/{role}_{k:03d}.nii.gz"
        for split, n in (("train", 2), ("heldout", 1))
        for k in range(n)
        for role in ("image", "mask")
    }
    assert {f["path"] for f in manifest["files"]} == expected
    assert {str(p.relative_to(out)) for p in out.rglob("*.nii.gz")} == expected
    sources = {f["source_image"] for f in manifest["files"]}
    assert sources == {f"sample_{i}.nii.gz" for i in range(3)}
    for entry in manifest["files"]:
        path = out / entry["path"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
        data = read(path)
        assert list(data.shape) == entry["shape"] and str(data.dtype) == entry["dtype"]
        assert entry["source_image"] == entry["source_mask"]
        if entry["role"] == "image":
            assert data.shape == PREPARED_SHAPE and data.dtype == np.float32
            assert data.min() >= -1.0 and data.max() <= 1.0
        else:
            assert data.shape == (*PREPARED_SHAPE, 2) and data.dtype == np.uint8
            assert set(np.unique(data)) == {0, 1} and data.sum(-1).max() == 1 and data[..., 1].any()
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no staging folder left behind


def test_prepare_is_deterministic(raw, tmp_path):
    for name in ("a", "b"):
        prepare_dataset(read_wholehead_cases(raw), tmp_path / name, PREPARED_SHAPE, heldout=1, seed=0)
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")


def test_per_slice_scaling_and_one_hot_without_resize(tmp_path):
    image, mask = toy_case()
    image[..., 4] = 7.0  # a constant slice: scikit-learn's MinMaxScaler maps it to 0, so -1
    image[..., 5] *= 10  # slices on very different scales each still span [-1, 1]
    raw = write_raw(tmp_path / "raw", [image, image + 1], [mask, mask])
    out = tmp_path / "out"
    prepare_dataset(read_wholehead_cases(raw), out, image.shape, heldout=1, seed=0)
    scaled = read(out / "train" / "image_000.nii.gz")
    low, high = image.min(axis=(0, 1)), image.max(axis=(0, 1))  # per slice of the last axis
    expected = np.where(high > low, (image - low) / np.where(high > low, high - low, 1) * 2 - 1, -1.0)
    np.testing.assert_allclose(scaled, expected, atol=1e-5)
    for h in range(image.shape[-1]):
        expected = (-1.0, -1.0) if h == 4 else (-1.0, 1.0)
        assert (scaled[..., h].min(), scaled[..., h].max()) == pytest.approx(expected)
    whole_volume = (image - image.min()) / (image.max() - image.min()) * 2 - 1
    assert not np.allclose(scaled, whole_volume, atol=0.1)
    one_hot = read(out / "train" / "mask_000.nii.gz")
    np.testing.assert_array_equal(one_hot[..., 0], mask == 1)
    np.testing.assert_array_equal(one_hot[..., 1], mask == 2)


def test_resize_when_shape_differs(tmp_path):
    image, mask = toy_case((10, 12, 14))
    raw = write_raw(tmp_path / "raw", [image, image], [mask, mask])
    out = tmp_path / "out"
    manifest = prepare_dataset(read_wholehead_cases(raw), out, (8, 8, 8), heldout=1, seed=0)
    assert manifest["shape"] == [8, 8, 8]
    for split in ("train", "heldout"):
        image_out = nib.load(out / split / "image_000.nii.gz")
        mask_out = read(out / split / "mask_000.nii.gz")
        assert image_out.shape == (8, 8, 8) and mask_out.shape == (8, 8, 8, 2)
        data = np.asarray(image_out.dataobj)
        assert data.min() >= -1.0 and data.max() <= 1.0
        assert set(np.unique(mask_out)) == {0, 1}  # nearest neighbour keeps labels crisp
        # The far corner voxel centre keeps its position in space.
        np.testing.assert_allclose(nib.affines.apply_affine(image_out.affine, [7, 7, 7]), [9, 11, 13], atol=1e-5)


def test_per_volume_scaling_option(tmp_path):
    image, mask = toy_case()
    image[..., 5] *= 10
    raw = write_raw(tmp_path / "raw", [image, image + 1], [mask, mask])
    manifest = prepare_dataset(read_wholehead_cases(raw), tmp_path / "out", image.shape, heldout=1, seed=0,
                               reader=WholeHeadReader(scaling="volume"))
    assert manifest["scaling"] == "volume" and manifest["workload"] == "wholehead"
    scaled = read(tmp_path / "out" / "train" / "image_000.nii.gz")
    # One minimum and one maximum for the whole volume, computed here voxel by voxel.
    low, high = min(image.flat), max(image.flat)
    expected = np.empty(image.shape)
    for index in np.ndindex(image.shape):
        expected[index] = (float(image[index]) - low) / (high - low) * 2 - 1
    np.testing.assert_allclose(scaled, expected, atol=1e-6)
    with pytest.raises(ValueError, match="scaling"):
        WholeHeadReader(scaling="histogram")


def test_pairs_by_case_id_not_by_every_digit(tmp_path):
    assert case_id("sample_3.nii.gz") == case_id("sample_03.nii") == ("sample", 3)
    assert case_id("BraTS2021_00014_t1.nii.gz") == case_id("BraTS2021_00014_seg.nii.gz") == ("brats2021", 14)
    assert case_id("img_1.nii.gz") == case_id("msk_1.nii.gz") != case_id("msk_11.nii.gz")
    image, mask = toy_case()
    names = {"image": ["BraTS2021_00014_t1.nii.gz", "BraTS2021_00020_t1.nii.gz", "case_9.nii.gz"],
             "mask": ["BraTS2021_00020_seg.nii.gz", "case_09.nii.gz", "BraTS2021_00014_seg.nii.gz"]}
    raw = write_raw(tmp_path / "raw", [image, image + 1, image + 2], [mask] * 3, names=names)
    cases = read_wholehead_cases(raw)
    assert [(c.files["image"].name, c.files["mask"].name) for c in cases] == [
        ("BraTS2021_00014_t1.nii.gz", "BraTS2021_00014_seg.nii.gz"),
        ("BraTS2021_00020_t1.nii.gz", "BraTS2021_00020_seg.nii.gz"),
        ("case_9.nii.gz", "case_09.nii.gz"),
    ]
    manifest = prepare_dataset(cases, tmp_path / "out", image.shape, heldout=1, seed=0)
    entry = next(f for f in manifest["files"] if f["case"] == "brats2021_14" and f["role"] == "mask")
    assert entry["sources"] == {"image": "image/BraTS2021_00014_t1.nii.gz", "mask": "mask/BraTS2021_00014_seg.nii.gz"}


def test_affine_kept_in_every_output_and_orientation_untouched(tmp_path):
    image, mask = toy_case()
    lps = np.array([[-1.5, 0, 0, 90.0], [0, -1.5, 0, 126.0], [0, 0, 1.5, -72.0], [0, 0, 0, 1]])
    raw = write_raw(tmp_path / "raw", [image, image + 1], [mask, mask], affine=lps)
    prepare_dataset(read_wholehead_cases(raw), tmp_path / "out", image.shape, heldout=1, seed=0)
    for path in sorted((tmp_path / "out").rglob("*.nii.gz")):
        img = nib.load(path)
        np.testing.assert_array_equal(img.affine, lps)
        assert nib.aff2axcodes(img.affine) == ("L", "P", "S")
        # qform and sform both carry it, so every viewer puts the file on the source's grid.
        np.testing.assert_allclose(img.get_qform(), lps, atol=1e-6)
        np.testing.assert_array_equal(img.get_sform(), lps)
        assert int(img.header["qform_code"]) > 0 and int(img.header["sform_code"]) > 0
    # Stored orientation: voxel (1, 2, 3) of the source is voxel (1, 2, 3) of the prepared mask.
    one_hot = read(tmp_path / "out" / "train" / "mask_000.nii.gz")
    assert one_hot[1, 2, 3, 1] == 1 and one_hot[..., 1].sum() == 1


def test_split_is_seeded():
    split = split_cases(10, 3, seed=4)
    assert split == split_cases(10, 3, seed=4)
    assert sorted(split["train"] + split["heldout"]) == list(range(10)) and len(split["heldout"]) == 3
    assert any(split_cases(10, 3, seed=s) != split for s in range(5, 10))


# --- loader -----------------------------------------------------------------------------------------------------


def test_loader_matches_upstream_transforms(tmp_path):
    cases = [toy_case(seed=s) for s in range(3)]
    raw = write_raw(tmp_path / "raw", [c[0] for c in cases], [c[1] for c in cases])
    out = tmp_path / "out"
    prepare_dataset(read_wholehead_cases(raw), out, (6, 8, 10), heldout=1, seed=0)
    dataset = PreparedPairs(out, "train")
    assert len(dataset) == 2
    item = dataset[0]
    condition, target = item["input"], item["target"]
    # transpose(3, 1) swaps the first and last spatial axes: (D, W, H) = (6, 8, 10) comes out as (10, 8, 6).
    assert condition.shape == (2, 10, 8, 6) and target.shape == (1, 10, 8, 6)
    assert condition.dtype == target.dtype == torch.float32
    assert condition.is_contiguous() and target.is_contiguous()
    assert set(condition.unique().tolist()) == {-1.0, 1.0}
    assert condition[1, 3, 2, 1] == 1 and int((condition[1] == 1).sum()) == 1  # tumour voxel (1, 2, 3)
    assert condition[0, 3, 2, 1] == -1 and condition[0, 4, 4, 4] == 1 and condition[0, 0, 0, 0] == -1
    image = read(out / "train" / "image_000.nii.gz")
    assert target[0, 3, 2, 1] == float(image[1, 2, 3])
    assert torch.equal(target[0], torch.from_numpy(image).permute(2, 1, 0))
    assert dataset[0] is item  # cached after the first read
    assert heldout_masks(out) == [out / "heldout" / "mask_000.nii.gz"]
    assert heldout_images(out) == [out / "heldout" / "image_000.nii.gz"]
    assert torch.equal(load_condition(heldout_masks(out)[0]), PreparedPairs(out, "heldout")[0]["input"])
    batch = next(iter(torch.utils.data.DataLoader(dataset, batch_size=2)))
    assert batch["input"].shape == (2, 2, 10, 8, 6) and batch["target"].shape == (2, 1, 10, 8, 6)


# --- bad input --------------------------------------------------------------------------------------------------


def _corrupt(root):
    write_raw(root, *map(list, zip(toy_case(), toy_case(), strict=True)))
    (root / "image" / "sample_1.nii.gz").write_bytes(b"not a nifti file")
    return "sample_1.nii.gz", 0


def _truncated(root):
    write_raw(root, *map(list, zip(toy_case(), toy_case(), strict=True)))
    path = root / "mask" / "sample_0.nii.gz"
    path.write_bytes(path.read_bytes()[:-20])
    return "sample_0.nii.gz", 0


def _count_mismatch(root):
    image, mask = toy_case()
    write_raw(root, [image, image, image], [mask, mask])
    return root.name, 0


def _digit_mismatch(root):
    image, mask = toy_case()
    write_raw(root, [image, image], [mask, mask])
    (root / "mask" / "sample_1.nii.gz").rename(root / "mask" / "sample_5.nii.gz")
    return "sample_5.nii.gz", 0


def _shape_mismatch(root):
    image, mask = toy_case()
    write_raw(root, [image, image], [mask, mask[:, :, :-1]])
    return "sample_1.nii.gz", 0


def _affine_mismatch(root):
    image, mask = toy_case()
    write_raw(root, [image, image], [mask, mask])
    shifted = np.eye(4)
    shifted[0, 3] = 2.0
    nib.save(nib.Nifti1Image(mask, shifted), root / "mask" / "sample_1.nii.gz")
    return "sample_1.nii.gz: affine differs", 0


def _same_case_twice(root):
    image, mask = toy_case()
    write_raw(root, [image, image], [mask, mask], names={"image": ["case_3.nii.gz", "case_03.nii.gz"],
                                                        "mask": ["case_3.nii.gz", "case_4.nii.gz"]})
    return "case_3.nii.gz: same case id", 0


def _brats_labels(root):
    image, mask = toy_case()
    bad = mask.copy()
    bad[0, 0, 0] = 4
    write_raw(root, [image, image], [mask, bad])
    return "sample_1.nii.gz: unknown mask labels 4", 0


def _unknown_labels(root):
    image, mask = toy_case()
    bad = mask.copy()
    bad[0, 0, :2] = 3, 7
    write_raw(root, [image, image], [mask, bad])
    return "sample_1.nii.gz: unknown mask labels 3, 7", 0


def _nan(root):
    image, mask = toy_case()
    bad = image.copy()
    bad[2, 2, 2] = np.nan
    write_raw(root, [bad, image], [mask, mask])
    return "sample_0.nii.gz", 0


def _inf(root):
    image, mask = toy_case()
    bad = image.copy()
    bad[2, 2, 2] = -np.inf
    write_raw(root, [image, bad], [mask, mask])
    return "sample_1.nii.gz", 0


def _blank_image(root):
    image, mask = toy_case()
    write_raw(root, [image, np.zeros_like(image)], [mask, mask])  # a constant scan, scaled it would be all -1
    return "sample_1.nii.gz: image is blank (every voxel is 0), so scaling would make it all -1; fix:", 0


def _blank_mask(root):
    image, mask = toy_case()
    write_raw(root, [image, image], [mask, np.zeros_like(mask)])  # every voxel background: conditions on nothing
    return "sample_1.nii.gz: mask is blank (every voxel is 0, background), so it conditions on no brain/head", 0


def _four_d(root):
    image, mask = toy_case()
    write_raw(root, [image, image[..., None].repeat(2, -1)], [mask, mask])
    return "sample_1.nii.gz", 0


def _too_few_cases(root):
    write_raw(root, *map(list, zip(toy_case(), toy_case(), strict=True)))
    return root.name, 2


def _empty_folder(root):
    write_raw(root, [], [])
    return "image", 0


def _missing_folder(root):
    image, mask = toy_case()
    write_raw(root, [image], [mask])
    for path in (root / "mask").iterdir():
        path.unlink()
    (root / "mask").rmdir()
    return "mask", 0


# Bad whole-head input folders; docs/troubleshooting.md lists each as dataset-<name>.
BAD_INPUTS = [_corrupt, _truncated, _count_mismatch, _digit_mismatch, _shape_mismatch, _affine_mismatch,
              _same_case_twice, _brats_labels, _unknown_labels, _nan, _inf, _blank_image, _blank_mask, _four_d,
              _too_few_cases, _empty_folder, _missing_folder]


@pytest.mark.parametrize("make", BAD_INPUTS)
def test_bad_input_raises_one_clear_line_and_writes_nothing(make, tmp_path):
    root = tmp_path / "raw"
    root.mkdir()
    named, heldout = make(root)
    parent = tmp_path / "results"
    parent.mkdir()
    with pytest.raises(DatasetError) as caught:
        prepare_dataset(read_wholehead_cases(root), parent / "prepared", (6, 8, 10), heldout=heldout, seed=0)
    message = str(caught.value)
    assert named in message and "\n" not in message
    assert list(parent.iterdir()) == []  # neither the output nor a staging folder


# --- Snakemake entry points -------------------------------------------------------------------------------------


def test_entry_points(tmp_path):
    raw, out, logs = tmp_path / "raw", tmp_path / "prepared", tmp_path / "logs"
    logs.mkdir()
    run_script(
        "synthetic_dataset.py",
        params=SimpleNamespace(source="synthetic", cases=2, shape=[16, 16, 16], seed=3),
        output=Files(raw),
        log=Files(logs / "synthetic.log"),
    )
    assert "wrote 4 files" in (logs / "synthetic.log").read_text()
    params = SimpleNamespace(source={"source": "synthetic", "scaling": "slice"}, shape=[12, 12, 12], heldout=1,
                             seed=0)
    run_script(
        "prepare_dataset.py",
        params=params,
        input=Files(raw=raw),
        output=Files(prepared=out),
        log=Files(logs / "prepare.log"),
    )
    assert json.loads((out / "manifest.json").read_text())["counts"] == {"cases": 2, "train": 1, "heldout": 1}
    (raw / "mask" / "sample_1.nii.gz").unlink()
    with pytest.raises(SystemExit) as caught:
        run_script(
            "prepare_dataset.py",
            params=params,
            input=Files(raw=raw),
            output=Files(prepared=tmp_path / "x"),
            log=Files(logs / "failed.log"),
        )
    assert str(caught.value).startswith("error: ") and "\n" not in str(caught.value)
    assert "2 files in image/ but 1 in mask/" in str(caught.value)
    assert (logs / "failed.log").read_text().strip() == str(caught.value)
    assert not (tmp_path / "x").exists()
