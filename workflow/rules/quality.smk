rule quality:
    input:
        dataset=PREPARED,
        checkpoint=rules.train.output.checkpoint,
        steps=rules.train.output.steps,
        samples=rules.sample.output.volumes,
        baseline_steps="results/{gpu}/baseline/train_steps.csv",
        baseline_samples=sample_volumes(variant="baseline"),
    output:
        "results/{gpu}/{variant}/quality.json",
    log:
        "results/{gpu}/{variant}/logs/quality.log",
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        device=device_params,
        variant=variant_params,
        model=config["model"],
        diffusion=config["diffusion"],
        quality=config["quality"],
    message:
        "Numeric fidelity and image quality of {wildcards.variant} on {wildcards.gpu}"
    script:
        "../scripts/assess_quality.py"
