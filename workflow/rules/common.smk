import glob
import os
import shlex
import sys

from snakemake.exceptions import WorkflowError

# workflow/scripts is on sys.path (the Snakefile puts it there); the configuration is checked (checks.smk).
from medddpm.switches import Variant
from medddpm.workloads import WORKLOADS, preparation_settings, synthetic_sources
from planning import layout
from planning.ncu import ncu_settings
from planning.plan import ReferenceSetError
from reporting.prose import join_words
from reporting.terminal import sampler_words


# Closed wildcard sets. A rule narrows one where it serves fewer values (the quality study's labels and variants).
wildcard_constraints:
    workload=WORKLOAD,
    gpu="|".join(config["gpus"]),
    variant="|".join(config["run_variants"]),
    phase="|".join(config["profiling"]["phases"]),
    tool="torch|ncu|nsys",
    seed=r"\d+",


# -- what a job depends on (its params) ---------------------------------------------------------------------------
def device_params(wildcards):
    """What a job of a hardware label depends on about its device: the kind, how to recognise it, emulation."""
    spec = config["hardware"][wildcards.gpu]
    return {
        "label": wildcards.gpu,
        "device": spec["device"],
        "name_pattern": spec.get("name_pattern"),
        "emulate_gpus_on_cpu": config["emulate_gpus_on_cpu"],
    }


def variant_params(wildcards):
    """Every switch of the job's variant, defaults included, so that changing one reruns that variant's jobs."""
    return Variant.from_config(wildcards.variant, config["variants"][wildcards.variant]).switches()


def profiled_train_params(wildcards):
    """The training settings a profiled step depends on: the loop's (not how many steps the train job times) for a
    training step, the seed of the initial weights for a sampling step."""
    keys = ["seed"]
    if wildcards.phase == "train":
        keys += ["lr", "gradient_accumulation", "ema_decay", "ema_update_every", "ema_start_step"]
    return {key: config["train"][key] for key in keys}


def gpus_needed(wildcards):
    """GPUs a job of this label takes (counted against --resources gpu=N; the SLURM profiles map it to --gpus)."""
    return PLAN.gpus(wildcards.gpu)


def training_gpus(wildcards):
    """GPUs the training job of this label and variant takes: gpus_needed, or the variant's data_parallel processes
    (one GPU each, of one node: the SLURM profiles' train block asks `nodes: 1` and leaves the count to this)."""
    return PLAN.gpus(wildcards.gpu, wildcards.variant)


# -- the preflight of a label's timed campaign (preflight.smk) ----------------------------------------------------
def preflight_params(wildcards):
    """The convolution the preflight checks: the U-Net's widest, at the configured volume shape. Which variants use
    each combination it checks is read from the config when it runs, not passed: the record then stays valid (and
    no timed job runs again) when variants are added or changed; a timed job refuses it where it does not hold."""
    return {"shape": config["dataset"]["shape"], "channels": config["model"]["base_width"]}


PREFLIGHT = layout.label_file("preflight.json")


# -- the datasets -------------------------------------------------------------------------------------------------
# Each workload prepares into its own folder (layout.dataset_dir): switching between config/paper.yaml and
# config/brats.yaml never rebuilds (and so never outdates the results of) the other's dataset.
PREPARED = layout.dataset_dir("prepared", WORKLOAD)
STUDY_PREPARED = layout.dataset_dir("study", WORKLOAD)
SOURCE = WORKLOADS[WORKLOAD].source(config["dataset"]["source"])


def raw_dataset():
    """The folder the preparation reads: the derived synthetic cases, or the configured root."""
    return layout.dataset_dir("synthetic", WORKLOAD) if SOURCE.synthetic else config["dataset"]["root"]


def study_raw_input():
    """The configured folder, for sources read from disk (the synthetic ones are derived inside the job)."""
    return [] if SOURCE.synthetic else [config["dataset"]["root"]]


