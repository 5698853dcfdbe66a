"""Loading of prepared data (see ``medddpm.prepare``) as upstream's loaders present it to the model.

Upstream's tensor-level transforms are kept exactly, axis swap included:
condition ``t.permute(3, 0, 1, 2).transpose(3, 1)`` on the (D, W, H, K) one-hot mask, mapped to {-1, +1} first for
the whole-head model (``t * 2 - 1``) and left in {0, 1} for BraTS; target ``t.unsqueeze(0).transpose(3, 1)`` on a
(D, W, H) image, ``t.permute(3, 0, 1, 2).transpose(3, 1)`` on BraTS's (D, W, H, 4) modalities. ``transpose(3, 1)``
swaps the first and last spatial axes, so a volume of shape (D, W, H) comes out as (C, H, W, D); for upstream's
cubic whole-head volumes that is (C, D, W, H), for BraTS's 192 x 192 x 144 it is (C, 144, 192, 192). Image and mask
go through the same swap, so they stay aligned.
"""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import torch
from torch.utils.data import Dataset

from medddpm.prepare import (MANIFEST_NAME, WHOLEHEAD_CONDITION, DatasetError, condition_values, file_shape,
                             heldout_images, heldout_masks, manifest_files, to_image_axes, write_nifti)


def load_condition(mask_path: Path, values: tuple[float, float] = WHOLEHEAD_CONDITION) -> torch.Tensor:
    """A prepared one-hot mask as upstream's condition tensor: float32 (K, H, W, D), contiguous, its 0 and 1 mapped
    to `values` (whole-head: {-1, +1}; BraTS: {0, 1}, see ``prepare.condition_values``)."""
    data = np.asarray(nib.load(mask_path).dataobj)
    if data.ndim != 4:
        raise DatasetError(f"{mask_path}: expected a (D, W, H, K) one-hot mask, got shape {data.shape}")
    condition = torch.from_numpy(data).float()
    low, high = values
    if (low, high) != (0.0, 1.0):
        condition = condition * (high - low) + low
    return condition.permute(3, 0, 1, 2).transpose(3, 1).contiguous()


def load_target(image_path: Path) -> torch.Tensor:
    """A prepared image as upstream's target tensor: float32 (C, H, W, D), contiguous (C = 1 for a 3-D image, the
    modalities for a 4-D one)."""
    data = np.asarray(nib.load(image_path).dataobj, dtype=np.float32)
    if data.ndim == 3:
        return torch.from_numpy(data).unsqueeze(0).transpose(3, 1).contiguous()
    if data.ndim == 4:
        return torch.from_numpy(data).permute(3, 0, 1, 2).transpose(3, 1).contiguous()
    raise DatasetError(f"{image_path}: expected a 3-D image or 4-D modalities, got shape {data.shape}")


class PreparedPairs(Dataset):
    """The prepared cases of one split of `out_dir`, as ``{"input": condition, "target": image}`` dicts.

    Volumes are read on first access and then kept in memory; the cached tensors are returned as they are, so
    callers must not modify them in place (the default DataLoader collation copies them into a new batch).
    """

    def __init__(self, out_dir: Path, split: str = "train") -> None:
        self.images = manifest_files(out_dir, split, "image")
        self.masks = manifest_files(out_dir, split, "mask")
        if not self.images or len(self.images) != len(self.masks):
            raise DatasetError(f"{Path(out_dir) / MANIFEST_NAME}: no complete image/mask pairs in split {split!r}")
        self.values = condition_values(out_dir)
        self._cache: dict[int, dict[str, torch.Tensor]] = {}

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index not in self._cache:
            self._cache[index] = {"input": load_condition(self.masks[index], self.values),
                                  "target": load_target(self.images[index])}
        return self._cache[index]


class HeldOut:
    """The first `count` held-out cases of a prepared dataset (all of them when None), as the sampling jobs use them:
    each mask's condition on the device, and each sample written as a NIfTI on its real image's grid."""

    def __init__(self, out_dir: Path, count: int | None = None) -> None:
        self.masks = heldout_masks(out_dir)[:count]
        self.images = heldout_images(out_dir)[:count]
        self.values = condition_values(out_dir)

    def __len__(self) -> int:
        return len(self.masks)

    def condition(self, index: int) -> torch.Tensor:
        """The condition of mask `index`, (K, H, W, D) on the CPU (load_condition)."""
        return load_condition(self.masks[index], self.values)

    def conditions(self, placement) -> list[torch.Tensor]:
        """The condition of each mask, one batch of one on the device in the placement's layout."""
        return [placement.input(self.condition(index).unsqueeze(0)) for index in range(len(self))]

    def shape(self) -> list[int]:
        """(D, W, H) of the volumes, in the files' axis order."""
        return file_shape(self.images[0])

    def write(self, volume: torch.Tensor, index: int, path: Path) -> None:
        """A sampled (1, C, H, W, D) volume of mask `index` as a NIfTI with its real image's affine."""
        write_nifti(to_image_axes(volume), nib.load(self.images[index]).affine, Path(path))

