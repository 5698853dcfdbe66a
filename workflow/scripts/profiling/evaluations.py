"""The U-Net evaluations of a sampling profile (the profile job's sample phase: torch.profiler over evaluations
replayed from one CUDA graph), told apart in its kernel table (tables.from_torch) by their convolution launches."""

from __future__ import annotations

import pandas as pd

from .errors import ProfilingError

# cuDNN's workspace set-up: launched beside some convolutions, in the convolution class, not a convolution itself.
SETUP_KERNELS = ("init_device_workspace_kernel",)


def convolution_launches(kernels: pd.DataFrame) -> pd.DataFrame:
    """The table's forward-convolution kernels in launch order, cuDNN's workspace set-up left out."""
    ordered = kernels.sort_values("launch", kind="stable")
    return ordered[(ordered["kernel_class"] == "conv_fprop") & ~ordered["short_name"].isin(SETUP_KERNELS)]


def _evaluations(convs: pd.DataFrame, source: str) -> int:
    names = convs["name"].tolist()
    for period in range(1, len(names) // 2 + 1):
        if len(names) % period == 0 and names == names[:period] * (len(names) // period):
            return len(names) // period
    raise ProfilingError(f"{source}: its {len(names)} convolution launches do not repeat as equal evaluations")


def evaluation_count(kernels: pd.DataFrame, source: str = "the profile") -> int:
    """How many evaluations the table holds: how often its shortest run of convolution kernels repeats to make the
    whole sequence. Not how often the first convolution's kernel runs: cuDNN may pick that kernel for another
    convolution of the same evaluation too (on an H100 for frontier_graphed's first and last). Raises ProfilingError
    naming `source` where the sequence does not repeat evenly."""
    return _evaluations(convolution_launches(kernels), source)


def first_and_last_convolution(kernels: pd.DataFrame, source: str = "the profile") -> tuple[int, int]:
    """The launch numbers of the first evaluation's first and last convolution kernel."""
    convs = convolution_launches(kernels)
    per_evaluation = len(convs) // _evaluations(convs, source)
    return int(convs.iloc[0]["launch"]), int(convs.iloc[per_evaluation - 1]["launch"])
