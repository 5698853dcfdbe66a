rule synthetic_dataset:
    output:
        directory("results/dataset/synthetic"),
    log:
        "results/dataset/logs/synthetic.log",
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


rule prepare_dataset:
    input:
        raw=raw_dataset(),
    output:
        prepared=directory(PREPARED),
    log:
        "results/dataset/logs/prepare.log",
    conda:
        "../../envs/workload.yaml"
    params:
        shape=config["dataset"]["shape"],
        heldout=config["dataset"]["heldout"],
        seed=config["dataset"]["seed"],
    message:
        "Preparing the dataset (resample, scale, one-hot masks, split, manifest)"
    script:
        "../scripts/prepare_dataset.py"
