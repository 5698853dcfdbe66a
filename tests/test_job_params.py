"""Params are the contract between the rules and the jobs: scripts read only what their rule declares, and the
library takes typed settings filled from the validated config (config.yaml is the one layer of defaults)."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from measurement.rates import RateSettings
from medddpm.settings import (DeviceSpec, DiffusionSettings, QualitySettings, SampleSettings, StudySettings,
                              TrainSettings, from_mapping)
from medddpm.switches import Variant
from medddpm.unet import UNetConfig
from watched import run_watched

REPO = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())["properties"]
JOBS = ["train.py", "sample.py", "quality.py", "profile_tool.py", "device_rates.py", "bench_table.py",
        "study_run.py", "study_compare.py", "study_dataset.py", "study_summary.py"]


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
def test_settings_have_one_field_per_config_key(section, cls):
    """config.yaml holds every value and the schema every key: each key reaches the library as a typed field."""
    properties = set(SCHEMA[section]["properties"])
    fields = {f.name for f in dataclasses.fields(cls)}
    assert properties <= fields, f"{section}: keys without a field: {sorted(properties - fields)}"
    config = yaml.safe_load((REPO / "config.yaml").read_text())[section]
    assert set(config) == properties, f"config.yaml's {section} differs from the schema's keys"


@pytest.mark.parametrize(
    "section, cls",
    [("train", TrainSettings), ("sample", SampleSettings), ("quality", QualitySettings),
     ("diffusion", DiffusionSettings), ("model", UNetConfig), ("bench", RateSettings),
     ("quality_study", StudySettings)],
)
def test_settings_repeat_no_default_of_the_config(section, cls):
    """A field of a config key has no value of its own: it is required, or None where a rule leaves the key out
    because its job does not depend on it (TrainSettings' timing counts for the profiled step and the study)."""
    keys = set(SCHEMA[section]["properties"])
    defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.name in keys}
    assert {name: value for name, value in defaults.items() if value not in (dataclasses.MISSING, None)} == {}
    spec = {f.name: f.default for f in dataclasses.fields(DeviceSpec)}
    assert spec["emulate_gpus_on_cpu"] is dataclasses.MISSING


def test_a_study_run_takes_the_study_keys_of_its_settings():
    """The study's keys that a run's job takes (the rest shape the DAG: variants, seeds, dataset, ...) are the
    fields of StudySettings, passed by the rule one by one."""
    fields = {f.name for f in dataclasses.fields(StudySettings)}
    assert fields <= set(SCHEMA["quality_study"]["properties"])
    rules = (REPO / "workflow/rules/quality_study.smk").read_text()
    passed = re.search(r"study=\{\s*key: STUDY\[key\]\s*for key in \(([^)]*)\)\s*\}", rules).group(1)
    assert set(re.findall(r'"(\w+)"', passed)) == fields
    config = yaml.safe_load((REPO / "config.yaml").read_text())["quality_study"]
    assert set(config) == set(SCHEMA["quality_study"]["properties"])


def test_variant_switches_left_out_keep_upstreams_behaviour():
    properties = SCHEMA["variants"]["additionalProperties"]["properties"]
    fields = {f.name for f in dataclasses.fields(Variant)}
    assert set(properties) == fields - {"name"}
    plain = Variant.from_config("plain", {"cudnn_tf32": False, "matmul_tf32": False, "channels_last": False})
    assert (plain.autocast, plain.compile, plain.checkpointing) == (None, None, "attention")
    assert not any((plain.cudnn_benchmark, plain.fused_norm_act, plain.fused_adam, plain.foreach_ema,
                    plain.cuda_graphs))
    for key in set(properties) - {"cudnn_tf32", "matmul_tf32", "channels_last"}:
        assert "left out" in " ".join(properties[key]["description"].split()).lower(), key  # the schema says what


def test_unknown_setting_is_named():
    with pytest.raises(ValueError, match="unknown key.*'lr_schedule'"):
        from_mapping(TrainSettings, {"lr": 1e-5, "lr_schedule": "cosine"}, "train")
    with pytest.raises(ValueError, match=r"missing key.*'emulate_gpus_on_cpu'"):
        from_mapping(DeviceSpec, {"label": "h200", "device": "cuda", "name_pattern": "H200"}, "device")
    spec = from_mapping(DeviceSpec, {"label": "h200", "device": "cuda", "name_pattern": "H200",
                                     "emulate_gpus_on_cpu": False}, "device")
    assert spec.hardware() == {"h200": {"device": "cuda", "name_pattern": "H200"}}
    assert QualitySettings.from_params({"reference_shape": [16, 16, 16], "seed": 0}).reference_shape == (16, 16, 16)


# A job of the analysis environment that reached torch would fail there (envs/analysis.yaml has none): every script
# of a rule that names that environment, and every registered output's module, is imported with torch hidden.
HIDE_TORCH = """
import importlib, importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"torch imported by an analysis job: {name}")
sys.meta_path.insert(0, NoTorch())
for name in sys.argv[1:]:
    importlib.import_module(name)
"""


def analysis_rule_scripts() -> list[str]:
    """Script modules of the rules whose `conda:` is envs/analysis.yaml."""
    scripts = []
    for path in sorted((REPO / "workflow/rules").glob("*.smk")):
        for body in re.split(r"^\s*(?:rule|checkpoint)\b", path.read_text(), flags=re.MULTILINE)[1:]:
            script = re.search(r'script:\s*\n\s*"\.\./scripts/(\w+)\.py"', body)
            if script and "envs/analysis.yaml" in body:
                scripts.append(script.group(1))
    return scripts


def test_analysis_environment_jobs_never_import_torch():
    import sys

    from reporting.registry import OUTPUTS

    scripts = analysis_rule_scripts()
    assert {"bench_table", "collect_results", "registered_output", "extract_profile"} <= set(scripts), scripts
    # Each script's own imports (run as a module they would run main(): its top-level imports are what counts).
    modules = set()
    for script in scripts:
        text = (REPO / "workflow/scripts" / f"{script}.py").read_text()
        modules |= set(re.findall(r"^from (\S+) import", text, flags=re.MULTILINE))
        modules |= set(re.findall(r"^import (\S+)", text, flags=re.MULTILINE))
    modules |= {output.module for output in OUTPUTS}
    done = run_watched([sys.executable, "-c", HIDE_TORCH, *sorted(modules)], REPO / "workflow/scripts")
    assert done.returncode == 0, done.stderr[-1500:]
    # The check bites: a module that imports torch fails it.
    leaked = run_watched([sys.executable, "-c", HIDE_TORCH, "medddpm.flops"], REPO / "workflow/scripts")
    assert "torch imported by an analysis job: torch" in leaked.stderr
