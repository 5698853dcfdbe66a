"""What one configuration measures and reads: the files of every run, profile, bench and quality-study run of its
workload and hardware labels, and the shipped reference sets it draws on (paths from `layout`). The rules' input
functions and targets (workflow/rules/*.smk) ask a `Plan`; so do the tests, without Snakemake. And what a plan tells
before anything runs: the GPU labels that no Nsight Compute job profiles (nsight_warning)."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from measurement.comparison_groups import groups
from medddpm.switches import Variant

from . import layout
from .set_manifest import missing_manifest

# Raw profiler exports of each tool, beside its tidy tables (exported with a reference set).
RAW_EXPORTS = {"torch": ("torch_trace.json",), "ncu": ("ncu_raw.csv", "ncu_details.csv", "ncu_rules.csv"),
               "nsys": ("nsys_kern_sum.csv",)}
# What a reference set exports of each run (the checkpoint and sampled volumes stay behind).
EXPORTED_RUN_FILES = ("train.json", "sample.json", "quality.json", "train_steps.csv", "sample_steps.csv")
# Name endings of the files a shipped set contributes to the figures (the rules may ship them gzipped).
SHIPPED_NAMES = ("train.json", "sample.json", "quality.json", "train_steps.csv", "_summary.csv", "_kernels.parquet",
                 "ncu_rules.csv", "ncu_rules.csv.gz", "device_rates.json", "comparison.json", layout.SAMPLER_FILE,
                 *layout.STUDY_FILES)


class ReferenceSetError(ValueError):
    """A listed reference set that is missing or in a layout this workflow no longer reads."""


def reference_set_problem(basedir: str | Path, workload: str, label: str) -> str | None:
    """Why `label`'s shipped set of `workload` cannot be read (missing, or in the layout before the workload was an
    axis), with the fix; None when it is there."""
    folder = layout.reference_dir(workload, label)
    if (Path(basedir) / folder).is_dir():
        unchecked = missing_manifest(Path(basedir) / folder)  # its paths shown relative to the workflow's folder
        return f"reference_results lists {label!r}, but {unchecked.replace(f'{Path(basedir)}/', '')}" \
            if unchecked else None
    old = layout.old_layout_set(basedir, workload, label)
    if old:
        return (f"reference_results lists {label!r}, whose set is at {old}/, in the layout before the workload was an "
                f"axis; fix: mkdir -p {Path(folder).parent} && git mv {old} {folder}")
    return (f"reference_results lists {label!r}, but {folder}/ does not exist (the {workload} workload's sets live in "
            f"{layout.REFERENCE}/{workload}/); fix: leave it out, or put that label's exported set there")


@dataclass(frozen=True)
class Plan:
    config: dict
    basedir: Path = Path(".")

    # -- the axes --------------------------------------------------------------------------------------------------
    @property
    def workload(self) -> str:
        return self.config["workload"]

    @property
    def labels(self) -> list[str]:
        return list(self.config["gpus"])

    @property
    def variants(self) -> list[str]:
        return list(self.config["run_variants"])

    @property
    def phases(self) -> list[str]:
        return list(self.config["profiling"]["phases"])

    def gpus(self, label: str, training_variant: str | None = None) -> int:
        """GPUs of one node a job of `label` takes (its rule's `resources: gpu`, which --resources gpu=N counts and
        the SLURM executor asks for): none on a CPU label, else one, or for the training job of `training_variant`
        its data_parallel processes, one GPU each (medddpm.data_parallel)."""
        if self.config["hardware"][label]["device"] == "cpu":
            return 0
        if training_variant is None:
            return 1
        return Variant.from_config(training_variant, self.config["variants"][training_variant]).data_parallel

    def training_gpus(self) -> dict[str, int]:
        """Each run variant's GPUs of its training job on this plan's GPU labels (the most any label asks)."""
        return {variant: max([self.gpus(label, variant) for label in self.labels] or [0]) for variant in self.variants}

    @cached_property
    def tools(self) -> dict[str, list[str]]:
        """The profilers of each label measured here: the config's list, or what `auto` finds on this machine."""
        from profiling.runner import available_tools

        chosen = {}
        for label in self.labels:
            spec = self.config["hardware"][label]
            wanted = spec.get("profilers", "auto")
            chosen[label] = available_tools(spec["device"]) if wanted == "auto" else list(wanted)
        return chosen

    def nsight_gaps(self) -> dict[str, str]:
        """The GPU labels measured here that no Nsight Compute job profiles, each with why (the config's list
        leaves ncu out, or `auto` found none on the machine that plans the run). Emulated labels are left out."""
        if self.config.get("emulate_gpus_on_cpu"):
            return {}
        gaps = {}
        for label in self.labels:
            spec = self.config["hardware"][label]
            if spec["device"] == "cpu" or "ncu" in self.tools[label]:
                continue
            if spec.get("profilers", "auto") == "auto":
                gaps[label] = ("profilers: auto found no ncu on this machine, which plans the run; on a cluster the "
                               "jobs run elsewhere")
            else:
                gaps[label] = f"hardware.{label}.profilers lists {', '.join(self.tools[label])}, not ncu"
        return gaps

    def local_gpu_problem(self, available: int | None) -> str | None:
        """One line when a run variant's training job asks for more GPUs than a local run allows (--resources gpu,
        `available`; None: no limit), which Snakemake would refuse only when the job is due, naming a pipe."""
        if available is None:
            return None
        for variant, gpus in self.training_gpus().items():
            if gpus > 1 and gpus > available:
                return (f"config: run_variants lists {variant!r}, whose training job takes {gpus} GPUs (data_parallel "
                        f"{gpus}), but this local run allows {available} (--resources gpu={available}, "
                        f"profiles/default); fix: run with --resources gpu={gpus} on a machine with {gpus} GPUs, "
                        "through the SLURM profiles, or leave it out of run_variants")
        return None

    # -- runs and profiles -----------------------------------------------------------------------------------------
    @property
    def fast_variants(self) -> list[str]:
        """The run variants whose fast samplers are timed (fast_sampling.variants; null: all), none without samplers."""
        fast = self.config["fast_sampling"]
        if not fast["samplers"]:
            return []
        return self.variants if fast["variants"] is None else [v for v in self.variants if v in fast["variants"]]

    def sampler_runs(self, labels=None) -> list[str]:
        """The samplers.json of every run whose fast samplers are timed (fast_variants)."""
        return [layout.run_file(layout.SAMPLER_FILE, self.workload, gpu, variant)
                for gpu in (self.labels if labels is None else labels) for variant in self.fast_variants]

    def runs(self, name: str, labels=None) -> list[str]:
        """`name` of every (label, variant) run measured here."""
        return [layout.run_file(name, self.workload, gpu, variant)
                for gpu in (self.labels if labels is None else labels) for variant in self.variants]

    def sample_volumes(self, gpu: str = "{gpu}", variant: str = "{variant}", workload: str = "{workload}") -> list[str]:
        """The sampled volumes of a run (a pattern by default, as the rules' outputs need)."""
        return [layout.sample_volume(k, workload, gpu, variant) for k in range(self.config["sample"]["masks"])]

    def profiles(self, name: str, label: str) -> list[str]:
        return [layout.profile_file(name, self.workload, label, variant, phase)
                for variant in self.variants for phase in self.phases]

    def profile_summaries(self) -> list[str]:
        return [path for gpu in self.labels for tool in self.tools[gpu]
                for path in self.profiles(f"{tool}_summary.csv", gpu)]

    def profile_kernel_tables(self) -> list[str]:
        return [path.removesuffix("_summary.csv") + "_kernels.parquet" for path in self.profile_summaries()]

    def ncu_rule_tables(self) -> list[str]:
        return [path for gpu in self.labels if "ncu" in self.tools[gpu]
                for path in self.profiles("ncu_rules.csv", gpu)]

    def device_rates(self) -> list[str]:
        """Each measured label's device_rates.json: the ceilings the bench sets its runs against."""
        return [layout.label_file("device_rates.json", self.workload, gpu) for gpu in self.labels]

    def compares(self) -> bool:
        """Whether the run variants hold a comparison (comparison.references: a reference and another variant)."""
        references = set(self.config["comparison"]["references"])
        return len(self.variants) > 1 and bool(references & set(self.variants))

    def comparison_groups(self) -> list[list[str]]:
        """The variants timed together, group after group, in each label's paired comparison (each group a job)."""
        comparison = self.config["comparison"]
        return groups(self.variants, tuple(comparison["references"]), comparison["processes_at_once"])

    def comparison_group_files(self, label: str, extension: str) -> list[str]:
        """A label's comparison groups' files (`json`: each group's record, `csv`: its timed steps), in order."""
        return [layout.label_file(f"comparison_groups/{number}.{extension}", self.workload, label)
                for number in range(1, len(self.comparison_groups()) + 1)]

    def comparisons(self) -> list[str]:
        """Each measured label's comparison.json (the paired comparisons of its run variants), where they hold one."""
        return [layout.label_file("comparison.json", self.workload, gpu) for gpu in self.labels] if self.compares() \
            else []

    # -- the quality study -----------------------------------------------------------------------------------------
    @property
    def study(self) -> dict:
        return self.config["quality_study"]

    @property
    def study_labels(self) -> list[str]:
        """Hardware labels that run the study: `quality_study.gpus`, or every label of `gpus`."""
        return self.labels if self.study["gpus"] is None else list(self.study["gpus"])

    def study_runs(self) -> list[tuple[str, int]]:
        """(variant, seed) of every run of the study: every variant trains every seed."""
        return [(variant, seed) for variant in self.study["variants"] for seed in self.study["seeds"]]

    def study_variant_files(self, name: str, label: str = "{gpu}", variant: str = "{variant}",
                            workload: str = "{workload}") -> list[str]:
        """The file `name` of every seed's run of one variant (the outputs of its job; a pattern by default)."""
        return [layout.study_file(name, workload, label, variant, seed) for seed in self.study["seeds"]]

    def study_run_files(self, label: str, name: str) -> list[str]:
        return [layout.study_file(name, self.workload, label, variant, seed) for variant, seed in self.study_runs()]

    def study_volumes(self, label: str = "{gpu}", variant: str = "{variant}", seed="{seed}",
                      workload: str = "{workload}") -> list[str]:
        """The sampled volumes of a study run (a pattern by default, as the rules' outputs need)."""
        return [layout.study_file(f"samples/sample_{k:03d}.nii.gz", workload, label, variant, seed)
                for k in range(self.study["masks"])]

    def study_result_files(self, labels=None) -> list[str]:
        """Every study file the collector reads, of `labels` (default: every label that runs the study)."""
        return [path for label in (self.study_labels if labels is None else labels)
                for name in layout.STUDY_FILES for path in self.study_run_files(label, name)]

    # -- what the figures and tables read ------------------------------------------------------------------------
    def measured_result_files(self) -> list[str]:
        """Every result file this invocation measures that the figures and tables read."""
        runs = [path for name in layout.RUN_FILES for path in self.runs(name)] + self.sampler_runs()
        return (runs + self.device_rates() + self.comparisons() + self.profile_summaries() + self.profile_kernel_tables()
                + self.ncu_rule_tables() + self.study_result_files())

    def reference_labels(self) -> list[str]:
        """Shipped reference sets drawn on: `reference_results`, less the labels measured here (measured wins)."""
        return [label for label in self.config["reference_results"] if label not in self.labels]

    def conformance_labels(self) -> list[str]:
        """Labels measured here whose shipped set is listed too: the references of tab08."""
        return [label for label in self.config["reference_results"] if label in self.labels]

    def shipped_reference_files(self, labels=None) -> list[str]:
        """Files of the shipped reference sets of `labels` (default: those drawn on) that the figures read (the reader
        checks them against their set's manifest.sha256, which is no input: it is the export's output, and a set
        exported here would be exported again). A listed set that is missing, has no manifest, or is still in the
        layout before the workload was an axis, is refused in one line."""
        files = []
        for label in self.reference_labels() if labels is None else labels:
            problem = reference_set_problem(self.basedir, self.workload, label)
            if problem:
                raise ReferenceSetError(f"config: {problem}")
            folder = layout.reference_dir(self.workload, label)
            found = glob.glob(f"{folder}/**/*", recursive=True, root_dir=self.basedir)
            files += sorted(f for f in found if f.endswith(SHIPPED_NAMES))
        return files

    # -- sharing ---------------------------------------------------------------------------------------------------
    def export_files(self, label: str) -> list[str]:
        """What the reference set of a label measured here is made of: the run files of every run variant, each
        profile's tidy tables and raw exports, the bench, and the quality study's runs (where the label runs it)."""
        files = [layout.run_file(name, self.workload, label, variant)
                 for variant in self.variants for name in EXPORTED_RUN_FILES] + self.sampler_runs([label])
        for tool in self.tools[label]:
            for name in (f"{tool}_summary.csv", f"{tool}_kernels.parquet", *RAW_EXPORTS[tool]):
                files += self.profiles(name, label)
        files += [layout.label_file(name, self.workload, label) for name in layout.LABEL_FILES
                  if self.compares() or not name.startswith("comparison")]
        if label in self.study_labels:
            files += self.study_result_files([label])
        return files


