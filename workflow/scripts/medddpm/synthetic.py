"""A seeded stand-in for the upstream whole-head dataset, derived from the MNI152 (ICBM 2009c) T1 template and the
grey- and white-matter probability maps that nilearn ships (the files behind `load_mni152_template`,
`load_mni152_gm_template` and `load_mni152_wm_template`; nilearn ships no CSF map). Per case, all three volumes go
through one random smooth deformation; the image is the deformed T1 under a random gain, gamma and offset plus a
per-case grey- and white-matter gain applied through the deformed tissue maps (so the GM/WM contrast varies between
cases), 1-3 synthetic tumours and a smooth multiplicative bias field. The brain label is the deformed GM + WM
probability above `TISSUE_THRESHOLD` with holes (ventricles) filled; tumour labels lie inside it.

Layout and value conventions are those of the upstream data: `<root>/image/sample_<i>.nii.gz` (float32 in
[-1, 1], background -1) and `<root>/mask/sample_<i>.nii.gz` (uint8 labels 0 background, 1 brain, 2 tumor).
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import nibabel as nib
import numpy as np
from scipy.ndimage import binary_fill_holes, gaussian_filter, map_coordinates
from scipy.spatial.transform import Rotation
from scipy.special import expit

from medddpm.prepare import as_shape, staged_directory, write_nifti

# The file that nilearn.datasets.load_mni152_template() reads: 1 mm, RAS, uint8 0..255, skull-stripped brain.
TEMPLATE_FILE = "mni_icbm152_t1_tal_nlin_sym_09a_converted.nii.gz"
# The files that load_mni152_gm_template() / load_mni152_wm_template() read: same grid, uint8 probabilities 0..255.
TISSUE_FILES = (
    "mni_icbm152_gm_tal_nlin_sym_09a_converted.nii.gz",
    "mni_icbm152_wm_tal_nlin_sym_09a_converted.nii.gz",
)
BRAIN_THRESHOLD = 0.2  # nilearn's load_mni152_brain_mask threshold on the template scaled to [0, 1]
TISSUE_THRESHOLD = 0.2  # on GM + WM probability: the brain label (nilearn's load_mni152_brain_mask uses 0.2 too)
# Per-case gains added through the GM and WM probability maps (image scale [0, 1]); the template's own WM - GM
# contrast is about 0.2, so a case's WM - GM contrast ranges from about 0.6 to about 2 times it.
GM_GAIN = (-0.12, 0.04)
WM_GAIN = (-0.04, 0.12)
FIELD_OF_VIEW_MARGIN = 1.06  # field of view / brain extent: 1.5 mm spacing at 128^3, as upstream
COARSE_NODES = 12  # random-field grid nodes along the longest axis: smoothness in anatomy, not voxel, units


def _nilearn_volume(name: str) -> tuple[np.ndarray, np.ndarray]:
    """A volume of nilearn's packaged data scaled to [0, 1] by its maximum, as nilearn's loaders do, and its affine."""
    # Read the packaged file directly: importing nilearn.datasets pulls in scikit-learn (~3 s) and
    # load_mni152_template() resamples on every call, both slower than generating a small dataset.
    spec = importlib.util.find_spec("nilearn")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("nilearn is needed for the MNI152 template and tissue maps it ships")
    img = nib.load(Path(spec.submodule_search_locations[0]) / "datasets" / "data" / name)
    data = np.asarray(img.dataobj, dtype=np.float32)
    return data / data.max(), img.affine


@lru_cache(maxsize=1)
def load_template() -> tuple[np.ndarray, np.ndarray]:
    """The 1 mm MNI152 T1 template scaled to [0, 1] (float32) and its affine, read offline from nilearn's data."""
    return _nilearn_volume(TEMPLATE_FILE)


@lru_cache(maxsize=1)
def load_tissue_maps() -> tuple[np.ndarray, np.ndarray]:
    """The 1 mm MNI152 grey- and white-matter probability maps, stacked (2, X, Y, Z) float32 in [0, 1], and their
    affine (that of the T1 template), read offline from nilearn's data."""
    (gm, affine), (wm, wm_affine) = map(_nilearn_volume, TISSUE_FILES)
    if gm.shape != wm.shape or not np.allclose(affine, wm_affine):
        raise ValueError("nilearn's MNI152 grey- and white-matter maps are not on one grid")
    return np.stack([gm, wm]), affine


def draw_tissue_contrast(rng: np.random.Generator) -> tuple[float, float]:
    """A case's (grey-matter gain, white-matter gain): the first draws `synthesize_case` makes from its generator."""
    return float(rng.uniform(*GM_GAIN)), float(rng.uniform(*WM_GAIN))


