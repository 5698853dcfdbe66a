# Sharing a GPU's results: `snakemake --cores 1 export` writes every label this invocation measures as a reference
# set, data/reference/<label>/ (reporting.export); another checkout imports it by listing the label in
# `reference_results`. The export never runs implicitly: nothing in the DAG reads what it writes.


rule export_reference:
    input:
        unpack(export_inputs),
        code="workflow/scripts/reporting/export.py",
    output:
        "data/reference/{label}/manifest.sha256",
    log:
        "results/{label}/logs/export_reference.log",
    localrule: True
    wildcard_constraints:
        label="|".join(config["gpus"]),
    conda:
        "../../envs/analysis.yaml"
    params:
        config=config,
    message:
        "Exporting the results of {wildcards.label} as the reference set data/reference/{wildcards.label}/"
    script:
        "../scripts/export_reference.py"


rule export:
    input:
        expand("data/reference/{label}/manifest.sha256", label=config["gpus"]),
    localrule: True
