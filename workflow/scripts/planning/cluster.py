"""What a cluster profile asks of SLURM, shown before anything is submitted: the sbatch request of every GPU rule,
from the profiles' set-resources (the SLURM executor plugin maps each resource to its flag)."""

from __future__ import annotations

# sbatch's flag for each resource the SLURM executor plugin maps (reference: the plugin's documentation).
_SBATCH = {"constraint": "-C", "cpus_per_gpu": "--cpus-per-gpu", "mem_mb": "--mem", "runtime": "-t",
           "slurm_partition": "-p", "slurm_account": "-A", "qos": "--qos"}
CLUSTER_KEYS = {"gpu_model", "gres", "constraint", "slurm_partition", "slurm_account", "slurm_extra"}


def cluster_requests(overwrite_resources) -> list[str]:
    """One line per rule of a cluster profile's set-resources that asks for a GPU: the sbatch request every job of
    that rule gets (`--gpus=MODEL:N` from gpu and gpu_model, -C, --cpus-per-gpu, --mem, -t, ...); [] where the
    resources name no cluster setting (a local run)."""
    rules = {rule: {key: getattr(value, "raw", value) for key, value in dict(mapping).items()}
             for rule, mapping in dict(overwrite_resources).items()}
    if not any(CLUSTER_KEYS & set(mapping) for mapping in rules.values()):
        return []
    lines = []
    for rule, mapping in sorted(rules.items()):
        gpus = mapping.get("gpu")
        if not gpus and "gres" not in mapping:
            continue
        flags = [f"--gpus={mapping['gpu_model']}:{gpus}" if mapping.get("gpu_model") else f"--gpus={gpus}"] \
            if gpus else [f"--gres={mapping['gres']}"]
        flags += [f"{flag} {mapping[key]}{'M' if key == 'mem_mb' else ''}" for key, flag in _SBATCH.items()
                  if mapping.get(key) not in (None, "")]
        if mapping.get("slurm_extra"):
            flags.append(str(mapping["slurm_extra"]))
        lines.append(f"  {rule}: {' '.join(flags)}")
    return lines
