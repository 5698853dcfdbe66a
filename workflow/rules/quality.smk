rule quality:
    input:
        dataset=PREPARED,
        checkpoint=rules.train.output.checkpoint,
        steps=rules.train.output.steps,
        samples=rules.sample.output.volumes,
        baseline_steps=layout.run_file("train_steps.csv", variant="baseline"),
        baseline_samples=PLAN.sample_volumes(variant="baseline"),
    output:
        layout.run_file("quality.json"),
    log:
        layout.run_log("quality.log"),
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
        "../scripts/quality.py"
