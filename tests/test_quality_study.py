"""The quality study: its metrics against independent computations on small arrays, the layout of its result files
as the one reader collects them (measured and shipped, the rerun with them), the verdict on collected runs (its edges:
tests/test_claims_quality.py), and fig09 and tab06 drawn from known numbers. The study's jobs themselves run in the
end-to-end run of tests/test_workflow.py."""

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
from scipy import stats as scipy_stats
from scipy.ndimage import gaussian_filter

from medddpm import quality
from medddpm.curves import final_loss, smoothed
from reporting import claims, render
from reporting.registry import BY_ID
from planning.layout import file_keys
from reporting.results import SHIPPED, Results, collect
from planning.plan import SHIPPED_NAMES
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


# A measured a100 study of the new design (every variant at every seed, the baseline's first seed trained twice) and a
# shipped h200 one of the old (the baseline at two seeds, a variant at the first) whose samples are not brain-like.
SEEDS = (0, 1, 2)
SHIFT = {"baseline": 0.0, "tf32": 0.004, "channels_last": -0.003, "bf16": 0.2}


def distance(variant: str, seed: int) -> float:
    """The a100 runs' distance to the real images: the seed moves every variant alike (by 0.03 a seed); a variant
    adds its shift and, paired by seed, a small scatter."""
    scatter = 0.002 * ((seed * 7 + len(variant)) % 3 - 1) if variant != "baseline" else 0.0
    return 0.2 + 0.03 * seed + SHIFT[variant] + scatter


def with_rerun(run: Path, identical: bool = True, moved: float = 0.0) -> None:
    """Adds the `rerun` block that the baseline's first seed carries (the same seed trained again in the job)."""
    data = json.loads(run.read_text())
    data["rerun"] = {"seed": 0, "weights_identical": identical, "max_abs_weight_difference": 0.0 if identical else 2e-5,
                     "vs_real": data["vs_real"] | {"wasserstein_mean": data["vs_real"]["wasserstein_mean"] + moved}}
    run.write_text(json.dumps(data))


def seeded_losses(folder: Path, seed: int, shift: float) -> None:
    """A loss curve that depends on the seed (as training from another seed does) and a little on the variant."""
    steps = np.arange(40)
    noise = np.random.default_rng(seed).normal(0, 0.01, steps.size)
    pd.DataFrame({"step": steps, "loss": 0.8 * np.exp(-steps / 10) + 0.1 + noise + shift}).to_csv(
        folder / "losses.csv", index=False)


@pytest.fixture(scope="module")
def study_tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    measured = write_study(root / "results" / "wholehead", "a100",
                           {(v, s): distance(v, s) for v in SHIFT for s in SEEDS})
    for variant in SHIFT:
        for seed in SEEDS:
            seeded_losses(root / "results/wholehead/a100/study" / variant / f"seed{seed}", seed, SHIFT[variant] / 50)
    with_rerun(root / "results/wholehead/a100/study/baseline/seed0/run.json")
    shipped = write_study(root / "data" / "reference" / "wholehead", "h200",
                          {("baseline", 0): 0.3, ("baseline", 1): 0.31, ("tf32", 0): 0.3}, ssim=0.1,
                          device_name="NVIDIA H200")
    return collect(measured, shipped, ["a100"])


