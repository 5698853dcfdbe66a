import glob
import os
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

from configcheck import ConfigError, check_config, read_mapping, workload_of  # workflow/scripts: on sys.path
from medddpm.switches import Variant

min_version("9.0")


# One line per problem, naming the key and the file that set it (configcheck.py; the schema's own messages dump the
# schema). Snakemake's validate() then runs as in every catalog workflow; it finds nothing left.
try:
    check_config(config, workflow.basedir, [Path(workflow.basedir) / "config.yaml", *workflow.overwrite_configfiles],
                 dict(workflow.config_settings.config))
except ConfigError as _error:
    raise WorkflowError(str(_error)) from None
validate(config, schema="../schemas/config.schema.yaml")


# Every variant is checked once, when the DAG is built: a bad switch is one line naming the variant.
for _name, _switches in config["variants"].items():
    try:
        Variant.from_config(_name, _switches)
    except (TypeError, ValueError) as _error:
        raise WorkflowError(f"config: {_error}") from None


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


wildcard_constraints:
    gpu="|".join(config["gpus"]),
    variant="|".join(config["run_variants"]),


# Each workload prepares into its own folder: switching between config/paper.yaml and config/brats.yaml never
# rebuilds (and so never outdates the results of) the other's dataset.
WORKLOAD = workload_of(config)
PREPARED = "results/dataset/prepared_brats" if WORKLOAD == "brats" else "results/dataset/prepared"
SYNTHETIC = {"synthetic": "results/dataset/synthetic", "synthetic_brats": "results/dataset/synthetic_brats"}


def raw_dataset():
    return SYNTHETIC.get(config["dataset"]["source"], config["dataset"]["root"])


def case_list():
    """The BraTS case list, an input of the preparation when set (editing it re-prepares)."""
    listed = config["dataset"]["case_list"]
    return [listed] if listed is not None and config["dataset"]["source"] == "brats" else []


def preparation_params():
    """What the preparation depends on besides the shape, split and seed: the source and its own settings only,
    so that a setting of the other workload never re-prepares this one."""
    dataset = config["dataset"]
    if WORKLOAD == "brats":
        return {"source": dataset["source"], "layout": dataset["layout"] if dataset["source"] == "brats" else "raw"}
    return {"source": dataset["source"], "scaling": dataset["scaling"]}


def gpus_needed(wildcards):
    """GPUs a job of this label takes (counted against --resources gpu=N; the SLURM profiles map it to --gpus)."""
    return 0 if config["hardware"][wildcards.gpu]["device"] == "cpu" else 1


def sample_volumes(gpu="{gpu}", variant="{variant}"):
    return [f"results/{gpu}/{variant}/samples/sample_{k:03d}.nii.gz" for k in range(config["sample"]["masks"])]


def measured(pattern):
    """`pattern` for every (hardware label, variant) this invocation measures."""
    return expand(pattern, gpu=config["gpus"], variant=config["run_variants"])


wildcard_constraints:
    phase="|".join(config["profiling"]["phases"]),
    tool="torch|ncu|nsys",


def profilers(label):
    """The tools that profile `label`: the config's list, or what `auto` finds on this machine."""
    from profiling.runner import available_tools

    chosen = config["hardware"][label].get("profilers", "auto")
    if chosen == "auto":
        return available_tools(config["hardware"][label]["device"])
    return list(chosen)


def ncu_metric_sets():
    """The named metric lists of `profiling.ncu.metric_sets`."""
    path = Path(workflow.basedir) / config["profiling"]["ncu"]["metric_sets"]
    if not path.is_file():
        raise WorkflowError(
            f"config: profiling.ncu.metric_sets names {path}, which does not exist; fix: correct the path (relative "
            "to the workflow's folder; config/ncu-metrics.yaml ships the paper's sets)"
        )
    try:
        return read_mapping(path, "metric-set file (profiling.ncu.metric_sets)")
    except ConfigError as error:
        raise WorkflowError(str(error)) from None


