from medddpm.switches import Variant

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


rule train:
    input:
        dataset=PREPARED,
    output:
        summary="results/{gpu}/{variant}/train.json",
        steps="results/{gpu}/{variant}/train_steps.csv",
        checkpoint="results/{gpu}/{variant}/checkpoint.pt",
    log:
        "results/{gpu}/{variant}/logs/train.log",
    benchmark:
        "results/{gpu}/{variant}/logs/train.benchmark.tsv"
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        device=device_params,
        variant=variant_params,
        model=config["model"],
        diffusion=config["diffusion"],
        train=config["train"],
    message:
        "Training {wildcards.variant} on {wildcards.gpu}"
    script:
        "../scripts/train.py"
