"""The rules of data preparation against expectations computed here by another route, over random label maps and
images (hypothesis): the one-hot channels, the label checks, per-slice and per-volume min-max scaling, the centred
crop-or-pad of BraTS, BraTS's relabelling (ET 4 -> 3, brain where the rescaled T1 is above -1), and resampling that
keeps labels crisp (nearest neighbour for masks, linear for images).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from medddpm.brats import MODALITIES, BratsReader, crop_or_pad, crop_or_pad_bounds
from medddpm.prepare import Case, DatasetError, WholeHeadReader, check_labels, one_hot, scale_slices
from medddpm.prepare import scale_volume

# HYPOTHESIS_EXAMPLES lowers the number of examples (tests/mutation.py runs them once per mutant).
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "40"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
# Tests that write NIfTI files run fewer examples.
FILES = settings(PROPERTY, max_examples=max(EXAMPLES // 3, 5))

shapes = st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5))


def label_maps(values) -> st.SearchStrategy[np.ndarray]:
    return shapes.flatmap(lambda shape: hnp.arrays(np.uint8, shape, elements=st.sampled_from(values)))


# Images on a grid of 1/64: spans are either zero or at least 1/64, never within rounding of zero.
def images(shape_strategy=shapes) -> st.SearchStrategy[np.ndarray]:
    return shape_strategy.flatmap(
        lambda shape: hnp.arrays(np.float64, shape, elements=st.integers(-64_000, 64_000).map(lambda v: v / 64)))


# --- one-hot and labels -----------------------------------------------------------------------------------------


@PROPERTY
@given(label_maps([0, 1, 2]))
def test_whole_head_one_hot_is_brain_then_tumor(labels):
    got = one_hot(labels)
    expected = np.eye(3, dtype=np.uint8)[labels][..., 1:]  # row k of the identity is label k's code; drop background
    assert got.dtype == np.uint8 and got.shape == (*labels.shape, 2)
    np.testing.assert_array_equal(got, expected)
    assert (got.sum(axis=-1) == (labels > 0)).all()  # one channel per labelled voxel, none for background


@PROPERTY
@given(label_maps([0, 1, 2, 3, 4]))
def test_brats_one_hot_has_a_channel_per_label_one_to_four(labels):
    got = one_hot(labels, (1, 2, 3, 4))
    np.testing.assert_array_equal(got, np.eye(5, dtype=np.uint8)[labels][..., 1:])


@PROPERTY
@given(label_maps([0, 1, 2, 3, 4, 7]), st.sampled_from([(0, 1, 2), (0, 1, 2, 4), (0, 1, 2, 3, 4)]))
def test_label_check_accepts_exactly_the_allowed_labels(labels, allowed):
    outside = sorted(set(np.unique(labels).tolist()) - set(allowed))
    mask = labels.astype(np.float64)  # as nibabel's get_fdata() reads it
    if not outside:
        checked = check_labels(mask, Path("m.nii.gz"), allowed, "convention")
        assert checked.dtype == np.uint8
        np.testing.assert_array_equal(checked, labels)
        return
    with pytest.raises(DatasetError) as caught:
        check_labels(mask, Path("m.nii.gz"), allowed, "convention", " (a hint)")
    message = str(caught.value)
    assert message.startswith("m.nii.gz: unknown mask labels " + ", ".join(str(v) for v in outside))
    assert f"(expected {', '.join(map(str, allowed))}: convention) (a hint)" in message
    assert "\n" not in message


def test_label_check_lists_ten_unknown_values_and_counts_the_rest():
    mask = np.arange(20, dtype=np.float64).reshape(4, 5, 1) + 0.5
    with pytest.raises(DatasetError, match=r"labels 0\.5, 1\.5, .*, 9\.5, \.\.\. \(20 values\)"):
        check_labels(mask, Path("m.nii.gz"), (0, 1, 2), "convention")


# --- scaling ----------------------------------------------------------------------------------------------------


def slice_scaled(image: np.ndarray) -> np.ndarray:
    """Upstream's MinMaxScaler on img.reshape(-1, H): each slice of the last axis to [0, 1] on its own (a constant
    slice to 0), then x * 2 - 1; here one slice at a time, voxel by voxel."""
    out = np.empty(image.shape)
    for h in range(image.shape[-1]):
        values = [float(v) for v in image[..., h].flat]
        low, high = min(values), max(values)
        for index in np.ndindex(image.shape[:-1]):
            unit = (float(image[index + (h,)]) - low) / (high - low) if high > low else 0.0
            out[index + (h,)] = unit * 2 - 1
    return out


@PROPERTY
@given(images())
def test_per_slice_scaling_is_upstreams_min_max_scaler_per_slice(image):
    np.testing.assert_allclose(scale_slices(image), slice_scaled(image), rtol=0, atol=1e-12)


@PROPERTY
@given(images())
def test_per_volume_scaling_maps_the_volume_to_minus_one_one(image):
    low, high = float(image.min()), float(image.max())
    expected = (image - low) / (high - low) * 2 - 1 if high > low else np.full(image.shape, -1.0)
    got = scale_volume(image)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    if high > low:
        assert got.min() == -1.0 and got.max() == 1.0


# --- BraTS crop or pad ------------------------------------------------------------------------------------------


def centred(data: np.ndarray, shape, fill) -> np.ndarray:
    """torchio's CropOrPad, axis by axis: crop ceil(d / 2) at the start and the rest at the end, or pad so."""
    out = data
    for axis, target in enumerate(shape):
        size = out.shape[axis]
        if size >= target:
            start = math.ceil((size - target) / 2)
            out = np.take(out, range(start, start + target), axis=axis)
        else:
            before = math.ceil((target - size) / 2)
            widths = [(0, 0)] * out.ndim
            widths[axis] = (before, target - size - before)
            out = np.pad(out, widths, constant_values=fill)
    return out


