import glob
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

# The workflow's packages (workflow/scripts) serve the DAG's input functions too.
sys.path.insert(0, str(Path(workflow.basedir) / "workflow" / "scripts"))

from medddpm.switches import Variant  # noqa: E402 (importable once the path is set)

min_version("9.0")


validate(config, schema="../schemas/config.schema.yaml")


# The two workloads: whole-head (1 image channel, a 2-channel mask) and BraTS (4 modalities, a 4-channel mask).
BRATS_SOURCES = ("brats", "synthetic_brats")
CHANNELS = {"wholehead": (1, 2), "brats": (4, 4)}
BRATS_SUFFIX = "_brats"


def workload_of(config):
    return "brats" if config["dataset"]["source"] in BRATS_SOURCES else "wholehead"


def check_config(config):
    """Consistency the schema cannot express; one line per problem."""
    for label in config["gpus"]:
        if label not in config["hardware"]:
            raise WorkflowError(f"config: gpus lists {label!r}, which is not defined under 'hardware'")
    # BraTS results live under their own labels (h200_brats, ...), so that they never mix with, or replace, the
    # whole-head results of the same GPU (results/<label>/, the figures' panels, the shipped reference sets).
    workload, source = workload_of(config), config["dataset"]["source"]
    for label in config["gpus"]:
        if workload == "brats" and not label.endswith(BRATS_SUFFIX):
            raise WorkflowError(
                f"config: dataset.source {source} is the BraTS workload, whose results live under hardware labels "
                f"ending in {BRATS_SUFFIX} (h200_brats, ... in config/brats.yaml); gpus lists {label!r}"
            )
        if workload == "wholehead" and label.endswith(BRATS_SUFFIX):
            raise WorkflowError(
                f"config: gpus lists {label!r}, a BraTS label, but dataset.source {source} is the whole-head workload"
            )
    image, mask = CHANNELS[workload]
    model = config["model"]
    if (model["in_channels"], model["out_channels"]) != (image + mask, image):
        raise WorkflowError(
            f"config: the {workload} workload has {image} image and {mask} mask channel(s), so model.in_channels "
            f"must be {image + mask} and model.out_channels {image} (got {model['in_channels']} and "
            f"{model['out_channels']})"
        )
    for name in config["run_variants"]:
        if name not in config["variants"]:
            raise WorkflowError(f"config: run_variants lists {name!r}, which is not defined under 'variants'")
    if "baseline" not in config["run_variants"]:
        raise WorkflowError(
            "config: run_variants must include 'baseline' (every quality check and speed-up is relative to it)"
        )
    if config["quality"]["ssim_kernel"] % 2 == 0:
        raise WorkflowError(f"config: quality.ssim_kernel must be odd (a centred Gaussian window), got "
                            f"{config['quality']['ssim_kernel']}")
    if config["sample"]["masks"] > config["dataset"]["heldout"]:
        raise WorkflowError(
            f"config: sample.masks ({config['sample']['masks']}) exceeds dataset.heldout "
            f"({config['dataset']['heldout']})"
        )
    synthetic = config["dataset"]["source"] in ("synthetic", "synthetic_brats")
    if config["dataset"]["heldout"] >= config["dataset"]["cases"] and synthetic:
        raise WorkflowError("config: dataset.heldout must leave at least one training case")
    factor = 2 ** (len(config["model"]["channel_mult"]) - 1)
    crop = config["quality"]["reference_shape"]
    if crop is not None and any(c % factor or c > s for c, s in zip(crop, config["dataset"]["shape"])):
        raise WorkflowError(
            f"config: quality.reference_shape {crop} must fit in dataset.shape and be divisible by {factor}"
        )
    if any(side % factor for side in config["dataset"]["shape"]):
        raise WorkflowError(
            f"config: dataset.shape {config['dataset']['shape']} must be divisible by {factor} "
            f"(the U-Net halves it {factor.bit_length() - 1} times)"
        )
    check_study(config)


