# The paper's kernel-level figures and tables (fig01-fig07, fig10, tab01, tab04, tab05): runs measured here and
# the shipped reference sets of `reference_results` (data/reference/<label>/), faceted by hardware label.
# Needs paper_common.smk (included before this file).


rule fig01_runtime_breakdown:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        summaries=profile_summaries(),
        shipped=shipped_reference_files(),
    output:
        **figure_outputs("fig01_runtime_breakdown"),
    log:
        "paper/logs/fig01_runtime_breakdown.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/fig01_runtime_breakdown.py"


rule fig02_top_kernels:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        kernels=profile_kernel_tables(),
        shipped=shipped_reference_files(),
    output:
        **figure_outputs("fig02_top_kernels"),
    log:
        "paper/logs/fig02_top_kernels.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/fig02_top_kernels.py"


rule fig03_instruction_mix:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        kernels=profile_kernel_tables(),
        summaries=profile_summaries(),
        shipped=shipped_reference_files(),
    output:
        **figure_outputs("fig03_instruction_mix"),
    log:
        "paper/logs/fig03_instruction_mix.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/fig03_instruction_mix.py"


rule fig04_memory_system:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        kernels=profile_kernel_tables(),
        summaries=profile_summaries(),
        shipped=shipped_reference_files(),
    output:
        **figure_outputs("fig04_memory_system"),
    log:
        "paper/logs/fig04_memory_system.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/fig04_memory_system.py"


rule fig05_warp_states:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        kernels=profile_kernel_tables(),
        summaries=profile_summaries(),
        shipped=shipped_reference_files(),
    output:
        **figure_outputs("fig05_warp_states"),
    log:
        "paper/logs/fig05_warp_states.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/fig05_warp_states.py"


rule fig06_priority_scores:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        kernels=profile_kernel_tables(),
        summaries=profile_summaries(),
        rules=ncu_rule_tables(),
        shipped=shipped_reference_files(),
    output:
        **figure_outputs("fig06_priority_scores"),
    log:
        "paper/logs/fig06_priority_scores.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/fig06_priority_scores.py"


rule fig07_optimization_impact:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        summaries=profile_summaries(),
        shipped=shipped_reference_files(),
    output:
        **figure_outputs("fig07_optimization_impact"),
    log:
        "paper/logs/fig07_optimization_impact.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/fig07_optimization_impact.py"


rule fig10_roofline:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        kernels=profile_kernel_tables(),
        summaries=profile_summaries(),
        peaks="data/gpu_peaks.yaml",
        shipped=shipped_reference_files(),
    output:
        **figure_outputs("fig10_roofline"),
    log:
        "paper/logs/fig10_roofline.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/fig10_roofline.py"


rule tab01_hardware:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        shipped=shipped_reference_files(),
    output:
        **table_outputs("tab01_hardware"),
    log:
        "paper/logs/tab01_hardware.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/tab01_hardware.py"


rule tab04_optimization:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        summaries=profile_summaries(),
        shipped=shipped_reference_files(),
    output:
        **table_outputs("tab04_optimization"),
    log:
        "paper/logs/tab04_optimization.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/tab04_optimization.py"


rule tab05_claims:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        summaries=profile_summaries(),
        quality=measured("results/{gpu}/{variant}/quality.json"),
        claims="data/paper_claims.yaml",
        shipped=shipped_reference_files(),
    output:
        **table_outputs("tab05_claims"),
    log:
        "paper/logs/tab05_claims.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=reference_labels(),
    script:
        "../scripts/tab05_claims.py"