def ncu_settings(label, phase):
    """ncu settings of `label` and `phase`, metrics resolved to a list (profiling.settings has the order of the
    overrides); they are the profile job's params, so a changed metric set re-profiles."""
    from profiling.settings import MetricSetError, ncu_settings as resolve

    architecture = config["hardware"][label].get("architecture", "")
    try:
        return resolve(config["profiling"]["ncu"], architecture, phase, ncu_metric_sets())
    except MetricSetError as error:
        raise WorkflowError(f"config: {error}") from None


def profile_summaries():
    """Summary tables of every profile this invocation takes."""
    return [
        f"results/{gpu}/{variant}/profile/{phase}/{tool}_summary.csv"
        for gpu in config["gpus"]
        for tool in profilers(gpu)
        for variant in config["run_variants"]
        for phase in config["profiling"]["phases"]
    ]


def ncu_rule_tables():
    return [
        f"results/{gpu}/{variant}/profile/{phase}/ncu_rules.csv"
        for gpu in config["gpus"]
        if "ncu" in profilers(gpu)
        for variant in config["run_variants"]
        for phase in config["profiling"]["phases"]
    ]


COLLECTED = "results/collected"


def measured_result_files():
    """Every result file this invocation measures that the figures and tables read."""
    runs = measured("results/{gpu}/{variant}/train.json") + measured("results/{gpu}/{variant}/sample.json")
    runs += measured("results/{gpu}/{variant}/quality.json") + measured("results/{gpu}/{variant}/train_steps.csv")
    bench = expand("results/{gpu}/bench.csv", gpu=config["gpus"])
    return runs + bench + profile_summaries() + profile_kernel_tables() + ncu_rule_tables() + study_result_files()


# Modules of the reporting package that serve one rule each (the article, the export), not the outputs.
OWN_RULE_MODULES = ("workflow/scripts/reporting/article.py", "workflow/scripts/reporting/export.py")


def reporting_code():
    """The reporting library shared by every output: editing it re-renders them all (an output's own module is an
    input of its rule alone)."""
    shared = glob.glob("workflow/scripts/reporting/*.py", root_dir=workflow.basedir)
    return sorted(set(shared) - set(OWN_RULE_MODULES)) + ["workflow/scripts/profiling/kernels.py",
                                                           "workflow/scripts/medddpm/curves.py"]


def output_inputs(output):
    """A registered output's inputs: the collected tables it reads, its other files, its own module, shared code."""
    inputs = {"hardware": f"{COLLECTED}/hardware.parquet"}
    inputs |= {name: f"{COLLECTED}/{name}.parquet" for name in output.reads}
    # `{prepared}` in a registered file is the prepared dataset of the configured workload; `{baseline_training}` the
    # baseline's train.json on the first label measured (its parameter and FLOP counts: the same on every label).
    baseline_training = f"results/{config['gpus'][0]}/baseline/train.json"
    inputs |= {name: path.format(prepared=PREPARED, baseline_training=baseline_training)
               for name, path in output.files.items()}
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
    return {
        # `report(` may not open a line in a Snakefile (the parser takes it for the `report:` directive).
        name: report(path, caption=f"../report/{output.id}.rst", category=output.category,
                     labels={"output": entry, "format": shown[name]})
        if name in shown else path
        for name, path in output.files_out().items()
    }


def extraction_code():
    """The parsers and kernel classes behind every extracted table: editing them re-extracts (seconds of CPU per
    profile), never re-profiles."""
    modules = ("csvpages", "errors", "instructions", "kernels", "ncu", "nsys", "tables", "torchprof", "units")
    return [f"workflow/scripts/profiling/{module}.py" for module in modules]


def profile_inputs(wildcards):
    prefix = f"results/{wildcards.gpu}/{wildcards.variant}/profile/{wildcards.phase}"
    if wildcards.tool == "torch":
        return {"trace": f"{prefix}/torch_trace.json"}
    if wildcards.tool == "ncu":
        # ncu's own log says how many kernels it profiled: a raw export cut at a row boundary is refused.
        tool_log = f"results/{wildcards.gpu}/{wildcards.variant}/logs/profile_{wildcards.phase}_ncu.tool.log"
        return {"raw": f"{prefix}/ncu_raw.csv", "details": f"{prefix}/ncu_details.csv", "tool_log": tool_log}
    return {"kern_sum": f"{prefix}/nsys_kern_sum.csv"}