def test_the_collector_reads_every_run_of_a_study_and_the_rerun(study_tables):
    study = study_tables["study"]
    assert list(zip(study["gpu"], study["variant"], study["seed"])) == [
        *(("a100", v, s) for v in ("baseline", "tf32", "channels_last", "bf16") for s in SEEDS),
        ("h200", "baseline", 0), ("h200", "baseline", 1), ("h200", "tf32", 0)]
    a100 = study[study["gpu"] == "a100"].set_index(["variant", "seed"])
    assert a100.loc[("tf32", 2), "wasserstein_vs_real"] == distance("tf32", 2)
    assert a100.loc[("baseline", 1), "psnr_vs_real_db"] == 21
    assert a100.loc[("baseline", 0), "identical_to_baseline"] and not a100.loc[("tf32", 0), "identical_to_baseline"]
    assert a100.loc[("tf32", 0), "volume_shape"] == "32x32x32" and a100.loc[("tf32", 0), "optimizer_steps"] == 40
    # The rerun: on the baseline's first seed only.
    rerun = a100[a100["rerun_seed"].notna()]
    assert list(rerun.index) == [("baseline", 0)]
    assert bool(rerun["rerun_weights_identical"].iloc[0]) and rerun["rerun_max_abs_weight_difference"].iloc[0] == 0
    assert rerun["rerun_wasserstein_vs_real"].iloc[0] == distance("baseline", 0)
    assert rerun["rerun_ssim_vs_real"].iloc[0] == 0.6
    assert set(study.loc[study["gpu"] == "h200", "origin"]) == {SHIPPED}
    hardware = study_tables["hardware"].set_index("gpu")
    assert hardware.loc["h200", "device"] == "NVIDIA H200" and hardware.loc["h200", "is_gpu"]
    losses = study_tables["study_losses"]
    assert len(losses) == (12 + 3) * 40 and set(losses["seed"]) == {0, 1, 2}
    results = Results.from_tables(study_tables)
    ramp = np.linspace(-1, 1, 32 * 32, dtype=np.float32).reshape(32, 32)
    assert np.array_equal(results.slice_of("h200", "baseline", 1, "real"), ramp)
    assert np.allclose(results.slice_of("h200", "baseline", 1), ramp * 0.6)
    assert results.slice_of("h200", "channels_last", 0) is None


# -- the verdict, from the files as the collector reads them (its edges: tests/test_claims_quality.py) -------------
def study_frame(distances: dict, ssim: float = 0.6, effective: bool = True, tmp: Path | None = None) -> pd.DataFrame:
    files = write_study(tmp / "results" / "wholehead", "g", distances, ssim=ssim, effective=effective)
    return collect(files, (), ["g"])["study"]


def test_the_verdict_pairs_the_collected_runs_by_seed(study_tables):
    study = study_tables["study"]
    measured, verdict = claims.quality_verdict(CLAIM, "a100", study[study["gpu"] == "a100"], OPTIMIZED)
    assert verdict == claims.REPRODUCED
    margin = np.std([distance("baseline", s) for s in SEEDS], ddof=1)
    assert measured.startswith(f"wasserstein_vs_real, variant - baseline paired by seed, mean [90 % interval] "
                               f"against the margin +-{margin:.4f} (1 x the SD of the baseline's 3 seeds): tf32 ")
    assert "; beyond the paper: bf16 +0.2000 [" in measured and measured.endswith(
        "different; rerun of seed 0: weights bit-identical, wasserstein_vs_real +0.0000 against the first training")
    measured, verdict = claims.quality_verdict(CLAIM, "h200", study[study["gpu"] == "h200"], OPTIMIZED)
    assert verdict == claims.NOT_MEASURABLE and "not brain-like" in measured


def test_quality_is_not_measurable_without_trained_models_or_switches_that_act(tmp_path):
    paper = {(v, s): distance(v, s) for v in ("baseline", "tf32") for s in SEEDS}
    # Samples that are not brain-like: the threshold and the measured SSIM are named.
    measured, got = claims.quality_verdict(CLAIM, "g", study_frame(paper, ssim=0.29, tmp=tmp_path / "a"), OPTIMIZED)
    assert got == claims.NOT_MEASURABLE
    assert "not brain-like" in measured and "0.29 / 0.29 / 0.29 (seeds 0 / 1 / 2) < 0.3" in measured
    assert "after 40 optimizer steps at 32x32x32" in measured
    assert claims.quality_verdict(CLAIM, "g", study_frame(paper, ssim=0.3, tmp=tmp_path / "b"), OPTIMIZED)[1] == \
        claims.REPRODUCED
    # TF32 without effect (a CPU): the comparison measures nothing.
    measured, got = claims.quality_verdict(CLAIM, "g", study_frame(paper, effective=False, tmp=tmp_path / "d"),
                                           OPTIMIZED)
    assert got == claims.NOT_MEASURABLE and "cudnn_tf32, matmul_tf32 had no effect on this device" in measured


