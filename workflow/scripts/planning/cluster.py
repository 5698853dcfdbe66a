"""What a cluster profile asks of SLURM, shown before anything is submitted: the sbatch request of every GPU rule,
from the profiles' set-resources (the SLURM executor plugin maps each resource to its flag)."""

from __future__ import annotations

# sbatch's flag for each resource the SLURM executor plugin maps (reference: the plugin's documentation).
_SBATCH = {"constraint": "-C", "cpus_per_gpu": "--cpus-per-gpu", "mem_mb": "--mem", "runtime": "-t",
           "slurm_partition": "-p", "slurm_account": "-A", "qos": "--qos", "nodes": "--nodes"}
CLUSTER_KEYS = {"gpu_model", "gres", "constraint", "slurm_partition", "slurm_account", "slurm_extra"}


def cluster_requests(overwrite_resources, rule_gpus: dict[str, dict[str, int]] | None = None) -> list[str]:
    """One line per rule of a cluster profile's set-resources that asks for a GPU: the sbatch request every job of
    that rule gets (`--gpus=MODEL:N` from gpu and gpu_model, -C, --cpus-per-gpu, --mem, -t, ...); [] where the
    resources name no cluster setting (a local run). A rule whose block names a GPU model but leaves the count to the
    workflow (the training jobs) takes its count from `rule_gpus` ({rule: {variant: GPUs}}): one line per count,
    naming the variants of a count above one."""
    rule_gpus = rule_gpus or {}
    rules = {rule: {key: getattr(value, "raw", value) for key, value in dict(mapping).items()}
             for rule, mapping in dict(overwrite_resources).items()}
    if not any(CLUSTER_KEYS & set(mapping) for mapping in rules.values()):
        return []
    lines = []
    for rule, mapping in sorted(rules.items()):
        if not mapping.get("gpu") and mapping.get("gpu_model") and rule_gpus.get(rule):
            by_count: dict[int, list[str]] = {}
            for variant, count in rule_gpus[rule].items():
                by_count.setdefault(count, []).append(variant)
            for count, variants in sorted(by_count.items()):
                if count:
                    named = f"{rule} ({', '.join(variants)})" if count > 1 else rule
                    lines.append(f"  {named}: {' '.join(_flags({**mapping, 'gpu': count}))}")
            continue
        if not mapping.get("gpu") and "gres" not in mapping:
            continue
        lines.append(f"  {rule}: {' '.join(_flags(mapping))}")
    return lines


def _flags(mapping: dict) -> list[str]:
    gpus = mapping.get("gpu")
    flags = [f"--gpus={mapping['gpu_model']}:{gpus}" if mapping.get("gpu_model") else f"--gpus={gpus}"] \
        if gpus else [f"--gres={mapping['gres']}"]
    flags += [f"{flag} {mapping[key]}{'M' if key == 'mem_mb' else ''}" for key, flag in _SBATCH.items()
              if mapping.get(key) not in (None, "")]
    if mapping.get("slurm_extra"):
        flags.append(str(mapping["slurm_extra"]))
    return flags