def grid_affine(template: np.ndarray, affine: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """RAS affine of an isotropic grid of `shape` centred on the template's brain, spaced so the brain fills it."""
    inside = np.argwhere(template > BRAIN_THRESHOLD)
    corners = nib.affines.apply_affine(affine, np.stack([inside.min(0), inside.max(0)]))
    low, high = corners.min(0), corners.max(0)
    extent = high - low + nib.affines.voxel_sizes(affine)
    spacing = round(float(np.max(extent * FIELD_OF_VIEW_MARGIN / np.array(shape))), 3)
    grid = np.diag([spacing, spacing, spacing, 1.0])
    grid[:3, 3] = (low + high) / 2 - spacing * (np.array(shape) - 1) / 2
    return grid


def antialiased(template: np.ndarray, affine: np.ndarray, spacing: float) -> tuple[np.ndarray, np.ndarray]:
    """The template and its affine, low-passed for sampling at `spacing` mm: block-averaged by the largest integer
    factor up to half the spacing ratio (cheap), then Gaussian-smoothed for the rest (scikit-image's rescale rule,
    sigma = (ratio - 1) / 2). The last three axes are spatial; leading axes (a stack of volumes) are kept."""
    voxel = nib.affines.voxel_sizes(affine)
    block = max(1, int(spacing / voxel.max() // 2))
    lead, spatial = template.shape[:-3], template.shape[-3:]
    crop = [n - n % block for n in spatial]
    reduced = template[..., : crop[0], : crop[1], : crop[2]]
    reduced = reduced.reshape(*lead, crop[0] // block, block, crop[1] // block, block, crop[2] // block, block)
    reduced = reduced.mean((-5, -3, -1))
    # Reduced voxel i averages template voxels i*block ... i*block + block - 1.
    scale = np.diag([block, block, block, 1.0])
    scale[:3, 3] = (block - 1) / 2
    sigma = np.maximum((spacing / (voxel * block) - 1) / 2, 0.0)
    return gaussian_filter(reduced, (0.0,) * len(lead) + tuple(sigma)), affine @ scale


def _smooth_fields(rng: np.random.Generator, shape: tuple[int, ...], count: int, nodes: int, sigma: float):
    """`count` smooth random fields on `shape`, about zero mean and unit std: Gaussian-filtered white noise on a
    coarse grid (`nodes` along the longest axis, `sigma` in nodes), linearly upsampled. Cheap at any shape."""
    coarse = [max(4, round(nodes * n / max(shape))) for n in shape]
    # Separable linear interpolation as three small matrix products: several times faster than ndimage.zoom.
    weights = [
        np.stack([np.interp(np.linspace(0, c - 1, n), np.arange(c), basis) for basis in np.eye(c)], axis=1)
        for n, c in zip(shape, coarse, strict=True)
    ]
    fields = np.empty((count, *shape), np.float32)
    for k in range(count):
        field = gaussian_filter(rng.standard_normal(coarse), sigma)
        field = (field - field.mean()) / field.std()
        fields[k] = np.einsum("ai,bj,ck,ijk->abc", *weights, field, optimize=True)
    return fields


def _warp(rng: np.random.Generator, template: np.ndarray, t_affine: np.ndarray, g_affine: np.ndarray, shape):
    """Sample `template` (one volume, or a stack along the first axis) on the output grid through one random small
    affine plus a smooth elastic deformation, the same for every volume of the stack."""
    linear = Rotation.from_euler("xyz", rng.uniform(-5, 5, 3), degrees=True).as_matrix()
    # Scales >= 1 map the output grid onto a larger template region, so the brain only shrinks and stays inside.
    linear = linear @ np.diag(rng.uniform(1.0, 1.08, 3))
    shift = rng.uniform(-3, 3, 3)  # mm
    displacement = _smooth_fields(rng, shape, 3, COARSE_NODES, 1.5) * rng.uniform(1.5, 3.5)  # mm
    centre = g_affine[:3, :3] @ ((np.array(shape) - 1) / 2) + g_affine[:3, 3]
    # template voxel = T^-1 (centre + shift + L (G v - centre) + u(v)) for output voxel v, split into a part that
    # is linear in v (built by broadcasting) and the displacement term.
    to_voxel = np.linalg.inv(t_affine)
    per_index = to_voxel[:3, :3] @ linear @ g_affine[:3, :3]
    offset = to_voxel[:3, :3] @ (centre + shift + linear @ (g_affine[:3, 3] - centre)) + to_voxel[:3, 3]
    coords = np.einsum("ik,k...->i...", to_voxel[:3, :3].astype(np.float32), displacement)
    index = np.ix_(*(np.arange(n, dtype=np.float32) for n in shape))
    for i in range(3):
        coords[i] += offset[i] + sum(per_index[i, j] * index[j] for j in range(3))
    if template.ndim == 3:
        return map_coordinates(template, coords, order=1, mode="constant", cval=0.0, output=np.float32)
    sampled = [map_coordinates(v, coords, order=1, mode="constant", cval=0.0, output=np.float32) for v in template]
    return np.stack(sampled)


def _add_tumours(
    rng: np.random.Generator, tissue: np.ndarray, brain: np.ndarray, intensity: np.ndarray, texture: np.ndarray
) -> np.ndarray:
    """Blend 1-3 smooth, slightly irregular ellipsoidal tumours centred in brain tissue into `intensity` (in place),
    each darker or brighter than brain; return their membership in [0, 1]."""
    shape = np.array(tissue.shape)
    membership = np.zeros(tissue.shape, np.float32)
    candidates = np.argwhere(tissue > 0.5)  # deep tissue, so the blob centre is always labelled brain
    for _ in range(rng.integers(1, 4) if len(candidates) else 0):
        centre = candidates[rng.integers(len(candidates))]
        radii = np.maximum(rng.uniform(0.05, 0.14) * shape.max() * rng.uniform(0.75, 1.25, 3), 0.75)
        low = np.maximum(np.floor(centre - 2 * radii).astype(int), 0)
        high = np.minimum(np.ceil(centre + 2 * radii).astype(int) + 1, shape)
        box = tuple(slice(a, b) for a, b in zip(low, high, strict=True))
        grids = np.ix_(*(np.arange(a, b) for a, b in zip(low, high, strict=True)))
        distance = np.sqrt(sum(((g - c) / r) ** 2 for g, c, r in zip(grids, centre, radii, strict=True)))
        distance = distance + 0.2 * np.tanh(texture[box])  # bounded, so the centre stays inside the blob
        soft = expit((1.0 - distance) / rng.uniform(0.1, 0.25)).astype(np.float32)
        # A lesion replaces most of the tissue contrast with its own, heterogeneous, level.
        level = rng.uniform(0.85, 1.0) if rng.random() < 0.5 else rng.uniform(0.1, 0.3)
        # Confined to the brain so that lesion intensity never spills into voxels labelled background.
        weight = soft * rng.uniform(0.6, 0.9) * brain[box]
        lesion = level * (1.0 + 0.15 * np.tanh(texture[box]))
        intensity[box] = (1.0 - weight) * intensity[box] + weight * lesion
        membership[box] = np.maximum(membership[box], soft)
    return membership


def synthesize_case(
    rng: np.random.Generator, template: np.ndarray, t_affine: np.ndarray, g_affine: np.ndarray, shape
) -> tuple[np.ndarray, np.ndarray]:
    """One case on the grid `g_affine`/`shape`: (image float32 in [-1, 1], labels uint8 in {0, 1, 2}).

    `template` is the stack (3, X, Y, Z) of T1 template, grey-matter and white-matter probability maps on one grid
    (`t_affine`), as `write_synthetic_dataset` builds it from `load_template` and `load_tissue_maps`."""
    if template.ndim != 4 or template.shape[0] != 3:
        raise ValueError(f"need a (T1, GM, WM) stack of shape (3, X, Y, Z), got shape {template.shape}")
    gm_gain, wm_gain = draw_tissue_contrast(rng)
    t1, gm, wm = _warp(rng, template, t_affine, g_affine, shape)
    tissue = gm + wm
    brain = binary_fill_holes(tissue > TISSUE_THRESHOLD)
    gain, offset, gamma = rng.uniform(0.85, 1.05), rng.uniform(-0.04, 0.04), rng.uniform(0.75, 1.35)
    # Fades the offset out at the brain edge so the background stays exactly at the minimum.
    intensity = gain * t1**gamma + offset * np.clip(t1 / BRAIN_THRESHOLD, 0.0, 1.0)
    intensity += gm_gain * gm + wm_gain * wm  # the case's own tissue contrast
    texture = _smooth_fields(rng, shape, 1, 24, 1.0)[0]
    membership = _add_tumours(rng, tissue, brain, intensity, texture)
    bias_field = np.exp(rng.uniform(0.05, 0.2) * _smooth_fields(rng, shape, 1, COARSE_NODES, 3.0)[0])
    image = (np.clip(intensity * bias_field, 0.0, 1.0) * 2.0 - 1.0).astype(np.float32)
    labels = brain.astype(np.uint8)
    labels[(membership > 0.5) & brain] = 2
    return image, labels


def write_synthetic_dataset(root: Path, cases: int, shape: tuple[int, int, int], seed: int) -> list[Path]:
    """Write `cases` synthetic pairs under `root/image` and `root/mask`; return the written files, image then mask
    per case. The same (cases, shape, seed) give byte-identical files; `root` appears only when all are written."""
    root, shape = Path(root), as_shape(shape)
    if cases < 1 or seed < 0:
        raise ValueError(f"need cases >= 1 and seed >= 0, got cases={cases}, seed={seed}")
    template, t_affine = load_template()
    tissue_maps, m_affine = load_tissue_maps()
    if tissue_maps.shape[1:] != template.shape or not np.allclose(m_affine, t_affine):
        raise ValueError("nilearn's MNI152 tissue maps and T1 template are not on one grid")
    g_affine = grid_affine(template, t_affine, shape)
    smoothed, s_affine = antialiased(np.concatenate([template[None], tissue_maps]), t_affine, g_affine[0, 0])
    written = []
    with staged_directory(root, owned={"image", "mask"}) as staging:
        for sub in ("image", "mask"):
            (staging / sub).mkdir()
        for case in range(cases):
            image, labels = synthesize_case(np.random.default_rng([seed, case]), smoothed, s_affine, g_affine, shape)
            for sub, data in (("image", image), ("mask", labels)):
                write_nifti(data, g_affine, staging / sub / f"sample_{case}.nii.gz")
                written.append(root / sub / f"sample_{case}.nii.gz")
    return written
