rule sample:
    input:
        dataset=PREPARED,
        checkpoint=rules.train.output.checkpoint,
    output:
        summary="results/{gpu}/{variant}/sample.json",
        steps="results/{gpu}/{variant}/sample_steps.csv",
        volumes=sample_volumes(),
    params:
        variant=lambda wildcards: config["variants"][wildcards.variant],
        settings=job_settings("sample"),
    log:
        "results/{gpu}/{variant}/logs/sample.log",
    benchmark:
        "results/{gpu}/{variant}/logs/sample.benchmark.tsv"
    resources:
        gpu=gpus_needed,
    message:
        "Sampling held-out masks with {wildcards.variant} on {wildcards.gpu}"
    conda:
        "../../envs/workload.yaml"
    script:
        "../scripts/sample.py"
