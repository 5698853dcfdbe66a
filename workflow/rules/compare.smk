# The paired comparisons of a hardware label's run variants (medddpm.comparison): every speed-up and its verdict.
# Needs train.smk (device_params) included before it.


rule compare:
    input:
        dataset=PREPARED,
        preflight=PREFLIGHT,
    output:
        summary=layout.label_file("comparison.json"),
        rounds=layout.label_file("comparison_rounds.csv"),
    log:
        layout.label_log("compare.log"),
    benchmark:
        layout.label_log("compare.benchmark.tsv")
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        device=device_params,
        variants=lambda wildcards: {
            v: Variant.from_config(v, config["variants"][v]).switches() for v in config["run_variants"]
        },
        model=config["model"],
        diffusion=config["diffusion"],
        train=config["train"],
        sample=config["sample"],
        comparison=config["comparison"],
    message:
        "Paired rounds of {params.comparison[phases]} steps of every variant on {wildcards.gpu}, until each speed-up's interval decides"
    script:
        "../scripts/compare.py"
