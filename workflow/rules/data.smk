rule synthetic_dataset:
    output:
        directory("results/dataset/synthetic"),
    params:
        cases=config["dataset"]["cases"],
        shape=config["dataset"]["shape"],
        seed=config["dataset"]["seed"],
    log:
        "results/dataset/logs/synthetic.log",
    message:
        "Deriving {params.cases} synthetic whole-head cases from the MNI152 template"
    conda:
        "../../envs/workload.yaml"
    script:
        "../scripts/make_synthetic.py"


rule prepare_dataset:
    input:
        raw=raw_dataset(),
    output:
        prepared=directory(PREPARED),
    params:
        shape=config["dataset"]["shape"],
        heldout=config["dataset"]["heldout"],
        seed=config["dataset"]["seed"],
    log:
        "results/dataset/logs/prepare.log",
    message:
        "Preparing the dataset (resample, scale, one-hot masks, split, manifest)"
    conda:
        "../../envs/workload.yaml"
    script:
        "../scripts/prepare_dataset.py"
