"""Variant switches really change the backend flags and the memory format; labels are checked."""

import pytest
import torch

from measurement.devices import DeviceMismatch, resolve_device
from medddpm.unet import UNet3D, UNetConfig
from medddpm.variants import Variant, apply_backend, backend_flags, prepare_input, prepare_model

HARDWARE = {"cpu": {"device": "cpu"}, "h200": {"device": "cuda", "name_pattern": "H200"}}


@pytest.mark.parametrize(
    "switches",
    [
        {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False},
        {"cudnn_tf32": True, "matmul_tf32": True, "channels_last": True},
        {"cudnn_tf32": True, "matmul_tf32": False, "channels_last": False},
        {"cudnn_tf32": False, "matmul_tf32": True, "channels_last": False, "cudnn_benchmark": True},
    ],
)
def test_backend_flags_follow_the_variant(switches):
    variant = Variant.from_config("v", switches)
    apply_backend(variant)
    flags = backend_flags()
    assert flags["cudnn_tf32"] == switches["cudnn_tf32"]
    assert flags["matmul_tf32"] == switches["matmul_tf32"]
    assert flags["cudnn_benchmark"] == switches.get("cudnn_benchmark", False)


def test_channels_last_changes_weights_and_inputs_memory_format():
    model = UNet3D(UNetConfig(base_width=32))
    x = torch.randn(1, 3, 16, 16, 16)
    cl = Variant("cl", False, False, True)
    prepare_model(model, cl)
    weight = model.input_blocks[0][0].weight
    assert weight.is_contiguous(memory_format=torch.channels_last_3d) and not weight.is_contiguous()
    assert prepare_input(x, cl).is_contiguous(memory_format=torch.channels_last_3d)
    assert not prepare_input(x, cl).is_contiguous()
    assert prepare_input(x, Variant("b", False, False, False)).is_contiguous()


def test_unknown_switch_is_rejected_with_its_name():
    with pytest.raises(ValueError, match="fp8"):
        Variant.from_config("x", {"cudnn_tf32": True, "matmul_tf32": True, "channels_last": False, "fp8": True})


def test_tf32_switches_are_marked_without_effect_on_cpu():
    effective = Variant("tf32", True, True, False).effective_on(torch.device("cpu"))
    assert effective["cudnn_tf32"] is False and effective["channels_last"] is True


def test_cpu_label_resolves_to_cpu():
    assert resolve_device("cpu", HARDWARE) == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_gpu_label_without_that_gpu_is_a_clear_error():
    with pytest.raises(DeviceMismatch, match="'h200'.*no CUDA device"):
        resolve_device("h200", HARDWARE)


def test_undefined_label_and_emulation():
    with pytest.raises(DeviceMismatch, match="not defined"):
        resolve_device("mi300", HARDWARE)
    assert resolve_device("h200", HARDWARE, emulate_gpus_on_cpu=True) == torch.device("cpu")