def case_list():
    """The case list of a workload that takes one (BraTS), an input of the preparation when set (editing it
    re-prepares)."""
    listed = config["dataset"]["case_list"]
    return [listed] if listed is not None and WORKLOADS[WORKLOAD].takes_case_list and not SOURCE.synthetic else []


# What the preparation depends on besides the shape, split and seed (medddpm.workloads.preparation_settings).
PREPARATION = preparation_settings(WORKLOAD, config["dataset"])


# -- the quality study's settings (workflow/rules/quality_study.smk) --------------------------------------------
# What a study run takes from `train`: the loop's settings (not how many steps the timing runs measure).
STUDY_LOOP = ("lr", "gradient_accumulation", "ema_decay", "ema_update_every", "ema_start_step")


def study_model():
    return {**config["model"], **STUDY["model"]}


def study_train():
    """The training loop's settings of the study's runs: the config's `train` and the study's overrides (each run's
    seed is its own: quality_study.seeds)."""
    loop = {key: config["train"][key] for key in STUDY_LOOP}
    return {**loop, **STUDY["train"]}


def study_samplers(wildcards):
    """The fast samplers this variant's study runs sample with too (fast_sampling.study_variants; null: every one)."""
    fast = config["fast_sampling"]
    listed = fast["study_variants"]
    return dict(fast["samplers"]) if listed is None or wildcards.variant in listed else {}


def study_rerun(wildcards):
    """Whether this variant's job trains its first seed a second time (quality_study.rerun: the baseline's)."""
    return bool(STUDY["rerun"]) and wildcards.variant == "baseline"


# -- profiling ----------------------------------------------------------------------------------------------------
def profile_ncu_settings(wildcards):
    """ncu settings of the job's label and phase, metrics resolved to a list (planning.ncu; checks.smk resolved
    every label's when the DAG was built); they are the profile job's params, so a changed metric set re-profiles."""
    return ncu_settings(config, workflow.basedir, wildcards.gpu, wildcards.phase)


def extraction_code():
    """The parsers and kernel classes behind every extracted table: editing them re-extracts (seconds of CPU per
    profile), never re-profiles."""
    modules = ("csvpages", "errors", "instructions", "kernels", "ncu", "nsys", "tables", "torchprof", "units")
    return [f"workflow/scripts/profiling/{module}.py" for module in modules]


def profile_inputs(wildcards):
    keys = dict(workload=wildcards.workload, gpu=wildcards.gpu, variant=wildcards.variant, phase=wildcards.phase)
    return {
        **profiler_exports(wildcards, keys),
        "conditions": layout.profile_file(f"{wildcards.tool}_conditions.json", **keys),
    }


def profiler_exports(wildcards, keys: dict) -> dict:
    """What the profiler of one profile wrote that its extraction reads."""
    if wildcards.tool == "torch":
        return {"trace": layout.profile_file("torch_trace.json", **keys)}
    if wildcards.tool == "ncu":
        # ncu's own log says how many kernels it profiled: a raw export cut at a row boundary is refused.
        tool_log = layout.run_log(
            f"profile_{wildcards.phase}_ncu.tool.log", wildcards.workload, wildcards.gpu, wildcards.variant
        )
        return {
            "raw": layout.profile_file("ncu_raw.csv", **keys),
            "details": layout.profile_file("ncu_details.csv", **keys),
            "tool_log": tool_log,
        }
    return {"kern_sum": layout.profile_file("nsys_kern_sum.csv", **keys)}


# -- the figures and tables (workflow/rules/report.smk) ---------------------------------------------------------
# The shipped reference sets read, listed when the DAG is built: a set that is missing or in the old layout is one
# line naming the fix.
try:
    SHIPPED = PLAN.shipped_reference_files()
    CONFORMANCE_REFERENCES = PLAN.shipped_reference_files(PLAN.conformance_labels())
except ReferenceSetError as _error:
    raise WorkflowError(str(_error)) from None


