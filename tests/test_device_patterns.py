"""The device-name patterns have one home, config.yaml's `hardware`: the roofline's datasheet ceilings
(data/gpu_peaks.yaml) are keyed by hardware label and find a device under another label through those patterns."""

from pathlib import Path

import yaml

from reporting.outputs.fig10_roofline import peaks_for

REPO = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((REPO / "config.yaml").read_text())
PEAKS = yaml.safe_load((REPO / "data" / "gpu_peaks.yaml").read_text())


def test_datasheet_ceilings_are_keyed_by_hardware_labels_without_patterns_of_their_own():
    assert set(PEAKS) <= set(CONFIG["hardware"])
    assert not [label for label, entry in PEAKS.items() if "name_pattern" in entry]


def test_a_label_without_ceilings_finds_them_through_the_configured_device_pattern():
    hardware = CONFIG["hardware"]
    assert peaks_for(PEAKS, "h200", "NVIDIA H200", hardware) is PEAKS["h200"]
    assert peaks_for(PEAKS, "lab_gpu", "NVIDIA H200", hardware) is PEAKS["h200"]
    assert peaks_for(PEAKS, "lab_gpu", "NVIDIA A100-SXM4-80GB", hardware) is PEAKS["a100"]
    # \b keeps an H200 pattern from matching a GH200; without the config, only the label itself finds ceilings.
    assert peaks_for(PEAKS, "lab_gpu", "NVIDIA GH200 480GB", hardware) is None
    assert peaks_for(PEAKS, "lab_gpu", "NVIDIA H200", None) is None
