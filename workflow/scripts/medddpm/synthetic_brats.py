"""A seeded stand-in for raw BraTS 2021, for timing the BraTS workload without the data (no download): the same
MNI152 template and grey- and white-matter maps as ``medddpm.synthetic``, through one random smooth deformation
per case, rendered as four MRI contrasts with a tumour of BraTS's three sub-regions.

Written in the raw BraTS 2021 layout (``<root>/BraTS2021_<id>/BraTS2021_<id>_{t1,t1ce,t2,flair,seg}.nii.gz``): int16
raw intensities, 0 outside the (skull-stripped) brain, LPS orientation, and a seg with the raw labels {0, 1 necrotic
core, 2 oedema, 4 enhancing tumour}; the brain itself is unlabelled, as in BraTS. The grid covers BraTS's field of
view (240 x 240 x 155 mm) with `raw_shape(shape)` voxels: 240 x 240 x 155 at 1 mm for the prepared 192 x 192 x 144,
proportionally fewer (coarser voxels) for smaller test shapes, so that preparation crops as it does on real files.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from scipy.ndimage import binary_fill_holes

from .brats import BRATS_SHAPE, MODALITIES, RAW_SHAPE, SEG
from .prepare import as_shape, staged_directory, write_nifti
from .synthetic import (
    BRAIN_THRESHOLD,
    COARSE_NODES,
    TISSUE_THRESHOLD,
    _smooth_fields,
    _warp,
    antialiased,
    load_template,
    load_tissue_maps,
)

FIELD_OF_VIEW_MM = (240.0, 240.0, 155.0)
# Relative intensity per modality of: CSF, grey matter, white matter, necrotic core, oedema, enhancing tumour.
CONTRAST = {
    "t1": (0.25, 0.55, 0.80, 0.30, 0.45, 0.60),
    "t1ce": (0.25, 0.55, 0.80, 0.30, 0.45, 1.00),
    "t2": (1.00, 0.60, 0.40, 0.90, 0.85, 0.65),
    "flair": (0.20, 0.60, 0.45, 0.55, 0.95, 0.70),
}
# Raw intensity of a relative 1.0 (scanner units differ per modality in BraTS; the rescale removes them).
RAW_SCALE = {"t1": 1000.0, "t1ce": 1500.0, "t2": 2500.0, "flair": 800.0}
# Tumour sub-regions by normalised distance from the tumour's centre: core, enhancing rim, oedema around them.
NCR_RADIUS, ET_RADIUS, ED_RADIUS = 0.4, 0.65, 1.3
CASE_FOLDER = re.compile(r"BraTS2021_\d{5}")


def raw_shape(shape) -> tuple[int, int, int]:
    """The raw grid for a prepared `shape`: BraTS's 240 x 240 x 155 scaled as `shape` is to 192 x 192 x 144."""
    return tuple(max(2, round(s * r / p)) for s, r, p in zip(as_shape(shape), RAW_SHAPE, BRATS_SHAPE))


