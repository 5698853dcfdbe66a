"""Resolution of the Nsight Compute settings of one profiled run from the config's `profiling.ncu` section."""

from __future__ import annotations


class MetricSetError(ValueError):
    """A phase names a metric set that the metric-sets file does not define."""


def _apply(metrics: list[str], change: dict) -> list[str]:
    removed = set(change.get("metrics_remove", []))
    added = [m for m in change.get("metrics_add", []) if m not in metrics]
    return [m for m in metrics if m not in removed] + added


def metric_list(metrics: str | list[str], metric_sets: dict[str, list[str]]) -> list[str]:
    """A metric list as given, or the named set's."""
    if isinstance(metrics, str):
        if metrics not in metric_sets:
            raise MetricSetError(f"profiling.ncu names the metric set {metrics!r}, which the metric-sets file does not"
                                 f" define (it has: {', '.join(sorted(metric_sets))})")
        return list(metric_sets[metrics])
    return list(metrics)


def ncu_settings(ncu_config: dict, architecture: str, phase: str, metric_sets: dict[str, list[str]]) -> dict:
    """Settings of one run: the common set, replaced by the phase's set, then the architecture's overrides,
    then the architecture's overrides for that phase (in that order, so a phase can drop what an architecture
    adds). Returns the section without its `by_phase`, `by_architecture` and `metric_sets`, metrics as a list."""
    settings = {k: v for k, v in ncu_config.items() if k not in ("by_phase", "by_architecture", "metric_sets")}
    settings.update(ncu_config.get("by_phase", {}).get(phase, {}))
    override = ncu_config.get("by_architecture", {}).get(architecture, {})
    metrics = metric_list(settings["metrics"], metric_sets)
    settings["metrics"] = _apply(_apply(metrics, override), override.get("by_phase", {}).get(phase, {}))
    dropped = set(override.get("sections_remove", []))
    settings["sections"] = [s for s in settings["sections"] if s not in dropped]
    if override.get("executable"):
        settings["executable"] = override["executable"]
    return settings
