# Extraction of every profile into one tidy schema: per-kernel rows with class and precision, per-class summaries.


rule extract_profile:
    input:
        unpack(profile_inputs),
        code=extraction_code(),
    output:
        kernels=layout.profile_file("{tool}_kernels.parquet"),
        summary=layout.profile_file("{tool}_summary.csv"),
    log:
        layout.run_log("extract_{phase}_{tool}.log"),
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
        details=layout.profile_file("ncu_details.csv"),
        raw=layout.profile_file("ncu_raw.csv"),
        code=extraction_code(),
    output:
        rules=layout.profile_file("ncu_rules.csv"),
    log:
        layout.run_log("extract_{phase}_ncu_rules.log"),
    conda:
        "../../envs/analysis.yaml"
    message:
        "Extracting Nsight Compute's rule results (estimated speedups) of {wildcards.variant}/{wildcards.phase}"
    script:
        "../scripts/extract_ncu_rules.py"


# Profiling alone (no training runs, no figures): `snakemake --configfile config/paper.yaml -- profiles`.
rule profiles:
    """Every configured profile of every run variant, extracted (no training runs, no figures)."""
    input:
        PLAN.profile_summaries(),
        PLAN.ncu_rule_tables(),
    localrule: True
