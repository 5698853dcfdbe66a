"""tab06: numeric fidelity and image quality per variant and device."""

from __future__ import annotations

from ..render import Table


def build(job) -> Table:
    return Table(job.results.table("quality"),
                 "Quality per variant: relative error vs float64, loss deviation vs baseline, SSIM/PSNR")
