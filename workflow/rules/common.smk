from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

min_version("9.0")


validate(config, schema="../schemas/config.schema.yaml")


def check_config(config):
    """Consistency the schema cannot express; one line per problem."""
    for label in config["gpus"]:
        if label not in config["hardware"]:
            raise WorkflowError(f"config: gpus lists {label!r}, which is not defined under 'hardware'")
    for name in config["run_variants"]:
        if name not in config["variants"]:
            raise WorkflowError(f"config: run_variants lists {name!r}, which is not defined under 'variants'")
    if config["sample"]["masks"] > config["dataset"]["heldout"]:
        raise WorkflowError(
            f"config: sample.masks ({config['sample']['masks']}) exceeds dataset.heldout ({config['dataset']['heldout']})"
        )
    if config["dataset"]["heldout"] >= config["dataset"]["cases"] and config["dataset"]["source"] == "synthetic":
        raise WorkflowError("config: dataset.heldout must leave at least one training case")
    factor = 2 ** (len(config["model"]["channel_mult"]) - 1)
    if any(side % factor for side in config["dataset"]["shape"]):
        raise WorkflowError(
            f"config: dataset.shape {config['dataset']['shape']} must be divisible by {factor} "
            f"(the U-Net halves it {factor.bit_length() - 1} times)"
        )


check_config(config)


wildcard_constraints:
    gpu="|".join(config["gpus"]),
    variant="|".join(config["run_variants"]),


PREPARED = "results/dataset/prepared"


def raw_dataset():
    if config["dataset"]["source"] == "synthetic":
        return "results/dataset/synthetic"
    return config["dataset"]["root"]


def gpus_needed(wildcards):
    """GPUs a job of this label takes (counted against --resources gpu=N; the SLURM profiles map it to --gpus)."""
    return 0 if config["hardware"][wildcards.gpu]["device"] == "cpu" else 1


def sample_volumes(gpu="{gpu}", variant="{variant}"):
    return [
        f"results/{gpu}/{variant}/samples/sample_{k:03d}.nii.gz"
        for k in range(config["sample"]["masks"])
    ]


def measured(pattern):
    """`pattern` for every (hardware label, variant) this invocation measures."""
    return expand(pattern, gpu=config["gpus"], variant=config["run_variants"])


def job_settings(*sections):
    """The config sections a job depends on, as params, so that changing them reruns exactly those jobs."""
    return {section: config[section] for section in sections}
