# The bench: per hardware label, the device's measured ceilings and every run variant's cost against them.
#   snakemake --cores 1 bench                       (the embedded default, on this machine's CPU)
#   snakemake --cores 1 --configfile config/paper.yaml config/frontier.yaml -- bench   (the ladder on a GPU)
# Needs train.smk (device_params) and sample.smk included before it.


localrules:
    bench,
    bench_table,


rule device_rates:
    output:
        "results/{gpu}/device_rates.json",
    log:
        "results/{gpu}/logs/device_rates.log",
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        device=device_params,
        rates=config["bench"],
    message:
        "Measuring the bf16 matrix-product rate and copy bandwidth of {wildcards.gpu}"
    script:
        "../scripts/device_rates.py"


rule bench_table:
    input:
        train=expand("results/{{gpu}}/{variant}/train.json", variant=config["run_variants"]),
        sample=expand("results/{{gpu}}/{variant}/sample.json", variant=config["run_variants"]),
        rates=rules.device_rates.output[0],
    output:
        csv="results/{gpu}/bench.csv",
        md="results/{gpu}/bench.md",
    log:
        "results/{gpu}/logs/bench_table.log",
    conda:
        "../../envs/analysis.yaml"
    message:
        "Bench table of {wildcards.gpu}"
    script:
        "../scripts/bench_table.py"


rule bench:
    input:
        expand("results/{gpu}/bench.md", gpu=config["gpus"]),
    log:
        "results/logs/bench.log",
    conda:
        "../../envs/analysis.yaml"
    message:
        "The bench tables"
    shell:
        "cat {input} | tee {log}"