# -- fig09 and tab06 -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bundle(study_tables, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("bundle")
    paths = {}
    for name, frame in study_tables.items():
        paths[name] = folder / f"{name}.parquet"
        frame.to_parquet(paths[name], index=False)
    return paths


@pytest.fixture(scope="module")
def rendered(bundle):
    made = {output: render.build(output, {**bundle, **{n: REPO / p for n, p in BY_ID[output].files.items()}})
            for output in ("fig09_quality", "tab06_quality", "tab05_claims")}
    yield made
    plt.close("all")


def panel(fig, title: str, k: int = 0):
    return [ax for ax in fig.get_axes() if ax.get_title(loc="left").startswith(title)][k]


def test_fig09_draws_every_seed_the_paired_intervals_against_the_margin_and_the_outcomes(rendered, study_tables):
    fig = rendered["fig09_quality"]
    study = study_tables["study"]
    a100 = study[study["gpu"] == "a100"]
    judgement = claims.quality_judgement(CLAIM, "a100", a100, OPTIMIZED)
    # (a) every seed, one row per variant (first on top), the baseline's mean +- SD band.
    seeds = panel(fig, "(a)")
    assert [t.get_text() for t in seeds.get_yticklabels()] == ["baseline", "tf32", "channels_last", "bf16"]
    points = {c.get_gid(): c.get_offsets() for c in seeds.collections if c.get_gid() and len(c.get_offsets())}
    for k, variant in enumerate(["baseline", "tf32", "channels_last", "bf16"]):
        xy = points[f"variant:{variant}"]
        assert sorted(xy[:, 0]) == pytest.approx(sorted(distance(variant, s) for s in SEEDS))
        assert np.all(np.abs(xy[:, 1] - k) < 0.5)
    band = [p for p in seeds.patches if p.get_label().startswith("baseline mean")][0]
    base = np.array([distance("baseline", s) for s in SEEDS])
    assert (band.get_x(), band.get_x() + band.get_width()) == pytest.approx(
        (base.mean() - base.std(ddof=1), base.mean() + base.std(ddof=1)))
    # (b) on (a)'s rows: the rerun on the baseline's, then each variant's interval and mean; +-margin; the outcome
    # on the right.
    differences = panel(fig, "(b)")
    assert differences.get_ylim() == seeds.get_ylim()
    for k, variant in enumerate(("tf32", "channels_last", "bf16"), start=1):
        found = judgement.comparisons[variant]
        (line,) = [ln for ln in differences.get_lines() if ln.get_gid() == f"variant:{variant}"]
        assert list(line.get_xdata()) == pytest.approx([found.low, found.high])
        assert list(line.get_ydata()) == [k, k]
    rerun = [c for c in differences.collections if not c.get_gid()][0].get_offsets()
    assert list(rerun[0]) == pytest.approx([judgement.rerun.difference, 0])
    margin = [p for p in differences.patches if "margin" in p.get_label()][0]
    assert (margin.get_x(), margin.get_x() + margin.get_width()) == pytest.approx(
        (-judgement.margin, judgement.margin))
    side = [child for child in differences.child_axes][0]
    assert [t.get_text() for t in side.get_yticklabels()] == ["bit-identical", "equivalent", "equivalent",
                                                              "different"]
    # (c) a band per variant over its seeds; (d) the slices of one seed.
    losses = panel(fig, "(c)")
    assert {c.get_gid() for c in losses.collections} >= {"variant:tf32", "variant:channels_last", "variant:bf16"}
    titles = [ax.get_title() for ax in fig.get_axes() if ax.get_images()]
    assert titles == ["real image", "baseline", "tf32", "channels_last", "bf16", "real image", "baseline", "tf32"]
    text = " ".join(t.get_text() for t in fig.findobj(plt.Text))
    assert "Quality claim: reproduced" in text and "Quality claim: not measurable here" in text
    # The h200 (its samples not brain-like): its variant is not judged, and says so.
    side = [child for child in panel(fig, "(b)", 1).child_axes][0]
    assert [t.get_text() for t in side.get_yticklabels()] == ["reference", "not judged"]