@PROPERTY
@given(images(st.tuples(st.integers(1, 7), st.integers(1, 7), st.integers(1, 7))),
       st.tuples(st.integers(1, 7), st.integers(1, 7), st.integers(1, 7)), st.sampled_from([0.0, -1.0]))
def test_crop_or_pad_is_centred_with_the_larger_half_at_the_start(data, shape, fill):
    np.testing.assert_array_equal(crop_or_pad(data, shape, fill), centred(data, shape, fill))
    stacked = np.stack([data, data + 1], axis=-1)  # channels on a fourth axis are carried along
    np.testing.assert_array_equal(crop_or_pad(stacked, shape, fill), centred(stacked, shape, fill))
    starts = crop_or_pad_bounds(data.shape, shape)
    for start, size, target in zip(starts, data.shape, shape):
        assert start == (math.ceil((size - target) / 2) if size >= target else -math.ceil((target - size) / 2))


# --- whole cases through the readers (files) --------------------------------------------------------------------


def save(path: Path, data: np.ndarray, affine=None) -> Path:
    nib.save(nib.Nifti1Image(data, np.eye(4) if affine is None else affine), path)
    return path


@FILES
@given(st.data())
def test_whole_head_case_is_scaled_per_slice_and_one_hot_encoded(tmp_path_factory, data):
    shape = data.draw(st.tuples(st.integers(2, 5), st.integers(2, 5), st.integers(2, 5)))
    labels = data.draw(hnp.arrays(np.uint8, shape, elements=st.sampled_from([0, 1, 2])))
    image = data.draw(hnp.arrays(np.float32, shape, elements=st.integers(-4000, 4000).map(lambda v: v / 4)))
    assume(image.max() > image.min())  # a blank image is refused (tests/test_data.py)
    assume(labels.any())  # so is a blank mask
    folder = tmp_path_factory.mktemp("case")
    case = Case("c", {"image": save(folder / "image.nii.gz", image), "mask": save(folder / "mask.nii.gz", labels)})
    for scaling, expected in (("slice", slice_scaled(image)), ("volume", None)):
        prepared, mask, affine = WholeHeadReader(scaling).prepare(case, shape)
        if expected is None:
            low, high = float(image.min()), float(image.max())
            expected = (image - low) / (high - low) * 2 - 1 if high > low else np.full(shape, -1.0)
        assert prepared.dtype == np.float32 and mask.dtype == np.uint8
        np.testing.assert_allclose(prepared, expected, atol=1e-6)
        np.testing.assert_array_equal(mask, np.stack([labels == 1, labels == 2], axis=-1))
        np.testing.assert_array_equal(affine, np.eye(4))