def check_study(config):
    """The quality study's settings, one line per problem."""
    study = config["quality_study"]
    for name in study["variants"]:
        if name not in config["variants"]:
            raise WorkflowError(f"config: quality_study.variants lists {name!r}, which is not defined under 'variants'")
    if "baseline" not in study["variants"]:
        raise WorkflowError("config: quality_study.variants must include 'baseline' (every run is compared with it)")
    for label in study["gpus"] or []:
        if label not in config["gpus"]:
            raise WorkflowError(f"config: quality_study.gpus lists {label!r}, which is not in gpus {config['gpus']}")
    data = study["dataset"]
    if data["heldout"] >= data["cases"] and config["dataset"]["source"] in ("synthetic", "synthetic_brats"):
        raise WorkflowError("config: quality_study.dataset.heldout must leave at least one training case")
    if study["masks"] > data["heldout"]:
        raise WorkflowError(
            f"config: quality_study.masks ({study['masks']}) exceeds quality_study.dataset.heldout ({data['heldout']})"
        )
    levels = len(study["model"].get("channel_mult", config["model"]["channel_mult"]))
    factor = 2 ** (levels - 1)
    if any(side % factor for side in data["shape"]):
        raise WorkflowError(
            f"config: quality_study.dataset.shape {data['shape']} must be divisible by {factor} "
            f"(the U-Net halves it {levels - 1} times)"
        )
    if study["ssim_kernel"] % 2 == 0 or study["ssim_kernel"] > min(data["shape"]) * 2 - 1:
        raise WorkflowError(
            f"config: quality_study.ssim_kernel must be odd and at most 2 x the smallest side - 1, got "
            f"{study['ssim_kernel']}"
        )


check_config(config)

# Every variant is checked once, when the DAG is built: a bad switch is one line naming the variant.
for _name, _switches in config["variants"].items():
    try:
        Variant.from_config(_name, _switches)
    except (TypeError, ValueError) as _error:
        raise WorkflowError(f"config: {_error}")


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
    import yaml

    path = Path(workflow.basedir) / config["profiling"]["ncu"]["metric_sets"]
    if not path.is_file():
        raise WorkflowError(f"config: profiling.ncu.metric_sets names {path}, which does not exist")
    return yaml.safe_load(path.read_text()) or {}


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


def reporting_code():
    """The reporting library shared by every output: editing it re-renders them all (an output's own module is an
    input of its rule alone)."""
    shared = glob.glob("workflow/scripts/reporting/*.py", root_dir=workflow.basedir)
    return sorted(shared) + ["workflow/scripts/profiling/kernels.py", "workflow/scripts/medddpm/curves.py"]


def output_inputs(output):
    """A registered output's inputs: the collected tables it reads, its other files, its own module, shared code."""
    inputs = {"hardware": f"{COLLECTED}/hardware.parquet"}
    inputs |= {name: f"{COLLECTED}/{name}.parquet" for name in output.reads}
    # `{prepared}` in a registered file is the prepared dataset of the configured workload.
    inputs |= {name: path.format(prepared=PREPARED) for name, path in output.files.items()}
    inputs["code"] = [output.code, *reporting_code()]
    return inputs


def output_files(output):
    """A registered output's files; the figures' PDF and PNG and the tables' CSV go into the HTML report."""
    category = "Figures" if output.kind == "figure" else "Tables"
    shown = ("pdf", "png") if output.kind == "figure" else ("csv",)
    return {
        name: report(path, caption=f"../report/{output.id}.rst", category=category) if name in shown else path
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
        return {"raw": f"{prefix}/ncu_raw.csv", "details": f"{prefix}/ncu_details.csv"}
    return {"kern_sum": f"{prefix}/nsys_kern_sum.csv"}


# Shipped reference sets (data/reference/<label>/, config key `reference_results`) read by the figures.
def reference_labels():
    """Shipped reference sets drawn on: `reference_results`, less the labels measured here (measured wins)."""
    return [label for label in config.get("reference_results", ["h200"]) if label not in config["gpus"]]


def shipped_reference_files(*names):
    """Files of the shipped reference sets (listed at parse time), those ending in one of `names` (default all the
    figures read). A label in `reference_results` without a folder under data/reference/ is an error."""
    from reporting.results import SHIPPED_NAMES

    names = names or SHIPPED_NAMES
    files = []
    for label in reference_labels():
        root = Path(workflow.basedir) / "data" / "reference" / label
        if not root.is_dir():
            raise WorkflowError(
                f"config: reference_results lists {label!r}, but data/reference/{label}/ does not exist"
            )
        found = glob.glob(f"data/reference/{label}/**/*", recursive=True, root_dir=workflow.basedir)
        files += sorted(f for f in found if f.endswith(names))
    return files


def profile_kernel_tables():
    """Tidy per-kernel tables of every profile this invocation takes (next to the summaries)."""
    return [path.removesuffix("_summary.csv") + "_kernels.parquet" for path in profile_summaries()]
