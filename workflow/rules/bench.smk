# The bench: per hardware label, the device's measured ceilings and every run variant's cost against them.
#   snakemake --cores 1 bench                       (the embedded default, on this machine's CPU)
#   snakemake --cores 1 --configfile config/paper.yaml config/frontier.yaml -- bench   (the ladder on a GPU)
# Needs train.smk (device_params) and sample.smk included before it.


localrules:
    bench,
    bench_table,


rule device_rates:
    output:
        layout.label_file("device_rates.json"),
    log:
        layout.label_log("device_rates.log"),
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
        train=lambda wildcards: PLAN.runs("train.json", [wildcards.gpu]),
        sample=lambda wildcards: PLAN.runs("sample.json", [wildcards.gpu]),
        rates=rules.device_rates.output[0],
        # The paired rounds' speed-ups and intervals where the run variants hold a comparison (compare.smk).
        comparison=lambda wildcards: (
            [layout.label_file("comparison.json", WORKLOAD, wildcards.gpu)] if PLAN.compares() else []
        ),
    output:
        csv=layout.label_file("bench.csv"),
        md=layout.label_file("bench.md"),
    log:
        layout.label_log("bench_table.log"),
    conda:
        "../../envs/analysis.yaml"
    message:
        "Bench table of {wildcards.gpu}"
    script:
        "../scripts/bench_table.py"


rule bench:
    """Each label's bench table: the variants against the device's measured ceilings (tab07, fig11)."""
    input:
        [layout.label_file("bench.md", WORKLOAD, gpu) for gpu in config["gpus"]],
    log:
        layout.workload_log("bench.log", WORKLOAD),
    conda:
        "../../envs/analysis.yaml"
    message:
        "The bench tables"
    shell:
        "cat {input} | tee {log}"