def test_resampled_masks_keep_their_labels_crisp_and_images_stay_linear(tmp_path):
    """Background next to tumor with no brain between: linear interpolation of the labels would invent a band of
    label 1 (brain) between them; nearest neighbour does not. A linear ramp stays a ramp under linear interpolation
    (corner voxel centres fixed, so voxel i of 8 samples the source at i * 4 / 7, never halfway)."""
    labels = np.zeros((5, 5, 5), np.uint8)
    labels[3:] = 2
    ramp = np.broadcast_to(np.arange(5, dtype=np.float32)[:, None, None] * 3.0, (5, 5, 5)).copy()
    ramp[..., 0] += np.linspace(0, 1, 5, dtype=np.float32)[None, :]  # not constant per slice
    case = Case("c", {"image": save(tmp_path / "image.nii.gz", ramp), "mask": save(tmp_path / "mask.nii.gz", labels)})
    image, mask, affine = WholeHeadReader("volume").prepare(case, (8, 8, 8))
    assert mask.shape == (8, 8, 8, 2) and not mask[..., 0].any()  # no brain invented
    source = np.arange(8) * 4 / 7  # source coordinate of each output voxel along the first axis
    np.testing.assert_array_equal(mask[..., 1].all(axis=(1, 2)), np.rint(source) >= 3)  # nearest source voxel
    np.testing.assert_array_equal(mask[..., 1].any(axis=(1, 2)), np.rint(source) >= 3)
    expected = (source * 3.0 - ramp.min()) / (ramp.max() - ramp.min()) * 2 - 1
    np.testing.assert_allclose(image[:, 4, 4], expected, atol=1e-5)
    np.testing.assert_allclose(np.diag(affine)[:3], [4 / 7] * 3)
    np.testing.assert_array_equal(affine[3], [0, 0, 0, 1])


def raw_brats_case(folder: Path, seg: np.ndarray, volumes: dict[str, np.ndarray]) -> Case:
    files = {role: save(folder / f"BraTS2021_00001_{role}.nii.gz", volumes[role]) for role in MODALITIES}
    files["seg"] = save(folder / "BraTS2021_00001_seg.nii.gz", seg)
    return Case("BraTS2021_00001", files)


@FILES
@given(st.data())
def test_raw_brats_case_relabels_et_and_marks_brain_where_t1_is_above_its_minimum(tmp_path_factory, data):
    shape = data.draw(st.tuples(st.integers(2, 5), st.integers(2, 5), st.integers(2, 5)))
    target = data.draw(st.tuples(st.integers(2, 6), st.integers(2, 6), st.integers(2, 6)))
    seg = data.draw(hnp.arrays(np.uint8, shape, elements=st.sampled_from([0, 1, 2, 4])))
    volumes = {role: data.draw(hnp.arrays(np.int16, shape, elements=st.integers(0, 3))) for role in MODALITIES}
    assume(all(volume.max() > volume.min() for volume in volumes.values()))  # a blank scan is refused
    case = raw_brats_case(tmp_path_factory.mktemp("brats"), seg, volumes)
    image, mask, affine = BratsReader("raw").prepare(case, target)

    def rescaled(volume):  # torchio's RescaleIntensity to [-1, 1] over the cropped (or zero-padded) volume
        cropped = centred(volume.astype(np.float64), target, 0.0)
        low, high = cropped.min(), cropped.max()
        return (cropped - low) / (high - low) * 2 - 1 if high > low else np.full(target, -1.0)

    t1 = rescaled(volumes["t1"])
    labels = centred(seg, target, 0).astype(int)
    relabelled = np.select([labels == 4, labels > 0, t1 > -1], [3, labels, 4], default=0)
    assert image.shape == (*target, 4) and mask.shape == (*target, 4)
    for channel, role in enumerate(MODALITIES):
        np.testing.assert_allclose(image[..., channel], rescaled(volumes[role]), atol=1e-6)
    for channel, label in enumerate((1, 2, 3, 4)):
        np.testing.assert_array_equal(mask[..., channel], relabelled == label, err_msg=f"label {label}")
    assert (mask.sum(axis=-1) <= 1).all()
    starts = crop_or_pad_bounds(shape, target)
    np.testing.assert_array_equal(affine[:3, 3], starts)  # the crop moves the origin by its first voxel


