"""profiling.evaluations on sampling profiles recorded on GPUs (each four U-Net evaluations replayed from a graph)."""

from pathlib import Path

import pandas as pd
import pytest

from profiling.errors import ProfilingError
from profiling.evaluations import convolution_launches, evaluation_count, first_and_last_convolution

REPO = Path(__file__).resolve().parents[1]
H200_GRAPHED = REPO / "data/measurements/h200-2026-12-04-sample-profile/torch_kernels.parquet"
H100 = REPO / "data/measurements/h100-2026-12-05-ndhwc-edges"
# The edges as matrix products: the evaluation's first and last launches are no longer convolutions.
H200_EDGE_GEMMS = REPO / ("data/measurements/2026-12-06-fastest/h200/results/wholehead/h200/"
                          "frontier_gemm_dense_embedding/profile/sample/torch_kernels.parquet")


@pytest.mark.parametrize("path", [H200_GRAPHED, H100 / "frontier_graphed/sample/torch_kernels.parquet",
                                  H100 / "frontier_edges/sample/torch_kernels.parquet", H200_EDGE_GEMMS])
def test_four_evaluations_in_each_recorded_sampling_profile(path):
    kernels = pd.read_parquet(path)
    assert evaluation_count(kernels) == 4
    first, last = first_and_last_convolution(kernels)
    convs = convolution_launches(kernels)
    # The first evaluation's launches: a quarter of the convolutions, from the first one on.
    assert first == convs["launch"].min()
    assert (convs["launch"] <= last).sum() == len(convs) // 4


def test_a_kernel_shared_by_two_convolutions_does_not_double_the_count():
    """On the H100 cuDNN runs frontier_graphed's first and last convolution with one kernel: counting that kernel
    would say 8 evaluations."""
    kernels = pd.read_parquet(H100 / "frontier_graphed/sample/torch_kernels.parquet")
    names = convolution_launches(kernels)["name"]
    assert (names == names.iloc[0]).sum() == 8
    assert evaluation_count(kernels) == 4


def test_a_profile_cut_inside_an_evaluation_is_named():
    kernels = pd.read_parquet(H200_GRAPHED)
    cut = kernels[kernels["launch"] < convolution_launches(kernels)["launch"].iloc[-1]]
    with pytest.raises(ProfilingError, match=r"^cut\.parquet: its 191 convolution launches do not repeat"):
        evaluation_count(cut, "cut.parquet")
