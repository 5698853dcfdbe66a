"""Params are the contract between the rules and the jobs: scripts read only what their rule declares, and the
library takes typed settings whose defaults are the schema's."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from measurement.rates import RateSettings
from medddpm.settings import (DeviceSpec, DiffusionSettings, QualitySettings, SampleSettings, TrainSettings,
                              from_mapping)
from medddpm.switches import Variant
from medddpm.unet import UNetConfig

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())["properties"]
JOBS = ["train.py", "sample.py", "assess_quality.py", "profile_run.py", "device_rates.py", "bench_table.py"]


@pytest.mark.parametrize("script", JOBS)
def test_job_scripts_read_no_config(script):
    text = (REPO / "workflow/scripts" / script).read_text()
    assert "snakemake.config" not in text
    assert set(re.findall(r"snakemake\.(\w+)", text)) <= {"params", "input", "output", "wildcards", "log", "scriptdir"}


@pytest.mark.parametrize(
    "section, cls",
    [("train", TrainSettings), ("sample", SampleSettings), ("quality", QualitySettings),
     ("diffusion", DiffusionSettings), ("model", UNetConfig), ("bench", RateSettings)],
)
def test_settings_defaults_are_the_schema_defaults(section, cls):
    properties = SCHEMA[section]["properties"]
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    for key, spec in properties.items():
        default = spec["default"]
        assert key in fields, f"{section}.{key} has no field in {cls.__name__}"
        expected = tuple(default) if isinstance(default, list) else default
        assert fields[key] == expected, f"{section}.{key}"


def test_variant_switch_defaults_are_the_schema_defaults():
    properties = SCHEMA["variants"]["additionalProperties"]["properties"]
    fields = {f.name: f.default for f in dataclasses.fields(Variant)}
    assert set(properties) == set(fields) - {"name"}
    for key, spec in properties.items():
        if "default" in spec:
            assert fields[key] == spec["default"], key


def test_unknown_setting_is_named():
    with pytest.raises(ValueError, match="unknown key.*'lr_schedule'"):
        from_mapping(TrainSettings, {"lr": 1e-5, "lr_schedule": "cosine"}, "train")
    spec = from_mapping(DeviceSpec, {"label": "h200", "device": "cuda", "name_pattern": "H200"}, "device")
    assert spec.hardware() == {"h200": {"device": "cuda", "name_pattern": "H200"}}
    assert QualitySettings.from_params({"reference_shape": [16, 16, 16]}).reference_shape == (16, 16, 16)
