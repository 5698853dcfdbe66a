rule fig08_end_to_end:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
    output:
        **figure_outputs("fig08_end_to_end"),
    log:
        "paper/logs/fig08_end_to_end.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
    script:
        "../scripts/fig08_end_to_end.py"


rule fig09_quality:
    input:
        dataset=PREPARED,
        steps=measured("results/{gpu}/{variant}/train_steps.csv")
        + shipped_reference_files("train_steps.csv"),
        quality=measured("results/{gpu}/{variant}/quality.json")
        + shipped_reference_files("quality.json"),
        first_samples=measured("results/{gpu}/{variant}/samples/sample_000.nii.gz"),
    output:
        **figure_outputs("fig09_quality"),
    log:
        "paper/logs/fig09_quality.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"] + reference_labels(),
    script:
        "../scripts/fig09_quality.py"


rule tab02_workload:
    input:
        dataset=PREPARED,
    output:
        **table_outputs("tab02_workload"),
    log:
        "paper/logs/tab02_workload.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        settings=job_settings("model", "diffusion", "train", "dataset"),
    script:
        "../scripts/tab02_workload.py"


rule tab03_kernels:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
        summaries=profile_summaries(),
        rules=ncu_rule_tables(),
        shipped=shipped_reference_files(),
    output:
        **table_outputs("tab03_kernels"),
        classes="paper/tables/tab03_kernels_by_class.csv",
    log:
        "paper/logs/tab03_kernels.log",
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
    script:
        "../scripts/tab03_kernels.py"


rule tab06_quality:
    input:
        quality=measured("results/{gpu}/{variant}/quality.json") + shipped_reference_files("quality.json"),
    output:
        **table_outputs("tab06_quality"),
    log:
        "paper/logs/tab06_quality.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/tab06_quality.py"


rule manifest:
    input:
        [rules.fig01_runtime_breakdown.output.pdf, rules.fig01_runtime_breakdown.output.png],
        [rules.fig02_top_kernels.output.pdf, rules.fig02_top_kernels.output.png],
        [rules.fig03_instruction_mix.output.pdf, rules.fig03_instruction_mix.output.png],
        [rules.fig04_memory_system.output.pdf, rules.fig04_memory_system.output.png],
        [rules.fig05_warp_states.output.pdf, rules.fig05_warp_states.output.png],
        [rules.fig06_priority_scores.output.pdf, rules.fig06_priority_scores.output.png],
        [rules.fig07_optimization_impact.output.pdf, rules.fig07_optimization_impact.output.png],
        [rules.fig10_roofline.output.pdf, rules.fig10_roofline.output.png],
        list(rules.tab01_hardware.output),
        list(rules.tab04_optimization.output),
        list(rules.tab05_claims.output),
        [rules.fig08_end_to_end.output.pdf, rules.fig08_end_to_end.output.png],
        [rules.fig09_quality.output.pdf, rules.fig09_quality.output.png],
        list(rules.tab02_workload.output),
        list(rules.tab03_kernels.output),
        list(rules.tab06_quality.output),
    output:
        "paper/figures/all",
    log:
        "paper/logs/manifest.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/manifest.py"