def brats_grid_affine(template: np.ndarray, affine: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """LPS affine of a grid of `shape` spanning BraTS's field of view, centred on the template's brain."""
    inside = np.argwhere(template > BRAIN_THRESHOLD)
    corners = np.stack([inside.min(0), inside.max(0)])
    world = corners @ affine[:3, :3].T + affine[:3, 3]
    centre = world.mean(0)
    spacing = np.array(FIELD_OF_VIEW_MM) / np.array(shape)
    grid = np.diag([-spacing[0], -spacing[1], spacing[2], 1.0])
    grid[:3, 3] = centre - grid[:3, :3] @ ((np.array(shape) - 1) / 2)
    return grid


def _tumour(rng: np.random.Generator, tissue: np.ndarray, brain: np.ndarray, spacing: np.ndarray,
            texture: np.ndarray) -> np.ndarray:
    """Raw BraTS labels of one tumour (1 core, 4 enhancing rim, 2 oedema) centred in deep tissue, inside the brain."""
    seg = np.zeros(tissue.shape, np.uint8)
    candidates = np.argwhere(tissue > 0.5)
    if not len(candidates):
        return seg
    centre = candidates[rng.integers(len(candidates))]
    radii = np.maximum(rng.uniform(12.0, 22.0) * rng.uniform(0.8, 1.2, 3) / spacing, 0.75)  # mm -> voxels
    grids = np.ix_(*(np.arange(n) for n in tissue.shape))
    distance = np.sqrt(sum(((g - c) / r) ** 2 for g, c, r in zip(grids, centre, radii)))
    distance = distance + 0.15 * np.tanh(texture)
    seg[(distance < ED_RADIUS) & brain] = 2
    seg[(distance < ET_RADIUS) & brain] = 4
    seg[(distance < NCR_RADIUS) & brain] = 1
    return seg


def synthesize_brats_case(rng: np.random.Generator, stack: np.ndarray, s_affine: np.ndarray, g_affine: np.ndarray,
                          shape: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """One case on the grid `g_affine`/`shape`: the four modalities (int16 raw intensities) and the seg (uint8,
    raw labels). `stack` is (GM, WM) on `s_affine`, as `write_synthetic_brats` builds it."""
    gm, wm = _warp(rng, stack, s_affine, g_affine, shape)
    tissue = gm + wm
    brain = binary_fill_holes(tissue > TISSUE_THRESHOLD)
    fractions = np.stack([np.clip(1.0 - tissue, 0.0, 1.0), gm, wm]) * brain
    fractions /= np.maximum(fractions.sum(0), 1e-6)
    spacing = np.abs(np.diag(g_affine)[:3])
    texture = _smooth_fields(rng, shape, 1, 24, 1.0)[0]
    seg = _tumour(rng, tissue, brain, spacing, texture)
    regions = [seg == 1, seg == 2, seg == 4]
    volumes = {}
    for role in MODALITIES:
        csf, grey, white, ncr, ed, et = CONTRAST[role]
        relative = np.tensordot(np.array([csf, grey, white]), fractions, axes=1)
        for region, level in zip(regions, (ncr, ed, et)):
            relative[region] = level * (1.0 + 0.1 * np.tanh(texture[region]))
        bias = np.exp(rng.uniform(0.05, 0.15) * _smooth_fields(rng, shape, 1, COARSE_NODES, 3.0)[0])
        raw = relative * bias * rng.uniform(0.9, 1.1) * RAW_SCALE[role]
        # Skull-stripped: 0 outside the brain, at least 1 inside it (so T1 > its minimum marks the brain).
        volumes[role] = np.where(brain, np.clip(np.rint(raw), 1, np.iinfo(np.int16).max), 0).astype(np.int16)
    volumes[SEG] = seg
    return volumes


def write_synthetic_brats(root: Path, cases: int, shape, seed: int) -> list[Path]:
    """Write `cases` synthetic raw BraTS cases for the prepared `shape` under `root`; return the written files. The
    same (cases, shape, seed) give byte-identical files; `root` appears only when all are written."""
    root, grid_shape = Path(root), raw_shape(shape)
    if cases < 1 or seed < 0:
        raise ValueError(f"need cases >= 1 and seed >= 0, got cases={cases}, seed={seed}")
    template, t_affine = load_template()
    tissue_maps, _ = load_tissue_maps()
    g_affine = brats_grid_affine(template, t_affine, grid_shape)
    spacing = float(np.abs(np.diag(g_affine)[:3]).max())
    stack, s_affine = antialiased(tissue_maps, t_affine, spacing)
    owned = {p.name for p in root.iterdir() if CASE_FOLDER.fullmatch(p.name)} if root.is_dir() else set()
    written = []
    with staged_directory(root, owned=owned) as staging:
        for case in range(cases):
            name = f"BraTS2021_{case:05d}"
            volumes = synthesize_brats_case(np.random.default_rng([seed, case]), stack, s_affine, g_affine,
                                            grid_shape)
            (staging / name).mkdir()
            for role, data in volumes.items():
                write_nifti(data, g_affine, staging / name / f"{name}_{role}.nii.gz")
                written.append(root / name / f"{name}_{role}.nii.gz")
    return written
