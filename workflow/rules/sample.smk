rule sample:
    input:
        dataset=PREPARED,
        preflight=PREFLIGHT,
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


# The fast samplers of `samplers` (medddpm.fast_sampling): every one at each of its step counts, whole chains timed
# at every batch size, after one compilation of the variant's U-Net evaluation shared by all of them.
rule sample_fast:
    input:
        dataset=PREPARED,
        preflight=PREFLIGHT,
        checkpoint=rules.train.output.checkpoint,
    output:
        summary=layout.run_file("samplers.json"),
    log:
        layout.run_log("sample_fast.log"),
    benchmark:
        layout.run_log("sample_fast.benchmark.tsv")
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
        samplers=config["fast_sampling"]["samplers"],
        chains=config["fast_sampling"]["chains"],
        batch_chains=config["fast_sampling"]["batch_chains"],
        comparison=config["comparison"],
        batch_sizes=config["fast_sampling"]["batch_sizes"] or config["sample"]["batch_sizes"],
    message:
        (
            f"Timing the fast samplers {sampler_words(config['fast_sampling']['samplers'])} against the "
            f"{config['diffusion']['timesteps']}-step chain with {{wildcards.variant}} on {{wildcards.gpu}}"
        )
    script:
        "../scripts/sample_fast.py"
