"""Loss curves of the quality study, compared after smoothing (pandas only: the figures use it too)."""

from __future__ import annotations

import pandas as pd

# The share of the last optimizer steps whose mean loss is a run's final loss.
FINAL_SHARE = 0.1
# Loss curves are compared after a trailing moving mean over this share of the steps: single-step losses of a
# diffusion model scatter with the drawn time step and noise far more than the curves of two runs differ.
SMOOTHING_SHARE = 0.05


def smoothing_window(steps: int) -> int:
    return max(1, round(steps * SMOOTHING_SHARE))


def smoothed(losses: pd.Series, steps: int) -> pd.Series:
    """Trailing moving mean over SMOOTHING_SHARE of `steps` (at least one step)."""
    return losses.rolling(smoothing_window(steps), min_periods=1).mean()


def final_loss(losses: pd.Series) -> float:
    """Mean loss over the last FINAL_SHARE of the steps (at least one)."""
    return float(losses.iloc[-max(1, round(len(losses) * FINAL_SHARE)):].mean())
