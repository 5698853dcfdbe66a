# Sharing a GPU's results: `snakemake --cores 1 export` writes every label this invocation measures as a reference
# set, data/reference/<workload>/<label>/ (reporting.export); another checkout imports it by listing the label in
# `reference_results`. The export never runs implicitly: nothing in the DAG reads what it writes.


rule export_reference:
    input:
        results=lambda wildcards: PLAN.export_files(wildcards.label),
        code="workflow/scripts/reporting/export.py",
    output:
        layout.reference_manifest(gpu="{label}"),
    log:
        layout.label_log("export_reference.log", gpu="{label}"),
    wildcard_constraints:
        label="|".join(config["gpus"]),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        config=config,
    message:
        "Exporting the results of {wildcards.label} as the reference set data/reference/{wildcards.workload}/{wildcards.label}/"
    script:
        "../scripts/export_reference.py"


rule export:
    """Each label measured here exported as a reference set, data/reference/<workload>/<label>/."""
    input:
        [layout.reference_manifest(WORKLOAD, label) for label in config["gpus"]],
    localrule: True