def test_fig09_is_legible(bundle):
    """The checks of tests/test_figure_legibility.py on a study of the new design (that file draws the tiny run's)."""
    from test_figure_legibility import data_extents, describe, draw, drawn_lines, extents, marked_colours, overlap
    from reporting.palette import variant_color

    fig, drawn = draw(BY_ID["fig09_quality"], (bundle, {}))
    canvas = fig.bbox
    assert not [describe(t) for t, box in drawn if box.x0 < canvas.x0 - 1 or box.y0 < canvas.y0 - 1
                or box.x1 > canvas.x1 + 1 or box.y1 > canvas.y1 + 1]
    assert not [what for box, what in extents(fig, fig.canvas.get_renderer()) if box.x0 < canvas.x0 - 1
                or box.y0 < canvas.y0 - 1 or box.x1 > canvas.x1 + 1 or box.y1 > canvas.y1 + 1]
    assert not [(describe(t), what) for t, box in drawn for path, clip, what in drawn_lines(fig)
                if (inside := box.intersection(box, clip)) is not None and inside.width > 2 and inside.height > 2
                and path.intersects_bbox(inside.padded(-1), filled=False)]
    assert not [f"{describe(a)} / {describe(b)}" for k, (a, box_a) in enumerate(drawn)
                for b, box_b in drawn[k + 1:] if overlap(box_a, box_b)]
    renderer = fig.canvas.get_renderer()
    for ax in fig.get_axes():
        legend = ax.get_legend()
        if legend is not None:
            box = legend.get_window_extent(renderer)
            assert not [b for b in data_extents(ax, renderer) if b.width * b.height > 0 and overlap(box, b)
                        or b.width * b.height == 0 and box.contains(b.x0, b.y0)], ax.get_title(loc="left")
    colours = marked_colours(fig)
    assert set(colours) == {"baseline", "tf32", "channels_last", "bf16"}
    assert all(found == {variant_color(variant)} for variant, found in colours.items())
    plt.close(fig)


def test_tab06_gives_each_variant_its_seeds_paired_difference_margin_and_outcome(rendered, study_tables):
    table = rendered["tab06_quality"].frame
    study = study_tables["study"]
    judgement = claims.quality_judgement(CLAIM, "a100", study[study["gpu"] == "a100"], OPTIMIZED)
    assert list(zip(table["gpu"], table["variant"])) == [
        ("a100", "baseline"), ("a100", "baseline, rerun of seed 0"), ("a100", "tf32"), ("a100", "channels_last"),
        ("a100", "bf16"), ("h200", "baseline"), ("h200", "tf32")]
    a100 = table[table["gpu"] == "a100"].set_index("variant")
    for variant in ("tf32", "channels_last", "bf16"):
        values = [distance(variant, s) for s in SEEDS]
        found = judgement.comparisons[variant]
        row = a100.loc[variant]
        assert row["seeds"] == "0-2" and row["paired_seeds"] == 3
        assert (row["wasserstein_vs_real_mean"], row["wasserstein_vs_real_sd"]) == pytest.approx(
            (np.mean(values), np.std(values, ddof=1)))
        assert (row["mean_difference"], row["interval_low"], row["interval_high"]) == pytest.approx(
            (found.mean, found.low, found.high))
        assert row["margin"] == pytest.approx(judgement.margin) and row["outcome"] == found.outcome
    assert a100.loc["baseline", "outcome"] == "reference"
    rerun = a100.loc["baseline, rerun of seed 0"]
    assert rerun["outcome"] == "weights bit-identical" and rerun["mean_difference"] == 0 and rerun["seeds"] == "0"
    h200 = table[table["gpu"] == "h200"].set_index("variant")
    assert h200.loc["tf32", "outcome"] == "not measurable here (the baseline's samples are not brain-like)"
    assert list(rendered["tab06_quality"].extra) == ["runs", "checks"]
    runs = rendered["tab06_quality"].extra["runs"]
    assert len(runs) == len(study) and list(runs["seed"][:3]) == [0, 1, 2]
    claims_table = rendered["tab05_claims"].frame
    row = claims_table[claims_table["claim"].str.startswith("synthesis quality")].set_index("gpu")
    assert row.loc["a100", "verdict"] == claims.REPRODUCED and "tf32 +0.00" in row.loc["a100", "measured"]
    assert row.loc["h200", "verdict"] == claims.NOT_MEASURABLE and "not brain-like" in row.loc["h200", "measured"]