# Modules of the reporting package that no registered output's build reads: the export's (a rule of its own), the
# article's text helpers (an output module imports them for its paragraph, which only the article shows; the article's
# own package, reporting/article/, lies outside the glob below) and the terminal's.
OWN_RULE_MODULES = (
    "workflow/scripts/reporting/export.py",
    "workflow/scripts/reporting/prose.py",
    # What the terminal prints during and after a run (workflow/rules/summary.smk), read by no output.
    "workflow/scripts/reporting/terminal.py",
    "workflow/scripts/reporting/run_summary.py",
)


def reporting_code():
    """The reporting library shared by every output: editing it re-renders them all (an output's own module is an
    input of its rule alone)."""
    shared = glob.glob("workflow/scripts/reporting/*.py", root_dir=workflow.basedir)
    return sorted(set(shared) - set(OWN_RULE_MODULES)) + [
        "workflow/scripts/profiling/kernels.py",
        "workflow/scripts/medddpm/curves.py",
        "workflow/scripts/planning/layout.py",
    ]


def article_code():
    """The article's code: its package, the text helpers, the speed-up verdict, and every output's module (each writes
    its own paragraph)."""
    package = glob.glob("workflow/scripts/reporting/article/*.py", root_dir=workflow.basedir)
    return sorted(package) + [
        "workflow/scripts/reporting/prose.py",
        "workflow/scripts/reporting/derived.py",
        *(output.code for output in OUTPUTS),
    ]


def output_inputs(output):
    """A registered output's inputs: the collected tables it reads, its other files, its own module, shared code."""
    inputs = {"hardware": layout.collected_table("hardware", WORKLOAD)}
    inputs |= {name: layout.collected_table(name, WORKLOAD) for name in output.reads}
    # `{prepared}` in a registered file is the prepared dataset of the configured workload; `{baseline_training}` the
    # baseline's train.json on the first label measured (its parameter and FLOP counts: the same on every label).
    baseline_training = layout.run_file("train.json", WORKLOAD, config["gpus"][0], "baseline")
    inputs |= {
        name: path.format(prepared=PREPARED, baseline_training=baseline_training) for name, path in output.files.items()
    }
    inputs["code"] = [output.code, *reporting_code()]
    return inputs


def output_files(output):
    """A registered output's files. The HTML report (`snakemake --report`) lists each output once, in its category
    (registry CATEGORIES), by number and short title ("fig01 · Runtime breakdown": the report's list is as wide as
    its longest entry; the caption, under the entry's information button, has the rest): a figure's PNG or a table's
    HTML is shown, and a toggle on the page switches every entry to the figure's PDF or the table's CSV. The report
    makes a toggle of any label after the first with two values, each on half the entries: hence one label naming
    the output, and "image / table" (which sorts first, so it is the one shown at first) against "pdf / csv"."""
    number, words = output.id.split("_", 1)
    entry = f"{number} · {words.replace('_', ' ').capitalize()}"
    shown = {"png": "image / table", "html": "image / table", "pdf": "pdf / csv", "csv": "pdf / csv"}
    files = output.files_out()
    for name in sorted(shown.keys() & files.keys()):
        # `report(` may not open a line in a Snakefile: the parser would take it for the `report:` directive.
        files[name] = report(
            files[name],
            caption=f"../report/{output.id}.rst",
            category=output.category,
            labels={"output": entry, "format": shown[name]},
        )
    return files


def article_settings():
    """The configuration the article's methods are written from (the run variants' definitions only)."""
    keys = (
        "workload",
        "gpus",
        "reference_results",
        "run_variants",
        "dataset",
        "model",
        "diffusion",
        "train",
        "sample",
        "profiling",
        "comparison",
        "conformance",
    )
    return {key: config[key] for key in keys} | {"variants": {v: config["variants"][v] for v in config["run_variants"]}}


# The command line of this invocation as typed, for the README of an exported set. An environment variable rather
# than a parameter: a parameter would make the export rerun whenever the command differs (a dry run, another --cores).
# Jobs inherit it; a Snakemake process that a job starts keeps the first one.
os.environ.setdefault("MEDDDPM_SNAKEMAKE_COMMAND", shlex.join(["snakemake", *sys.argv[1:]]))
