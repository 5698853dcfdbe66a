# Med-DDPM GPU performance study as a workflow: every table and figure is rebuilt from the user's own measurements.
# Embedded default: `snakemake --cores 1 paper/figures/all`; the full study: add `--configfile config/paper.yaml --`.


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/sample.smk"
include: "workflow/rules/quality.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/metrics.smk"
include: "workflow/rules/paper.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/bench.smk"


# Plotting, tables and the manifest take seconds: on a cluster they run on the submitting node.
localrules:
    all,
    profiles,
    fig01_runtime_breakdown,
    fig02_top_kernels,
    fig03_instruction_mix,
    fig04_memory_system,
    fig05_warp_states,
    fig06_priority_scores,
    fig07_optimization_impact,
    fig10_roofline,
    tab01_hardware,
    tab04_optimization,
    tab05_claims,
    fig08_end_to_end,
    fig09_quality,
    tab02_workload,
    tab03_kernels,
    tab06_quality,
    manifest,


rule all:
    default_target: True
    input:
        "paper/figures/all",
