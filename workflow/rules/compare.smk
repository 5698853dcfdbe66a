# The paired comparisons of a hardware label's run variants: every speed-up and its verdict. The variants are timed
# in groups of processes that fit on the device together (measurement.comparison_groups), each group a job of its own
# (medddpm.comparison.time_group), so that a run cut short keeps the groups it finished; `compare` judges them all
# (measurement.verdicts). Needs train.smk (device_params) included before it.


localrules:
    compare,


rule compare_group:
    input:
        dataset=PREPARED,
        preflight=PREFLIGHT,
    output:
        summary=layout.label_file("comparison_groups/{group}.json"),
        rounds=layout.label_file("comparison_groups/{group}.csv"),
    log:
        layout.label_log("compare_group{group}.log"),
    benchmark:
        layout.label_log("compare_group{group}.benchmark.tsv")
    wildcard_constraints:
        group="|".join(str(number) for number in range(1, len(PLAN.comparison_groups()) + 1)),
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        device=device_params,
        variants=lambda wildcards: {
            v: Variant.from_config(v, config["variants"][v]).switches()
            for v in PLAN.comparison_groups()[int(wildcards.group) - 1]
        },
        groups=len(PLAN.comparison_groups()),
        model=config["model"],
        diffusion=config["diffusion"],
        train=config["train"],
        sample=config["sample"],
        comparison=config["comparison"],
    message:
        (
            f"Paired rounds of {join_words(config['comparison']['phases'])} steps on {{wildcards.gpu}}, group "
            "{wildcards.group} of {params.groups}, until each speed-up's interval decides"
        )
    script:
        "../scripts/compare_group.py"


rule compare:
    input:
        summaries=lambda wildcards: PLAN.comparison_group_files(wildcards.gpu, "json"),
        rounds=lambda wildcards: PLAN.comparison_group_files(wildcards.gpu, "csv"),
    output:
        summary=layout.label_file("comparison.json"),
        rounds=layout.label_file("comparison_rounds.csv"),
    log:
        layout.label_log("compare.log"),
    conda:
        "../../envs/workload.yaml"
    params:
        groups=PLAN.comparison_groups(),
        comparison=config["comparison"],
    message:
        "Each speed-up on {wildcards.gpu} judged from its group's paired rounds"
    script:
        "../scripts/compare.py"
