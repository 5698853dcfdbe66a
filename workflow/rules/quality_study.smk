# The quality study (medddpm.study): every variant of `quality_study.variants` trains its own model from the same
# seed, data and budget, samples the first held-out masks from the same noise, and is compared with the held-out real
# images and with the baseline; the baseline trains once more per extra seed (the seed-to-seed spread). Target
# `quality_study` prints each label's summary and verdict; paper/figures/all collects the study too (fig09, tab05,
# tab06). Sizes: config.yaml (a CPU miniature), config/paper.yaml (the H200 study and its budget).

STUDY = config["quality_study"]


def study_labels():
    """Hardware labels that run the study: `quality_study.gpus`, or every label of `gpus`."""
    return config["gpus"] if STUDY["gpus"] is None else STUDY["gpus"]


def study_runs():
    """(variant, seed) of every run: each variant with the first seed, the baseline with every seed."""
    first, *others = STUDY["seeds"]
    return [(variant, first) for variant in STUDY["variants"]] + [("baseline", seed) for seed in others]


def study_run_files(label, name):
    return [f"results/{label}/study/{variant}/seed{seed}/{name}" for variant, seed in study_runs()]


def study_result_files():
    """Every study file the collector reads, for every label that runs the study."""
    names = ("run.json", "losses.csv", "slice.npy", "comparison.json")
    return [path for label in study_labels() for name in names for path in study_run_files(label, name)]


def study_volumes(label="{gpu}", variant="{variant}", seed="{seed}"):
    return [f"results/{label}/study/{variant}/seed{seed}/samples/sample_{k:03d}.nii.gz" for k in range(STUDY["masks"])]


def study_model():
    return {**config["model"], **STUDY["model"]}


# What a study run takes from `train`: the loop's settings (not how many steps the timing runs measure).
STUDY_LOOP = ("lr", "gradient_accumulation", "ema_decay", "ema_update_every", "ema_start_step")


def study_train(wildcards):
    """The training loop's settings for one run: the config's `train`, the study's overrides, the run's seed."""
    loop = {key: config["train"][key] for key in STUDY_LOOP}
    return {**loop, **STUDY["train"], "seed": int(wildcards.seed)}


STUDY_PREPARED = "results/dataset/study/prepared_brats" if WORKLOAD == "brats" else "results/dataset/study/prepared"


def study_raw_input():
    """The configured folder, for sources read from disk (the synthetic ones are derived inside the job)."""
    return [] if config["dataset"]["source"] in SYNTHETIC else [config["dataset"]["root"]]


rule study_dataset:
    input:
        raw=study_raw_input(),
    output:
        prepared=directory(STUDY_PREPARED),
    log:
        f"results/dataset/logs/study{'_brats' if WORKLOAD == 'brats' else ''}.log",
    conda:
        "../../envs/workload.yaml"
    params:
        source=preparation_params(),
        root=config["dataset"]["root"],
        cases=STUDY["dataset"]["cases"],
        heldout=STUDY["dataset"]["heldout"],
        shape=STUDY["dataset"]["shape"],
        seed=config["dataset"]["seed"],
    message:
        f"Preparing the quality study's dataset at {'x'.join(map(str, STUDY['dataset']['shape']))}"
    script:
        "../scripts/study_dataset.py"


rule study_run:
    input:
        dataset=STUDY_PREPARED,
    output:
        summary="results/{gpu}/study/{variant}/seed{seed}/run.json",
        losses="results/{gpu}/study/{variant}/seed{seed}/losses.csv",
        slice="results/{gpu}/study/{variant}/seed{seed}/slice.npy",
        volumes=study_volumes(),
    wildcard_constraints:
        gpu="|".join(study_labels()),
        variant="|".join(STUDY["variants"]),
        seed=r"\d+",
    log:
        "results/{gpu}/study/{variant}/seed{seed}/logs/run.log",
    benchmark:
        "results/{gpu}/study/{variant}/seed{seed}/logs/run.benchmark.tsv"
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        device=device_params,
        variant=variant_params,
        model=study_model(),
        diffusion={"timesteps": STUDY["timesteps"]},
        train=study_train,
        study={key: STUDY[key] for key in ("steps", "masks", "noise_seed", "ssim_kernel")},
    message:
        "Quality study: training {wildcards.variant} (seed {wildcards.seed}) on {wildcards.gpu}"
    script:
        "../scripts/study_run.py"


# One job per label compares every run with the baseline's first seed: comparing is a few seconds of SSIM and loss
# curves, while each job of its own paid seconds of start-up (torch, torchmetrics) and, on a cluster, a submission.
# A variant added later trains alone (study_run); the comparisons are all written again, the same bytes for the runs
# that were there.
rule study_compare:
    input:
        runs=lambda wildcards: study_run_files(wildcards.gpu, "run.json"),
        losses=lambda wildcards: study_run_files(wildcards.gpu, "losses.csv"),
        samples=lambda wildcards: [volume for variant, seed in study_runs()
                                   for volume in study_volumes(wildcards.gpu, variant, seed)],
    output:
        comparisons=[f"results/{{gpu}}/study/{variant}/seed{seed}/comparison.json" for variant, seed in study_runs()],
    wildcard_constraints:
        gpu="|".join(study_labels()),
    log:
        "results/{gpu}/study/logs/compare.log",
    conda:
        "../../envs/workload.yaml"
    params:
        runs=[[variant, seed] for variant, seed in study_runs()],
        reference_seed=STUDY["seeds"][0],
        ssim_kernel=STUDY["ssim_kernel"],
    message:
        "Quality study on {wildcards.gpu}: every run against the baseline's samples and loss curve"
    script:
        "../scripts/study_compare.py"


rule study_summary:
    input:
        files=lambda wildcards: [path for path in study_result_files() if path.startswith(f"results/{wildcards.gpu}/")],
        claims="data/paper_claims.yaml",
        code=reporting_code(),
    output:
        "results/{gpu}/study/summary.md",
    wildcard_constraints:
        gpu="|".join(study_labels()),
    log:
        "results/{gpu}/study/logs/summary.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    message:
        "Quality study on {wildcards.gpu}: summary and verdict"
    script:
        "../scripts/study_summary.py"


# `snakemake --configfile config/paper.yaml -- quality_study`: the study alone (no timing runs, profiles or figures).
rule quality_study:
    input:
        expand("results/{gpu}/study/summary.md", gpu=study_labels()),
    log:
        "results/logs/quality_study.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    message:
        "The quality study's summaries"
    shell:
        "cat {input} | tee {log}"
