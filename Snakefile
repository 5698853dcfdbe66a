# Med-DDPM GPU performance study as a workflow: every table and figure is rebuilt from the user's own measurements.
# Embedded default: `snakemake --cores 1 paper/figures/all`; the full study: add `--configfile config/paper.yaml --`.


configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/sample.smk"
include: "workflow/rules/quality.smk"
include: "workflow/rules/quality_study.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/metrics.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/bench.smk"


rule all:
    default_target: True
    localrule: True
    input:
        "paper/figures/all",
