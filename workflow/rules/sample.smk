rule sample:
    input:
        dataset=PREPARED,
        checkpoint=rules.train.output.checkpoint,
    output:
        summary=layout.run_file("sample.json"),
        steps=layout.run_file("sample_steps.csv"),
        volumes=PLAN.sample_volumes(),
    log:
        layout.run_log("sample.log"),
    benchmark:
        layout.run_log("sample.benchmark.tsv")
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