# Shipped reference sets (data/reference/<label>/, config key `reference_results`) read by the figures.
def reference_labels():
    """Shipped reference sets drawn on: `reference_results`, less the labels measured here (measured wins)."""
    return [label for label in config["reference_results"] if label not in config["gpus"]]


def conformance_labels():
    """Labels measured here whose shipped set is listed too: the references of tab08."""
    return [label for label in config["reference_results"] if label in config["gpus"]]


def shipped_reference_files(labels=None):
    """Files of the shipped reference sets (listed at parse time) that the figures and tables read, of `labels`
    (default: those drawn on). A label in `reference_results` without a folder under data/reference/ is an error."""
    from reporting.results import SHIPPED_NAMES

    files = []
    for label in reference_labels() if labels is None else labels:
        root = Path(workflow.basedir) / "data" / "reference" / label
        if not root.is_dir():
            raise WorkflowError(
                f"config: reference_results lists {label!r}, but data/reference/{label}/ does not exist"
            )
        found = glob.glob(f"data/reference/{label}/**/*", recursive=True, root_dir=workflow.basedir)
        files += sorted(f for f in found if f.endswith(SHIPPED_NAMES))
    return files


def profile_kernel_tables():
    """Tidy per-kernel tables of every profile this invocation takes (next to the summaries)."""
    return [path.removesuffix("_summary.csv") + "_kernels.parquet" for path in profile_summaries()]


# The Nsight Compute settings of every label that runs it, resolved when the DAG is built: a missing or broken
# metric-set file is then one line, not the traceback of the input function that needs it.
for _label in config["gpus"]:
    if "ncu" in profilers(_label):
        for _phase in config["profiling"]["phases"]:
            ncu_settings(_label, _phase)


# Export of a label's results as a reference set (data/reference/<label>/; reporting.export).
def export_inputs(wildcards):
    """What the reference set of a label measured here is made of: the run files of every run variant, each profile's
    tidy tables and raw exports, the bench, and the quality study's runs (where the label runs it)."""
    label = wildcards.label
    names = ["train.json", "sample.json", "quality.json", "train_steps.csv", "sample_steps.csv"]
    files = [f"results/{label}/{variant}/{name}" for variant in config["run_variants"] for name in names]
    raw = {"torch": ["torch_trace.json"], "ncu": ["ncu_raw.csv", "ncu_details.csv", "ncu_rules.csv"],
           "nsys": ["nsys_kern_sum.csv"]}
    for variant in config["run_variants"]:
        for phase in config["profiling"]["phases"]:
            for tool in profilers(label):
                prefix = f"results/{label}/{variant}/profile/{phase}"
                files += [f"{prefix}/{tool}_summary.csv", f"{prefix}/{tool}_kernels.parquet"]
                files += [f"{prefix}/{name}" for name in raw[tool]]
    files += [f"results/{label}/{name}" for name in ("bench.csv", "bench.md", "device_rates.json")]
    files += [path for path in study_result_files() if path.startswith(f"results/{label}/")]
    return {"results": files}


def article_settings():
    """The configuration the article's methods are written from (the run variants' definitions only)."""
    keys = ("gpus", "reference_results", "run_variants", "dataset", "model", "diffusion", "train", "sample",
            "profiling", "conformance")
    return {key: config[key] for key in keys} | {"variants": {v: config["variants"][v] for v in config["run_variants"]}}


# The command line of this invocation as typed, for the README of an exported set. An environment variable rather
# than a parameter: a parameter would make the export rerun whenever the command differs (a dry run, another --cores).
# Jobs inherit it; a Snakemake process that a job starts keeps the first one.
os.environ.setdefault("MEDDDPM_SNAKEMAKE_COMMAND", shlex.join(["snakemake", *sys.argv[1:]]))
