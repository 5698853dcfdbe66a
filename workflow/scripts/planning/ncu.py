"""The Nsight Compute settings of one hardware label and phase: `profiling.ncu` with its metric sets resolved from the
metric-set file it names (profiling.settings applies the overrides in their order)."""

from __future__ import annotations

from pathlib import Path

from profiling.metric_lists import list_path, missing, shipped_list
from profiling.settings import MetricSetError
from profiling.settings import ncu_settings as resolve

from .configcheck import ConfigError, read_mapping


def metric_sets(config: dict, basedir: str | Path) -> dict:
    """The named metric lists of `profiling.ncu.metric_sets` (a path relative to the workflow's folder)."""
    path = Path(basedir) / config["profiling"]["ncu"]["metric_sets"]
    if not path.is_file():
        raise ConfigError(
            f"config: profiling.ncu.metric_sets names {path}, which does not exist; fix: correct the path (relative "
            "to the workflow's folder; config/ncu-metrics.yaml ships the paper's sets)"
        )
    return read_mapping(path, "metric-set file (profiling.ncu.metric_sets)")


def ncu_settings(config: dict, basedir: str | Path, label: str, phase: str) -> dict:
    """ncu settings of `label` and `phase`, metrics resolved to a list; ConfigError for a metric set the file does not
    define, or for a metric that ncu does not list for the label's chip (where data/ncu-metrics ships that chip's
    list: profiling.metric_lists)."""
    architecture = config["hardware"][label].get("architecture", "")
    try:
        settings = resolve(config["profiling"]["ncu"], architecture, phase, metric_sets(config, basedir))
    except MetricSetError as error:
        raise ConfigError(f"config: {error}") from None
    if settings.get("repeated_operators") == "once" and settings.get("launch_count"):
        raise ConfigError(
            f"config: profiling.ncu sets launch_count {settings['launch_count']} with repeated_operators: once for "
            f"the {phase} step of {label}: a step cut after that many kernels has no later calls to copy them to; "
            "fix: set repeated_operators: every with a launch_count")
    chip, known = shipped_list(architecture)
    unknown = missing(settings["metrics"], known) if known is not None else []
    if unknown:
        raise ConfigError(
            f"config: profiling.ncu collects {', '.join(unknown)} in the {phase} step of {label} ({architecture}), "
            f"which ncu does not list for {chip} ({list_path(chip)}), so that profile would stop; fix: leave "
            f"{'it' if len(unknown) == 1 else 'them'} out for that architecture "
            f"(profiling.ncu.by_architecture.{architecture}.metrics_remove, or by_phase.{phase} under it)")
    return settings