def test_the_shipped_h200_study_is_read_like_a_measured_one_and_judged_from_its_own_numbers():
    """data/reference/wholehead/h200/study/ holds the four files per run that the reader takes, from an H200, each
    run's comparison.json against the baseline's run of its seed (the baseline's own against its seed 0), and the
    claim's verdict follows the stated rule applied by hand (scipy's t quantile) to the runs' own Wasserstein
    distances."""
    root = REPO / "data" / "reference" / "wholehead" / "h200" / "study"
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(SHIPPED_NAMES))
    runs = {(p.parts[-3], int(p.parts[-2].removeprefix("seed"))): json.loads(p.read_text())
            for p in root.rglob("run.json")}
    assert {names.name for names in files} == {"run.json", "losses.csv", "slice.npy", "comparison.json"}
    assert len(files) == 4 * len(runs) and ("baseline", 0) in runs and ("baseline", 1) in runs
    for (variant, seed) in runs:
        comparison = json.loads((root / variant / f"seed{seed}" / "comparison.json").read_text())
        assert (comparison["variant"], comparison["seed"]) == (variant, seed)
        assert comparison["reference"] == {"variant": "baseline", "seed": 0 if variant == "baseline" else seed}
    for run in runs.values():
        assert run["provenance"]["device_name"].startswith("NVIDIA H200")
        assert run["parameters"] == 40_226_433
    assert not list(root.rglob("*.pt")) and not list(root.rglob("*.nii.gz"))

    tables = collect([], files, [])
    study = tables["study"]
    assert set(study["gpu"]) == {"h200"} and len(study) == len(runs)
    assert study["ssim_vs_baseline"].notna().all()
    # The rule of data/paper_claims.yaml, by hand: paired differences by seed, their 90 % t-interval, the margin.
    distance_of = {key: run["vs_real"]["wasserstein_mean"] for key, run in runs.items()}
    base = {seed: value for (variant, seed), value in distance_of.items() if variant == "baseline"}
    margin = CLAIM["margin_factor"] * np.std(list(base.values()), ddof=1)
    outcomes = {}
    for variant in {v for v, _ in distance_of} & set(OPTIMIZED):
        d = np.array([value - base[seed] for (v, seed), value in distance_of.items() if v == variant and seed in base])
        if len(d) < CLAIM["min_seeds"]:
            outcomes[variant] = None
            continue
        half = scipy_stats.t.ppf(1 - CLAIM["alpha"], len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        low, high = d.mean() - half, d.mean() + half
        outcomes[variant] = ("equivalent" if -margin <= low and high <= margin else
                             "different" if low > margin or high < -margin else "inconclusive")
    measured, verdict = claims.quality_verdict(CLAIM, "h200", study, OPTIMIZED)
    if None in outcomes.values():
        assert verdict == claims.NOT_MEASURABLE and measured.startswith("fewer than 3 seeds paired")
    else:
        expected = (claims.REPRODUCED if set(outcomes.values()) == {"equivalent"} else
                    claims.CONTRADICTED if "different" in outcomes.values() else claims.INCONCLUSIVE)
        assert verdict == expected
        for variant, outcome in outcomes.items():
            assert f"{variant} " in measured and outcome in measured
