"""The result layout: where every file of the workflow's results lives, for the rules that write it
(workflow/rules/*.smk) and the reader that reads it back (reporting.results). Nothing else types a result path.

The workload is an axis of its own, never folded into the hardware label::

    results/<workload>/dataset/{synthetic,prepared,study}       a workload's raw (synthetic) and prepared datasets
    results/<workload>/<gpu>/<variant>/train.json ...           one run: RUN_FILES, samples/, logs/
    results/<workload>/<gpu>/<variant>/profile/<phase>/...      its profiles (<tool>_summary.csv, ...)
    results/<workload>/<gpu>/{bench.csv,bench.md,device_rates.json}
    results/<workload>/<gpu>/study/<variant>/seed<k>/...        the quality study's runs
    results/<workload>/collected/<table>.parquet                everything read once for the figures and tables
    data/reference/<workload>/<gpu>/...                         a shipped reference set: mirrors results/<workload>/<gpu>/

Every function returns a Snakemake pattern by default (``{workload}``, ``{gpu}``, ... left as wildcards) and a
concrete path when given values.
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = "results"
REFERENCE = "data/reference"
# The small result files of one run (what the figures read; the checkpoint and samples stay out).
RUN_FILES = ("train.json", "sample.json", "quality.json", "train_steps.csv")
# The quality study's files of one run, by kind.
STUDY_FILES = {"run.json": "study_run", "comparison.json": "study_comparison", "losses.csv": "study_losses",
               "slice.npy": "study_slice"}
# A label's files beside its runs: the device's ceilings and the bench against them.
LABEL_FILES = ("bench.csv", "bench.md", "device_rates.json")


def workload_dir(workload: str = "{workload}", root: str = RESULTS) -> str:
    return f"{root}/{workload}"


def workload_log(name: str, workload: str = "{workload}") -> str:
    """The log of a job that serves the whole workload (the bench, the study's summaries)."""
    return f"{workload_dir(workload)}/logs/{name}"


def dataset_dir(name: str, workload: str = "{workload}") -> str:
    """A workload's dataset folder: `synthetic` (derived raw cases), `prepared` (the timing runs'), `study`."""
    return f"{workload_dir(workload)}/dataset/{name}"


def dataset_log(name: str, workload: str = "{workload}") -> str:
    return f"{workload_dir(workload)}/dataset/logs/{name}.log"


def label_dir(workload: str = "{workload}", gpu: str = "{gpu}", root: str = RESULTS) -> str:
    """Everything measured on one hardware label for one workload (or its shipped reference set)."""
    return f"{workload_dir(workload, root)}/{gpu}"


def label_file(name: str, workload: str = "{workload}", gpu: str = "{gpu}", root: str = RESULTS) -> str:
    return f"{label_dir(workload, gpu, root)}/{name}"


def label_log(name: str, workload: str = "{workload}", gpu: str = "{gpu}") -> str:
    return f"{label_dir(workload, gpu)}/logs/{name}"


def run_dir(workload: str = "{workload}", gpu: str = "{gpu}", variant: str = "{variant}", root: str = RESULTS) -> str:
    return f"{label_dir(workload, gpu, root)}/{variant}"


def run_file(name: str, workload: str = "{workload}", gpu: str = "{gpu}", variant: str = "{variant}",
             root: str = RESULTS) -> str:
    return f"{run_dir(workload, gpu, variant, root)}/{name}"


def run_log(name: str, workload: str = "{workload}", gpu: str = "{gpu}", variant: str = "{variant}") -> str:
    return f"{run_dir(workload, gpu, variant)}/logs/{name}"


def sample_volume(index: int, workload: str = "{workload}", gpu: str = "{gpu}", variant: str = "{variant}") -> str:
    return run_file(f"samples/sample_{index:03d}.nii.gz", workload, gpu, variant)


def profile_file(name: str, workload: str = "{workload}", gpu: str = "{gpu}", variant: str = "{variant}",
                 phase: str = "{phase}") -> str:
    return f"{run_dir(workload, gpu, variant)}/profile/{phase}/{name}"


def study_dir(workload: str = "{workload}", gpu: str = "{gpu}", variant: str = "{variant}", seed="{seed}") -> str:
    return f"{label_dir(workload, gpu)}/study/{variant}/seed{seed}"


def study_file(name: str, workload: str = "{workload}", gpu: str = "{gpu}", variant: str = "{variant}",
               seed="{seed}") -> str:
    return f"{study_dir(workload, gpu, variant, seed)}/{name}"


def study_label_file(name: str, workload: str = "{workload}", gpu: str = "{gpu}") -> str:
    """A file of a label's whole study (the summary, the comparison's log)."""
    return f"{label_dir(workload, gpu)}/study/{name}"


def collected_table(name: str, workload: str = "{workload}") -> str:
    return f"{workload_dir(workload)}/collected/{name}.parquet"


def collected_log(workload: str = "{workload}") -> str:
    return f"{workload_dir(workload)}/collected/logs/collect_results.log"


def reference_dir(workload: str = "{workload}", gpu: str = "{gpu}") -> str:
    """A shipped reference set: the files of results/<workload>/<gpu>/, as `export` writes them."""
    return label_dir(workload, gpu, REFERENCE)


def reference_manifest(workload: str = "{workload}", gpu: str = "{gpu}") -> str:
    """The last file an export writes: the set's files with their sha256."""
    return f"{reference_dir(workload, gpu)}/manifest.sha256"


# -- reading a path back ------------------------------------------------------------------------------------------
NO_KEYS = {"workload": None, "gpu": None, "variant": None, "phase": None, "tool": None, "kind": None, "seed": None}


def file_keys(path: str | Path) -> dict:
    """workload, gpu, variant, phase, tool, seed and kind of a result file (measured or shipped), from its path
    (kind None: not a result file the figures read)."""
    path = Path(path)
    name, parents = path.name, path.parents
    seed = re.fullmatch(r"seed(\d+)", path.parent.name)
    if seed and len(parents) > 4 and parents[2].name == "study" and name in STUDY_FILES:
        return {**NO_KEYS, "workload": parents[4].name, "gpu": parents[3].name, "variant": parents[1].name,
                "kind": STUDY_FILES[name], "seed": int(seed.group(1))}
    if name == "device_rates.json" and len(parents) > 1:
        return {**NO_KEYS, "workload": parents[1].name, "gpu": parents[0].name, "kind": "device_rates"}
    if name in RUN_FILES and len(parents) > 2:
        return {**NO_KEYS, "workload": parents[2].name, "gpu": parents[1].name, "variant": parents[0].name,
                "kind": name}
    if path.parent.parent.name == "profile" and len(parents) > 4:
        keys = {**NO_KEYS, "workload": parents[4].name, "gpu": parents[3].name, "variant": parents[2].name,
                "phase": parents[0].name}
        if name in ("ncu_rules.csv", "ncu_rules.csv.gz"):
            return {**keys, "tool": "ncu", "kind": "rules"}
        if name.endswith("_summary.csv"):
            return {**keys, "tool": name.removesuffix("_summary.csv"), "kind": "summary"}
        if name.endswith("_kernels.parquet"):
            return {**keys, "tool": name.removesuffix("_kernels.parquet"), "kind": "kernels"}
    return dict(NO_KEYS)


def old_layout_set(root: str | Path, workload: str, label: str) -> str | None:
    """The folder of `label`'s reference set in the layout before the workload was an axis (data/reference/<label>/,
    a BraTS set under <label>_brats), if one is there: importing it is refused with the command that moves it."""
    old = f"{REFERENCE}/{label}_brats" if workload == "brats" else f"{REFERENCE}/{label}"
    return old if (Path(root) / old).is_dir() else None
