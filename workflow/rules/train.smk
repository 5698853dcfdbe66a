rule train:
    input:
        dataset=PREPARED,
    output:
        summary="results/{gpu}/{variant}/train.json",
        steps="results/{gpu}/{variant}/train_steps.csv",
        checkpoint="results/{gpu}/{variant}/checkpoint.pt",
    params:
        variant=lambda wildcards: config["variants"][wildcards.variant],
        settings=job_settings("model", "diffusion", "train"),
    log:
        "results/{gpu}/{variant}/logs/train.log",
    benchmark:
        "results/{gpu}/{variant}/logs/train.benchmark.tsv"
    resources:
        gpu=gpus_needed,
    message:
        "Training {wildcards.variant} on {wildcards.gpu}"
    conda:
        "../../envs/workload.yaml"
    script:
        "../scripts/train.py"
