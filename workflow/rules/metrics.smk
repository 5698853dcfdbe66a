# Extraction of every profile into one tidy schema: per-kernel rows with class and precision, per-class summaries.


rule extract_profile:
    input:
        unpack(profile_inputs),
        code=extraction_code(),
    output:
        kernels="results/{gpu}/{variant}/profile/{phase}/{tool}_kernels.parquet",
        summary="results/{gpu}/{variant}/profile/{phase}/{tool}_summary.csv",
    log:
        "results/{gpu}/{variant}/logs/extract_{phase}_{tool}.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        tool=lambda wildcards: wildcards.tool,
    message:
        "Extracting the {wildcards.tool} profile of {wildcards.variant}/{wildcards.phase} on {wildcards.gpu}"
    script:
        "../scripts/extract_profile.py"


rule extract_ncu_rules:
    input:
        details="results/{gpu}/{variant}/profile/{phase}/ncu_details.csv",
        code=extraction_code(),
    output:
        rules="results/{gpu}/{variant}/profile/{phase}/ncu_rules.csv",
    log:
        "results/{gpu}/{variant}/logs/extract_{phase}_ncu_rules.log",
    conda:
        "../../envs/analysis.yaml"
    message:
        "Extracting Nsight Compute's rule results (estimated speedups) of {wildcards.variant}/{wildcards.phase}"
    script:
        "../scripts/extract_ncu_rules.py"


# Profiling alone (no training runs, no figures): `snakemake --configfile config/paper.yaml -- profiles`.
rule profiles:
    localrule: True
    input:
        profile_summaries(),
        ncu_rule_tables(),
