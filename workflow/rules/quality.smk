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
    params:
        variant=lambda wildcards: config["variants"][wildcards.variant],
        settings=job_settings("quality"),
    log:
        "results/{gpu}/{variant}/logs/quality.log",
    resources:
        gpu=gpus_needed,
    message:
        "Numeric fidelity and image quality of {wildcards.variant} on {wildcards.gpu}"
    conda:
        "../../envs/workload.yaml"
    script:
        "../scripts/assess_quality.py"
