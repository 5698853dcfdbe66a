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
