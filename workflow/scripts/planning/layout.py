"""The result layout: where every file of the workflow's results lives, for the rules that write it
(workflow/rules/*.smk) and the reader that reads it back (reporting.results). Nothing else types a result path.

The workload is an axis of its own, never folded into the hardware label::

    results/<workload>/dataset/{synthetic,prepared,study}       a workload's raw (synthetic) and prepared datasets
    results/<workload>/<gpu>/<variant>/train.json ...           one run: RUN_FILES, SAMPLER_FILE, samples/, logs/
    results/<workload>/<gpu>/<variant>/profile/<phase>/...      its profiles (<tool>_summary.csv, ...)
    results/<workload>/<gpu>/{bench.csv,bench.md,device_rates.json,comparison.json,comparison_rounds.csv}
    results/<workload>/<gpu>/preflight.json                     the campaign's preflight (profiling.preflight)
    results/<workload>/<gpu>/study/<variant>/seed<k>/...        the quality study's runs
    results/<workload>/collected/<table>.parquet                everything read once for the figures and tables
    data/reference/<workload>/<gpu>/...                         a shipped reference set: mirrors results/<workload>/<gpu>/

Every function returns a Snakemake pattern by default (``{workload}``, ``{gpu}``, ... left as wildcards) and a
concrete path when given values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

RESULTS = "results"
REFERENCE = "data/reference"
# The small result files of one run (what the figures read; the checkpoint and samples stay out).
RUN_FILES = ("train.json", "sample.json", "quality.json", "train_steps.csv")
# A run's timing of the fast samplers (the sample_fast job), where the configuration lists any (`samplers`).
SAMPLER_FILE = "samplers.json"
# The quality study's files of one run, by kind.
STUDY_FILES = {"run.json": "study_run", "comparison.json": "study_comparison", "losses.csv": "study_losses",
               "slice.npy": "study_slice"}
# A label's files beside its runs: the device's ceilings and the bench against them, and the paired comparisons of its
# variants (every speed-up and its verdict).
LABEL_FILES = ("bench.csv", "bench.md", "device_rates.json", "comparison.json", "comparison_rounds.csv")


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
# Folders of a workload that are not hardware labels, and of a label that are not variants.
WORKLOAD_FOLDERS = ("dataset", "collected", "logs")
LABEL_FOLDERS = ("logs", "comparison_groups")


@dataclass(frozen=True)
class Place:
    """Where a path lies in the layout (`parse`); a key is None where the path does not reach it. `kind` names a
    result file the figures read (RUN_FILES, device_rates, comparison, summary, kernels, rules, STUDY_FILES' kinds), else
    None."""

    root: str | None = None
    workload: str | None = None
    gpu: str | None = None
    variant: str | None = None
    study: bool = False
    phase: str | None = None
    seed: int | None = None
    tool: str | None = None
    kind: str | None = None

    def keys(self) -> dict:
        """The keys a collected row carries: workload, gpu, variant, phase, tool, kind, seed."""
        return {"workload": self.workload, "gpu": self.gpu, "variant": self.variant, "phase": self.phase,
                "tool": self.tool, "kind": self.kind, "seed": self.seed}


def _profile_file(name: str) -> tuple[str | None, str | None]:
    """(tool, kind) of a file in a profile folder that the figures read, else (None, None)."""
    if name in ("ncu_rules.csv", "ncu_rules.csv.gz"):
        return "ncu", "rules"
    for ending, kind in (("_summary.csv", "summary"), ("_kernels.parquet", "kernels")):
        if name.endswith(ending):
            return name.removesuffix(ending), kind
    return None, None


def _place(root: str, parts: tuple[str, ...]) -> Place:
    """The place of `parts`, the folders and file of a path after its root (results/ or data/reference/)."""
    if not parts:
        return Place(root)
    workload, rest = parts[0], parts[1:]
    if not rest or rest[0] in WORKLOAD_FOLDERS:
        return Place(root, workload)
    gpu, rest = rest[0], rest[1:]
    if rest in (("device_rates.json",), ("comparison.json",)):
        return Place(root, workload, gpu, kind=rest[0].removesuffix(".json"))
    study = rest[:1] == ("study",)
    rest = rest[1:] if study else rest
    # A name at the label's (or its study's) level is a variant only where the path goes on below it.
    if len(rest) < 2 or rest[0] in LABEL_FOLDERS:
        return Place(root, workload, gpu, study=study)
    variant, rest = rest[0], rest[1:]
    if study:
        seed = re.fullmatch(r"seed(\d+)", rest[0])
        if seed is None:
            return Place(root, workload, gpu, variant, study)
        kind = STUDY_FILES.get(rest[1]) if len(rest) == 2 else None
        return Place(root, workload, gpu, variant, study, seed=int(seed.group(1)), kind=kind)
    if len(rest) == 1:
        return Place(root, workload, gpu, variant, kind=rest[0] if rest[0] in (*RUN_FILES, SAMPLER_FILE) else None)
    if rest[0] == "profile":
        phase = rest[1]
        tool, kind = _profile_file(rest[2]) if len(rest) == 3 else (None, None)
        return Place(root, workload, gpu, variant, phase=phase, tool=tool, kind=kind)
    return Place(root, workload, gpu, variant)


def parse(path: str | Path) -> Place:
    """Where `path` lies in the layout: what follows its last results/ or data/reference/ folder read as the
    functions above write it (any folder may come before, a checkout's or a copy's); an empty Place for a path
    outside both."""
    parts = Path(path).parts
    for at in range(len(parts) - 1, -1, -1):
        if parts[at] == RESULTS:
            return _place(RESULTS, parts[at + 1:])
        if parts[at] == "reference" and at and parts[at - 1] == "data":
            return _place(REFERENCE, parts[at + 1:])
    return Place()


def file_keys(path: str | Path) -> dict:
    """workload, gpu, variant, phase, tool, seed and kind of a result file (measured or shipped), from its path
    (kind None: not a result file the figures read)."""
    return parse(path).keys()


def old_layout_set(root: str | Path, workload: str, label: str) -> str | None:
    """The folder of `label`'s reference set in the layout before the workload was an axis (data/reference/<label>/,
    a BraTS set under <label>_brats), if one is there: importing it is refused with the command that moves it.

    A migration shim (the workload became an axis on 2026-12-01; the shipped sets moved then): remove it, and the
    branch of planning.plan.reference_set_problem that calls it, once no set exported before that date is left to
    import."""
    old = f"{REFERENCE}/{label}_brats" if workload == "brats" else f"{REFERENCE}/{label}"
    return old if (Path(root) / old).is_dir() else None