# -- what a plan tells before anything runs ------------------------------------------------------------------------
# The outputs drawn from Nsight Compute's counters and rules alone (the registry's outputs that read them).
NSIGHT_TABLES = ("ncu_kernels", "rules")


def nsight_warning(plan: Plan, outputs) -> str | None:
    """Lines saying which GPU labels of `plan` get no Nsight Compute profile, why, what will lack data and the fix;
    None when every GPU label is profiled. `outputs`: the registry's outputs (id, reads)."""
    gaps = plan.nsight_gaps()
    if not gaps:
        return None
    lost = [output.id.split("_", 1)[0] for output in outputs if set(output.reads) & set(NSIGHT_TABLES)]
    lines = [f"WARNING: this plan makes no Nsight Compute profile for {', '.join(gaps)}:"]
    lines += [f"  {label}: {why}" for label, why in gaps.items()]
    overlay = "; ".join(f"{label}: {{profilers: [torch, ncu]}}" for label in gaps)
    lines += [f"  {', '.join(lost)} will have no data for {'it' if len(gaps) == 1 else 'them'}, and the SM cycles, "
              "instructions, IPC and Tensor Core use of fig07 and tab03-tab05 (and the claims resting on them) come "
              "from torch.profiler's times only.",
              f"  fix: declare the profilers in a --configfile overlay (hardware: {{{overlay}}}; the SLURM profiles "
              "profiles/slurm-<gpu> declare them), or plan on a machine where ncu is installed."]
    return "\n".join(lines)
