"""Loading of prepared data (see ``medddpm.prepare``) as upstream's whole-head loader presents it to the model.

Upstream's tensor-level transforms are kept exactly, axis swap included:
condition ``(t * 2 - 1).permute(3, 0, 1, 2).transpose(3, 1)`` on the (D, W, H, 2) one-hot mask and target
``t.unsqueeze(0).transpose(3, 1)`` on the (D, W, H) image. ``transpose(3, 1)`` swaps the first and last spatial
axes, so a volume of shape (D, W, H) comes out as (C, H, W, D); for upstream's cubic volumes that is (C, D, W, H).
Image and mask go through the same swap, so they stay aligned.
"""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import torch
from torch.utils.data import Dataset

from medddpm.prepare import MANIFEST_NAME, DatasetError, manifest_files


def load_condition(mask_path: Path) -> torch.Tensor:
    """A prepared one-hot mask as upstream's condition tensor: float32 (2, H, W, D) in {-1, +1}, contiguous."""
    data = np.asarray(nib.load(mask_path).dataobj)
    if data.ndim != 4 or data.shape[-1] != 2:
        raise DatasetError(f"{mask_path}: expected a (D, W, H, 2) one-hot mask, got shape {data.shape}")
    condition = torch.from_numpy(data).float() * 2 - 1
    return condition.permute(3, 0, 1, 2).transpose(3, 1).contiguous()


def load_target(image_path: Path) -> torch.Tensor:
    """A prepared image as upstream's target tensor: float32 (1, H, W, D), contiguous."""
    data = np.asarray(nib.load(image_path).dataobj, dtype=np.float32)
    if data.ndim != 3:
        raise DatasetError(f"{image_path}: expected a 3-D image, got shape {data.shape}")
    return torch.from_numpy(data).unsqueeze(0).transpose(3, 1).contiguous()


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
        self._cache: dict[int, dict[str, torch.Tensor]] = {}

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index not in self._cache:
            self._cache[index] = {"input": load_condition(self.masks[index]), "target": load_target(self.images[index])}
        return self._cache[index]
