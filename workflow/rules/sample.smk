rule sample:
    input:
        dataset=PREPARED,
        checkpoint=rules.train.output.checkpoint,
    output:
        summary="results/{gpu}/{variant}/sample.json",
        steps="results/{gpu}/{variant}/sample_steps.csv",
        volumes=sample_volumes(),
    log:
        "results/{gpu}/{variant}/logs/sample.log",
    benchmark:
        "results/{gpu}/{variant}/logs/sample.benchmark.tsv"
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        device=device_params,
        variant=variant_params,
        model=config["model"],
        diffusion=config["diffusion"],
        sample=config["sample"],
    message:
        "Sampling held-out masks with {wildcards.variant} on {wildcards.gpu}"
    script:
        "../scripts/sample.py"