def test_preprocessed_brats_case_is_taken_as_it_is_and_padded_with_its_background(tmp_path):
    seg = np.array([0, 1, 2, 3, 4, 4], dtype=np.uint8).reshape(1, 2, 3).repeat(2, axis=0)
    volumes = {role: np.full(seg.shape, k / 4 - 0.5, np.float64) for k, role in enumerate(MODALITIES)}
    for volume in volumes.values():
        volume[1, 1, 1] += 0.125  # not blank (a blank scan is refused)
    volumes["t1"][0, 0, 0] = 1.0 + 1e-6  # float rounding of upstream's rescale is tolerated (clipped to 1)
    case = raw_brats_case(tmp_path, seg, volumes)
    image, mask, _ = BratsReader("preprocessed").prepare(case, (4, 2, 3))
    assert image[0].min() == -1.0 and image[-1].min() == -1.0  # one padded slice at each end, background -1
    np.testing.assert_array_equal(image[1:3, ..., 1], volumes["t1ce"])
    assert image[1, 0, 0, 0] == 1.0
    np.testing.assert_array_equal(mask[1:3], np.stack([seg == k for k in (1, 2, 3, 4)], axis=-1))
    assert not mask[0].any() and not mask[-1].any()
    volumes["t2"][0, 0, 0] = 1.01
    with pytest.raises(DatasetError, match=r"t2\.nii\.gz: values in \[.*, 1\.01\], but preprocessed BraTS images"):
        BratsReader("preprocessed").prepare(raw_brats_case(tmp_path, seg, volumes), (4, 2, 3))


def test_brats_range_check_tolerates_rounding_only_and_clips_it_away(tmp_path):
    seg = np.zeros((2, 2, 2), np.uint8)
    seg[0, 1, 0] = 4  # brain (a blank segmentation is refused)
    volumes = {role: np.zeros((2, 2, 2)) for role in MODALITIES}
    for volume in volumes.values():
        volume[0, 1, 0] = 0.5  # not blank (a blank scan is refused)
    volumes["t1"][0, 0, 0], volumes["t1"][1, 1, 1] = -1 - 1e-5, 1 + 1e-5  # upstream's rounding, at the edge
    image, _, _ = BratsReader("preprocessed").prepare(raw_brats_case(tmp_path, seg, volumes), (2, 2, 2))
    assert image[..., 0].min() == -1.0 and image[..., 0].max() == 1.0
    for low, high in ((-1.01, 0.0), (0.0, 1.01), (-1.5, 0.0)):
        volumes["t1"][0, 0, 0], volumes["t1"][1, 1, 1] = low, high
        with pytest.raises(DatasetError, match=r"t1\.nii\.gz: values in \["):
            BratsReader("preprocessed").prepare(raw_brats_case(tmp_path, seg, volumes), (2, 2, 2))


