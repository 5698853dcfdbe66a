rule synthetic_dataset:
    output:
        directory(layout.dataset_dir("synthetic", "wholehead")),
    log:
        layout.dataset_log("synthetic", "wholehead"),
    conda:
        "../../envs/workload.yaml"
    params:
        cases=config["dataset"]["cases"],
        shape=config["dataset"]["shape"],
        seed=config["dataset"]["seed"],
    message:
        "Deriving {params.cases} synthetic whole-head cases from the MNI152 template and tissue maps"
    script:
        "../scripts/make_synthetic.py"


rule synthetic_brats_dataset:
    output:
        directory(layout.dataset_dir("synthetic", "brats")),
    log:
        layout.dataset_log("synthetic", "brats"),
    conda:
        "../../envs/workload.yaml"
    params:
        cases=config["dataset"]["cases"],
        shape=config["dataset"]["shape"],
        seed=config["dataset"]["seed"],
    message:
        "Deriving {params.cases} synthetic raw BraTS 2021 cases from the MNI152 tissue maps"
    script:
        "../scripts/make_synthetic_brats.py"


rule prepare_dataset:
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
        source=preparation_params(),
        shape=config["dataset"]["shape"],
        heldout=config["dataset"]["heldout"],
        seed=config["dataset"]["seed"],
    message:
        "Preparing the {WORKLOAD} dataset (scale, resize or crop, one-hot masks, split, manifest)"
    script:
        "../scripts/prepare_dataset.py"
