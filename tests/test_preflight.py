"""The preflight of a timed campaign (profiling.preflight, the `preflight` rule) on the CPU: the precisions and
layouts the variants use, the float64 reference it compares with (against torch's own float64 convolution), the job's
record, and what a CPU cannot measure. Its CUDA path (cuDNN's kernels, TF32, fp16, the fallback) is tested on a GPU:
tests/test_gpu_paths.py::test_the_preflight_on_the_gpu_checks_every_precision_and_finds_the_fallback. A timed job's
refusals of a record that does not hold for it are cases of tests/test_errors.py (preflight-*)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
import yaml

from conftest import REPO, Files, Params, run_script
from profiling import preflight
from measurement.conv_checks import Check, checks_for, precision_of
from planning.configcheck import read_mapping

CPU = {"label": "cpu", "device": "cpu", "name_pattern": None, "emulate_gpus_on_cpu": False}


def test_every_combination_is_checked_with_the_variants_that_use_it():
    variants = yaml.safe_load((REPO / "config.yaml").read_text())["variants"]
    assert [precision_of(variants[name]) for name in ("baseline", "torch_defaults", "tf32", "bf16")] == \
        ["fp32", "tf32", "tf32", "bf16"]
    assert precision_of({"autocast": "float16", "cudnn_tf32": True}) == "fp16"
    found = checks_for({"baseline": {}, "channels_last": {"channels_last": True},
                        "tf32": {"cudnn_tf32": True, "matmul_tf32": True}, "tf32_again": {"cudnn_tf32": True},
                        "bf16_tuned": {"autocast": "bfloat16", "channels_last": True, "cudnn_benchmark": True}})
    assert len(found) == 4 * 2 * 2 and len({check.key for check in found}) == 16  # a variant added later is covered
    used = {check.key: check.variants for check in found if check.variants}
    assert used == {("fp32", False, False): ("baseline",), ("fp32", True, False): ("channels_last",),
                    ("tf32", False, False): ("tf32", "tf32_again"), ("bf16", True, True): ("bf16_tuned",)}


def test_the_reference_is_the_convolution_in_float64():
    """At the sampled points (the first, the last, random ones), the sums of products equal torch's own float64
    convolution of the same inputs."""
    x, weight, bias = preflight._inputs(5, (4, 6, 7), torch.device("cpu"), seed=3)
    points = preflight.sample_points((4, 6, 7), 50, seed=3)
    assert points[0] == 0 and points[-1] == 4 * 6 * 7 - 1 and len(points) < 4 * 6 * 7
    whole = F.conv3d(x.double(), weight.double(), bias.double(), padding=1)[0].reshape(5, -1)
    torch.testing.assert_close(preflight.reference_at(x, weight, bias, points), whole[:, points].T, rtol=1e-12,
                               atol=1e-12)


def preflight_job(tmp_path, run_variants, shape=(16, 16, 16), channels=32):
    """workflow/scripts/preflight.py on this CPU, the configured variants `run_variants` (the study: the baseline)."""
    out = tmp_path / "preflight.json"
    config = read_mapping(REPO / "config.yaml") | {"run_variants": run_variants}
    config["quality_study"]["variants"] = ["baseline"]
    run_script("preflight.py", params=Params(device=CPU, conv={"shape": list(shape), "channels": channels}),
               config=config, wildcards=SimpleNamespace(gpu="cpu"), output=Files(out),
               log=Files(tmp_path / "preflight.log"))
    return out


def test_the_cpu_preflight_checks_fp32_and_bf16_and_says_what_it_cannot_measure(tmp_path):
    record = json.loads(preflight_job(tmp_path, ["baseline", "channels_last", "tf32", "bf16"]).read_text())
    assert record["passed"] is True
    assert record["stack"] == {"device_name": record["provenance"]["host_cpu"], "torch": torch.__version__}
    by_name = {check["name"]: check for check in record["checks"]}
    assert len(by_name) == 16
    for name in ("fp32 conv3d (contiguous)", "fp32 conv3d (channels-last)"):
        assert by_name[name]["passed"] is True and by_name[name]["max_error"] < 1e-4
        assert by_name[name]["shape"] == [1, 32, 16, 16, 16] and by_name[name]["points"] == 16 ** 3  # every point
        assert by_name[name]["cudnn"] == "not measurable here: cuDNN runs on CUDA GPUs"
    assert by_name["fp32 conv3d (contiguous)"]["variants"] == ["baseline"]
    for name in ("bf16 conv3d (contiguous)", "bf16 conv3d (channels-last)"):  # bf16 autocast runs on a CPU too
        assert by_name[name]["passed"] is True and 1e-3 < by_name[name]["max_error"] < 8e-2  # its rounding shows
    assert by_name["bf16 conv3d (channels-last)"]["variants"] == []  # checked for a variant added later
    for name in ("tf32 conv3d (contiguous)", "fp16 conv3d (contiguous)", "fp32 conv3d (contiguous, cudnn.benchmark)"):
        assert by_name[name]["passed"] is None and by_name[name]["state"].startswith("not measurable here: ")
    log = (tmp_path / "preflight.log").read_text()
    assert "fp32 conv3d (contiguous) (baseline): passed" in log
    assert "tf32 conv3d (contiguous) (tf32): not measurable here" in log
    assert "bf16 conv3d (channels-last) (no configured variant): passed" in log


@pytest.mark.parametrize("wrong", ["last slice", "everywhere"])
def test_a_convolution_wrong_where_it_is_large_fails_its_check(monkeypatch, wrong):
    """A kernel returning wrong results only at the far end of a large volume (an index past 2^31, as in the known
    cuDNN fault) or everywhere: the sampled points include the last one, and the check fails with the size of
    the error."""
    right = F.conv3d

    def conv3d(*args, **kwargs):
        out = right(*args, **kwargs)
        if wrong == "last slice":
            out[:, :, -1, -1, :] = 0.0
        else:
            out = out * 1.01
        return out

    monkeypatch.setattr(preflight.F, "conv3d", conv3d)
    record = preflight.run_check(Check("fp32", False, False, ("baseline",)), 8, (8, 8, 8), torch.device("cpu"))
    assert record["passed"] is False and record["max_error"] > 1e-3
    assert record["state"].startswith("fp32 conv3d (contiguous) of 1x8x8x8x8 differs from float64 by ")