def test_brats_label_messages_name_the_convention_and_the_likely_mix_up(tmp_path):
    volumes = {role: np.linspace(0, 1, 8).reshape(2, 2, 2) for role in MODALITIES}
    seg = np.array([0, 1, 2, 3, 4, 4, 0, 0], np.uint8).reshape(2, 2, 2)  # a relabelled ET (3) in a raw folder
    with pytest.raises(DatasetError) as caught:
        BratsReader("raw").prepare(raw_brats_case(tmp_path, seg, volumes), (2, 2, 2))
    assert str(caught.value).endswith(
        "seg.nii.gz: unknown mask labels 3 (expected 0, 1, 2, 4: raw BraTS: background, NCR, ED, ET) (3 is a "
        "relabelled ET: a preprocessed file among raw ones? preprocessed BraTS has one folder per modality)")
    seg[0, 0, 0] = 5
    seg[seg == 3] = 0
    with pytest.raises(DatasetError) as caught:
        BratsReader("raw").prepare(raw_brats_case(tmp_path, seg, volumes), (2, 2, 2))
    assert str(caught.value).endswith("labels 5 (expected 0, 1, 2, 4: raw BraTS: background, NCR, ED, ET)")
    with pytest.raises(DatasetError) as caught:
        BratsReader("preprocessed").prepare(raw_brats_case(tmp_path, seg, volumes), (2, 2, 2))
    assert str(caught.value).endswith(
        "labels 5 (expected 0, 1, 2, 3, 4: preprocessed BraTS: background, NCR, ED, ET, brain)")


def test_readers_describe_their_channels_and_refuse_unknown_options():
    assert WholeHeadReader("slice").description() == {
        "workload": "wholehead", "image_channels": ["image"],
        "mask_channels": ["brain/head (label 1)", "tumor (label 2)"], "condition_values": [-1.0, 1.0],
        "scaling": "slice"}
    assert BratsReader("raw").description() == {
        "workload": "brats", "layout": "raw", "image_channels": ["t1", "t1ce", "t2", "flair"],
        "mask_channels": ["NCR (label 1)", "ED (label 2)", "ET (label 3; 4 in raw BraTS)", "brain (label 4)"],
        "condition_values": [0.0, 1.0]}
    with pytest.raises(ValueError) as caught:
        BratsReader("flat")
    assert str(caught.value) == "layout must be one of ('raw', 'preprocessed'), got 'flat'"
    with pytest.raises(ValueError) as caught:
        WholeHeadReader("histogram")
    assert str(caught.value) == "scaling must be one of ('slice', 'volume'), got 'histogram'"


def test_whole_head_label_messages_and_shapes(tmp_path):
    from medddpm.prepare import as_shape

    image = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    for labels, tail in (([0, 1, 2, 3], "labels 3 (expected 0, 1, 2: background, brain/head, tumor) (BraTS labels? use "
                                        "dataset.source: brats)"),
                         ([0, 1, 7, 1], "labels 7 (expected 0, 1, 2: background, brain/head, tumor)")):
        mask = np.array(labels * 2, np.uint8).reshape(2, 2, 2)
        files = {"image": save(tmp_path / "image.nii.gz", image), "mask": save(tmp_path / "mask.nii.gz", mask)}
        with pytest.raises(DatasetError) as caught:
            WholeHeadReader().prepare(Case("c", files), (2, 2, 2))
        assert str(caught.value).endswith(tail)
    ten = np.arange(10, dtype=np.float64) + 10  # exactly ten unknown values are all shown, without a count
    with pytest.raises(DatasetError) as caught:
        check_labels(ten, Path("m.nii.gz"), (0, 1, 2), "c")
    assert "labels 10, 11, 12, 13, 14, 15, 16, 17, 18, 19 (expected" in str(caught.value)
    assert as_shape([2, 3, 4]) == (2, 3, 4)
    for bad in ([1, 4, 4], [4, 4], [4, 4, 4, 4], [4.5, 4, 4]):
        with pytest.raises(ValueError) as caught:
            as_shape(bad)
        assert str(caught.value) == f"shape must be three integers >= 2, got {bad!r}"
