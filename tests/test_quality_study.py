"""The quality study: its metrics against independent computations on small arrays, the layout of its result files
as the one reader collects them (measured and shipped), the verdict's rule at its edges, and fig09 and tab06 drawn
from known numbers. The study's jobs themselves run in the end-to-end run of tests/test_workflow.py."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import nibabel as nib
import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from scipy.ndimage import gaussian_filter

from medddpm import quality
from medddpm.curves import final_loss, smoothed
from reporting import claims, render
from reporting.registry import BY_ID
from layout import file_keys
from reporting.results import SHIPPED, Results, collect
from targets import SHIPPED_NAMES
from study_helpers import write_study

REPO = Path(__file__).resolve().parents[1]
CLAIMS = yaml.safe_load((REPO / "data" / "paper_claims.yaml").read_text())
CLAIM = next(c for c in CLAIMS["claims"] if c["id"] == "quality")
OPTIMIZED = CLAIMS["optimized_variants"]


# -- metrics, each against an independent computation --------------------------------------------------------------
def reference_ssim(x: np.ndarray, y: np.ndarray, window: int) -> float:
    """3D SSIM (Wang et al. 2004) in float64 with scipy: a Gaussian window of `window` voxels and sigma 1.5 x
    window / 11, mirrored at the borders, the map averaged over every voxel."""
    sigma = 1.5 * window / 11
    blur = lambda v: gaussian_filter(v, sigma, mode="mirror", truncate=((window - 1) // 2) / sigma)  # noqa: E731
    mu_x, mu_y = blur(x), blur(y)
    var_x = np.maximum(blur(x * x) - mu_x**2, 0)
    var_y = np.maximum(blur(y * y) - mu_y**2, 0)
    cov = blur(x * y) - mu_x * mu_y
    c1, c2 = (0.01 * 2.0) ** 2, (0.03 * 2.0) ** 2
    return float(np.mean((2 * mu_x * mu_y + c1) * (2 * cov + c2) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))))


def volumes(shape=(12, 14, 16), seed=0) -> tuple[np.ndarray, np.ndarray]:
    """A smooth volume in [-1, 1] and a noisy, shifted copy."""
    rng = np.random.default_rng(seed)
    smooth = np.tanh(gaussian_filter(rng.normal(size=shape), 2.0) * 6)
    noisy = np.clip(np.roll(smooth, 1, axis=0) + rng.normal(0, 0.3, size=shape), -1, 1)
    return smooth, noisy


@pytest.mark.parametrize("window", [11, 7, 3])
def test_ssim_matches_an_independent_float64_computation_with_the_window_asked_for(window):
    x, y = volumes()
    as_torch = lambda v: torch.from_numpy(v.astype(np.float32))[None, None]  # noqa: E731
    got = quality.ssim3d(as_torch(x), as_torch(y), window)
    assert got == pytest.approx(reference_ssim(x, y, window), abs=2e-5)
    assert quality.ssim3d(as_torch(x), as_torch(x), window) == pytest.approx(1.0, abs=1e-6)
    # The window is the one asked for: other windows give other numbers.
    others = {w: reference_ssim(x, y, w) for w in (3, 7, 11) if w != window}
    assert all(abs(got - value) > 1e-3 for value in others.values())


def write_volume(path: Path, data: np.ndarray) -> Path:
    nib.save(nib.Nifti1Image(data.astype(np.float32), np.eye(4)), str(path))
    return path


def test_psnr_and_largest_difference_by_hand(tmp_path):
    x, y = volumes()
    rows = quality.image_similarity([write_volume(tmp_path / "a.nii.gz", y)], [write_volume(tmp_path / "b.nii.gz", x)],
                                    7)
    mse = np.mean((y.astype(np.float32) - x.astype(np.float32)) ** 2)
    assert rows[0]["psnr_db"] == pytest.approx(10 * np.log10(4.0 / mse), rel=1e-5)
    assert rows[0]["max_abs_diff"] == pytest.approx(np.abs(y - x).max(), rel=1e-6)
    assert rows[0]["identical"] is False
    same = quality.image_similarity([tmp_path / "b.nii.gz"], [tmp_path / "b.nii.gz"], 7)[0]
    assert same["identical"] and same["psnr_db"] is None and same["max_abs_diff"] == 0 and same["ssim"] == 1.0


def labelled(shape=(8, 8, 8)) -> np.ndarray:
    labels = np.zeros(shape, np.uint8)
    labels[1:7, 1:7, 1:7] = 1
    labels[3:5, 3:5, 2:6] = 2
    return labels


def test_wasserstein_per_label_matches_sorted_differences():
    """Equal-size samples: W1 is the mean absolute difference of the sorted values; a shift by c costs |c|."""
    rng = np.random.default_rng(1)
    labels = labelled()
    sample = rng.normal(size=(2, *labels.shape))
    real = rng.normal(0.3, 1.7, size=(2, *labels.shape))
    got = quality.wasserstein_by_label(sample, real, labels)
    assert set(got) == {0, 1, 2}
    for label in got:
        inside = labels == label
        by_channel = [np.mean(np.abs(np.sort(s[inside]) - np.sort(r[inside]))) for s, r in zip(sample, real)]
        assert got[label] == pytest.approx(np.mean(by_channel), rel=1e-12)
    shifted = quality.wasserstein_by_label(sample, sample + 0.25, labels)
    assert all(value == pytest.approx(0.25) for value in shifted.values())


def test_labels_and_lesion_contrast_of_a_one_hot_mask(tmp_path):
    labels = labelled()
    one_hot = np.stack([labels == 1, labels == 2], axis=-1).astype(np.uint8)  # as prepare.one_hot writes it
    nib.save(nib.Nifti1Image(one_hot, np.eye(4)), str(tmp_path / "mask.nii.gz"))
    assert np.array_equal(quality.label_map(tmp_path / "mask.nii.gz"), labels)
    volume = np.where(labels == 2, 0.9, np.where(labels == 1, 0.1, -1.0))[None]
    volume[0, 1, 1, 1] = 0.3  # one brain voxel brighter: the brain's mean moves
    brain = volume[0][labels == 1]
    contrast = quality.region_contrast(volume, labels, (2,), 1)
    assert contrast == [pytest.approx(0.9 - brain.mean())]
    assert quality.region_contrast(volume, np.minimum(labels, 1), (2,), 1) is None  # no lesion in the mask


def test_comparison_with_the_real_image_of_the_same_mask(tmp_path):
    labels = labelled()
    one_hot = np.stack([labels == 1, labels == 2], axis=-1).astype(np.uint8)
    nib.save(nib.Nifti1Image(one_hot, np.eye(4)), str(tmp_path / "mask.nii.gz"))
    real = np.where(labels == 2, 0.8, np.where(labels == 1, 0.0, -1.0)).astype(np.float32)
    sample = real + np.where(labels == 1, 0.2, 0.0).astype(np.float32)  # the brain 0.2 brighter, the rest exact
    write_volume(tmp_path / "real.nii.gz", real)
    write_volume(tmp_path / "sample.nii.gz", sample)
    got = quality.compare_with_real([tmp_path / "sample.nii.gz"], [tmp_path / "real.nii.gz"],
                                    [tmp_path / "mask.nii.gz"], "wholehead", 3)
    row = got["per_sample"][0]
    assert row["wasserstein_by_label"] == {"0": pytest.approx(0), "1": pytest.approx(0.2), "2": pytest.approx(0)}
    assert got["wasserstein_mean"] == pytest.approx(0.2 / 3)
    assert got["lesion_contrast_mean"] == pytest.approx(0.6) and got["lesion_contrast_real_mean"] == pytest.approx(0.8)
    assert got["lesion_labels"] == [2] and got["tissue_label"] == 1


def test_loss_curves_are_compared_smoothed_and_by_their_last_tenth():
    losses = pd.Series(np.arange(40, dtype=float))
    assert final_loss(losses) == pytest.approx(np.mean([36, 37, 38, 39]))
    assert list(smoothed(losses, 40)[:3]) == [0.0, 0.5, 1.5]  # a trailing mean over 2 steps (5 % of 40)


# -- the one reader: the study's files, measured here and shipped -------------------------------------------------
def test_study_files_are_keyed_by_label_variant_and_seed():
    for root in ("results", "data/reference"):
        for name, kind in (("run.json", "study_run"), ("comparison.json", "study_comparison"),
                           ("losses.csv", "study_losses"), ("slice.npy", "study_slice")):
            keys = file_keys(Path(f"{root}/brats/h200/study/tf32_channels_last/seed1/{name}"))
            assert (keys["workload"], keys["gpu"], keys["variant"], keys["seed"], keys["kind"]) == \
                ("brats", "h200", "tf32_channels_last", 1, kind)
            assert name.endswith(SHIPPED_NAMES)  # the workflow lists shipped files by these endings
    # The samples are not read (their slice is), and the timing runs' files keep their keys.
    assert file_keys(Path("results/wholehead/h200/study/tf32/seed0/samples/sample_000.nii.gz"))["kind"] is None
    assert file_keys(Path("results/wholehead/h200/tf32/quality.json"))["kind"] == "quality.json"


@pytest.fixture(scope="module")
def study_tables(tmp_path_factory):
    """A measured a100 study (baseline at seeds 0 and 1, tf32, channels_last, bf16) and a shipped h200 one."""
    root = tmp_path_factory.mktemp("study")
    measured = write_study(root / "results" / "wholehead", "a100", {("baseline", 0): 0.10, ("baseline", 1): 0.12, ("tf32", 0): 0.11,
                                                      ("channels_last", 0): 0.095, ("bf16", 0): 0.2})
    shipped = write_study(root / "data" / "reference" / "wholehead", "h200", {("baseline", 0): 0.3, ("baseline", 1): 0.31,
                                                                ("tf32", 0): 0.3}, ssim=0.1, device_name="NVIDIA H200")
    return collect(measured, shipped, ["a100"])


def test_the_collector_reads_every_run_of_a_study(study_tables):
    study = study_tables["study"]
    assert list(zip(study["gpu"], study["variant"], study["seed"])) == [
        ("a100", "baseline", 0), ("a100", "baseline", 1), ("a100", "tf32", 0), ("a100", "channels_last", 0),
        ("a100", "bf16", 0), ("h200", "baseline", 0), ("h200", "baseline", 1), ("h200", "tf32", 0)]
    a100 = study[study["gpu"] == "a100"].set_index(["variant", "seed"])
    assert a100.loc[("tf32", 0), "wasserstein_vs_real"] == 0.11 and a100.loc[("baseline", 1), "psnr_vs_real_db"] == 21
    assert a100.loc[("baseline", 0), "identical_to_baseline"] and not a100.loc[("tf32", 0), "identical_to_baseline"]
    assert a100.loc[("tf32", 0), "volume_shape"] == "32x32x32" and a100.loc[("tf32", 0), "optimizer_steps"] == 40
    assert set(study.loc[study["gpu"] == "h200", "origin"]) == {SHIPPED}
    hardware = study_tables["hardware"].set_index("gpu")
    assert hardware.loc["h200", "device"] == "NVIDIA H200" and hardware.loc["h200", "is_gpu"]
    losses = study_tables["study_losses"]
    assert len(losses) == 8 * 40 and set(losses["seed"]) == {0, 1}
    results = Results.from_tables(study_tables)
    ramp = np.linspace(-1, 1, 32 * 32, dtype=np.float32).reshape(32, 32)
    assert np.array_equal(results.slice_of("h200", "baseline", 1, "real"), ramp)
    assert np.allclose(results.slice_of("h200", "baseline", 1), ramp * 0.6)
    assert results.slice_of("h200", "channels_last", 0) is None


# -- the verdict ------------------------------------------------------------------------------------------------
def study_frame(distances: dict, ssim: float = 0.6, effective: bool = True, tmp: Path | None = None) -> pd.DataFrame:
    files = write_study(tmp / "wholehead", "g", distances, ssim=ssim, effective=effective)
    return collect(files, (), ["g"])["study"]


@pytest.mark.parametrize("tf32, verdict", [(0.119, claims.REPRODUCED), (0.081, claims.REPRODUCED),
                                           (0.121, claims.CONTRADICTED), (0.079, claims.CONTRADICTED)])
def test_unchanged_within_the_baseline_seed_spread_around_the_shared_seed(tmp_path, tf32, verdict):
    """Baseline 0.10 (seed 0, the variants' seed) and 0.12 (seed 1): the band is 0.10 +- 0.02."""
    study = study_frame({("baseline", 0): 0.10, ("baseline", 1): 0.12, ("tf32", 0): tf32,
                         ("channels_last", 0): 0.1, ("bf16", 0): 0.5}, tmp=tmp_path)
    measured, got = claims.quality_verdict(CLAIM, "g", study, OPTIMIZED)
    assert got == verdict
    assert measured.startswith("wasserstein_vs_real: baseline 0.1 +- 0.02 (seeds 0.1 / 0.12)")
    # bf16 is beyond the paper: reported (outside the band), never judged.
    assert "beyond the paper: bf16 0.5 (outside)" in measured


def test_quality_is_not_measurable_without_trained_models_a_spread_or_switches_that_act(tmp_path):
    paper = {("baseline", 0): 0.10, ("baseline", 1): 0.12, ("tf32", 0): 0.11}
    # Samples that are not brain-like: the threshold and the measured SSIM are named.
    measured, got = claims.quality_verdict(CLAIM, "g", study_frame(paper, ssim=0.29, tmp=tmp_path / "a"), OPTIMIZED)
    assert got == claims.NOT_MEASURABLE
    assert "not brain-like" in measured and "0.29 / 0.29 (seeds 0 / 1) < 0.3" in measured
    assert "after 40 optimizer steps at 32x32x32" in measured
    assert claims.quality_verdict(CLAIM, "g", study_frame(paper, ssim=0.3, tmp=tmp_path / "b"), OPTIMIZED)[1] == \
        claims.REPRODUCED
    # One baseline seed: no spread to judge by.
    one = {k: v for k, v in paper.items() if k != ("baseline", 1)}
    measured, got = claims.quality_verdict(CLAIM, "g", study_frame(one, tmp=tmp_path / "c"), OPTIMIZED)
    assert got == claims.NOT_MEASURABLE and "one seed" in measured
    # TF32 without effect (a CPU): the comparison measures nothing.
    measured, got = claims.quality_verdict(CLAIM, "g", study_frame(paper, effective=False, tmp=tmp_path / "d"),
                                           OPTIMIZED)
    assert got == claims.NOT_MEASURABLE and "cudnn_tf32, matmul_tf32 had no effect on this device" in measured
    # No study, or none of the paper's optimizations in it.
    assert claims.quality_verdict(CLAIM, "g", pd.DataFrame(), OPTIMIZED)[0] == "no quality study on g"
    base = {("baseline", 0): 0.1, ("baseline", 1): 0.12}
    measured, got = claims.quality_verdict(CLAIM, "g", study_frame(base, tmp=tmp_path / "e"), OPTIMIZED)
    assert got == claims.NOT_MEASURABLE and measured.startswith("no optimized variant")


# -- fig09 and tab06 -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rendered(study_tables, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundle")
    paths = {}
    for name, frame in study_tables.items():
        paths[name] = folder / f"{name}.parquet"
        frame.to_parquet(paths[name], index=False)
    made = {output: render.build(output, {**paths, **{n: REPO / p for n, p in BY_ID[output].files.items()}})
            for output in ("fig09_quality", "tab06_quality", "tab05_claims")}
    yield made
    plt.close("all")


def test_fig09_draws_every_run_beside_the_real_image_and_the_seed_band(rendered):
    fig = rendered["fig09_quality"]
    titles = [ax.get_title() for ax in fig.get_axes() if ax.get_images()]
    assert titles == ["real image", "baseline, seed 0", "baseline, seed 1", "tf32", "channels_last", "bf16",
                      "real image", "baseline, seed 0", "baseline, seed 1", "tf32"]
    distance = [ax for ax in fig.get_axes() if ax.get_title(loc="left") == "distance to the real images"][0]
    band = [p for p in distance.patches if p.get_label() == "baseline's seed-to-seed band"][0]
    low, high = band.get_y(), band.get_y() + band.get_height()  # axhspan: a rectangle across the axes
    assert (low, high) == (pytest.approx(0.08), pytest.approx(0.12))
    points = distance.collections[0].get_offsets()[:, 1]
    assert list(points) == pytest.approx([0.10, 0.12, 0.11, 0.095, 0.2])
    text = " ".join(t.get_text() for t in fig.findobj(plt.Text))
    assert "Quality claim: reproduced" in text and "Quality claim: not measurable here" in text


def test_tab06_lists_every_run_and_tab05_judges_each_label(rendered):
    table = rendered["tab06_quality"].frame
    assert list(table["seed"]) == [0, 1, 0, 0, 0, 0, 1, 0]
    assert table.loc[2, "variant"] == "tf32" and table.loc[2, "max_abs_diff_vs_baseline"] == 0.5
    assert "checks" in rendered["tab06_quality"].extra
    claims_table = rendered["tab05_claims"].frame
    row = claims_table[claims_table["claim"].str.startswith("synthesis quality")].set_index("gpu")
    assert row.loc["a100", "verdict"] == claims.REPRODUCED
    assert row.loc["h200", "verdict"] == claims.NOT_MEASURABLE and "not brain-like" in row.loc["h200", "measured"]


def test_the_shipped_h200_study_is_read_like_a_measured_one_and_judged_from_its_own_numbers():
    """data/reference/wholehead/h200/study/ holds exactly the four files per run that the reader takes, from an H200,
    and the claim's verdict follows the stated rule applied by hand to the runs' own Wasserstein distances."""
    root = REPO / "data" / "reference" / "wholehead" / "h200" / "study"
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(SHIPPED_NAMES))
    runs = {(p.parts[-3], int(p.parts[-2].removeprefix("seed"))): json.loads(p.read_text())
            for p in root.rglob("run.json")}
    assert {names.name for names in files} == {"run.json", "comparison.json", "losses.csv", "slice.npy"}
    assert len(files) == 4 * len(runs) and ("baseline", 0) in runs and ("baseline", 1) in runs
    for run in runs.values():
        assert run["provenance"]["device_name"].startswith("NVIDIA H200")
        assert run["training"]["optimizer_steps"] == 1200 and run["parameters"] == 40_226_433
    assert not list(root.rglob("*.pt")) and not list(root.rglob("*.nii.gz"))

    tables = collect([], files, [])
    study = tables["study"]
    assert set(study["gpu"]) == {"h200"} and (study["variant"] == "baseline").sum() == 2
    # The rule of data/paper_claims.yaml, by hand: every optimized variant within the baseline's seed spread.
    distance = {key: run["vs_real"]["wasserstein_mean"] for key, run in runs.items()}
    spread = abs(distance[("baseline", 0)] - distance[("baseline", 1)])
    inside = {variant: abs(distance[(variant, 0)] - distance[("baseline", 0)]) <= spread
              for variant, seed in distance if variant in OPTIMIZED}
    expected = claims.REPRODUCED if all(inside.values()) else claims.CONTRADICTED
    measured, verdict = claims.quality_verdict(CLAIM, "h200", study, OPTIMIZED)
    assert verdict == expected
    for variant, ok in inside.items():
        assert (f"{variant} {distance[(variant, 0)]:.3g} (outside)" in measured) == (not ok)
