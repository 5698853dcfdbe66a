# The raw cases of each synthetic source (medddpm.workloads): one rule each, whichever workload is configured, so
# that each workload's folder is its own.
for _workload, _source in synthetic_sources():

    rule:
        name:
            _source.rule
        output:
            directory(layout.dataset_dir("synthetic", _workload.name)),
        log:
            layout.dataset_log("synthetic", _workload.name),
        conda:
            "../../envs/workload.yaml"
        params:
            source=_source.name,
            cases=config["dataset"]["cases"],
            shape=config["dataset"]["shape"],
            seed=config["dataset"]["seed"],
        message:
            f"Deriving {{params.cases}} {_source.derives}"
        script:
            "../scripts/synthetic_dataset.py"

    # Its line in `snakemake --list-target-rules`.
    workflow.get_rule(_source.rule).docstring = f"{_source.derives[:1].upper()}{_source.derives[1:]}."


rule prepare_dataset:
    """The configured dataset prepared (scaled, resized or cropped, one-hot masks, split, manifest)."""
    input:
        raw=raw_dataset(),
        case_list=case_list(),
    output:
        prepared=directory(PREPARED),
    log:
        layout.dataset_log("prepare", WORKLOAD),
    conda:
        "../../envs/workload.yaml"
    params:
        source=PREPARATION,
        shape=config["dataset"]["shape"],
        heldout=config["dataset"]["heldout"],
        seed=config["dataset"]["seed"],
    message:
        "Preparing the {WORKLOAD} dataset (scale, resize or crop, one-hot masks, split, manifest)"
    script:
        "../scripts/prepare_dataset.py"
