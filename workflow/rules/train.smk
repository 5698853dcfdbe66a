rule train:
    input:
        dataset=PREPARED,
        preflight=PREFLIGHT,
    output:
        summary=layout.run_file("train.json"),
        steps=layout.run_file("train_steps.csv"),
        checkpoint=layout.run_file("checkpoint.pt"),
    log:
        layout.run_log("train.log"),
    benchmark:
        layout.run_log("train.benchmark.tsv")
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=training_gpus,
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
