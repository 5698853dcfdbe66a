# The quality study (medddpm.study): every variant of `quality_study.variants` trains its own model from the same
# seed, data and budget, samples the first held-out masks from the same noise, and is compared with the held-out real
# images and with the baseline; the baseline trains once more per extra seed (the seed-to-seed spread). Target
# `quality_study` prints each label's summary and verdict; paper/figures/all collects the study too (fig09, tab05,
# tab06). Sizes: config.yaml (a CPU miniature), config/paper.yaml (the H200 study and its budget). The runs and their
# files: targets.Plan; the settings a run takes: common.smk.


rule study_dataset:
    input:
        raw=study_raw_input(),
    output:
        prepared=directory(STUDY_PREPARED),
    log:
        layout.dataset_log("study", WORKLOAD),
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
        summary=layout.study_file("run.json"),
        losses=layout.study_file("losses.csv"),
        slice=layout.study_file("slice.npy"),
        volumes=PLAN.study_volumes(),
    log:
        layout.study_file("logs/run.log"),
    benchmark:
        layout.study_file("logs/run.benchmark.tsv")
    wildcard_constraints:
        gpu="|".join(PLAN.study_labels),
        variant="|".join(STUDY["variants"]),
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
        runs=lambda wildcards: PLAN.study_run_files(wildcards.gpu, "run.json"),
        losses=lambda wildcards: PLAN.study_run_files(wildcards.gpu, "losses.csv"),
        samples=lambda wildcards: [
            volume
            for variant, seed in PLAN.study_runs()
            for volume in PLAN.study_volumes(wildcards.gpu, variant, seed, WORKLOAD)
        ],
    output:
        comparisons=[
            layout.study_file("comparison.json", variant=variant, seed=seed) for variant, seed in PLAN.study_runs()
        ],
    log:
        layout.study_label_file("logs/compare.log"),
    wildcard_constraints:
        gpu="|".join(PLAN.study_labels),
    conda:
        "../../envs/workload.yaml"
    params:
        runs=[[variant, seed] for variant, seed in PLAN.study_runs()],
        reference_seed=STUDY["seeds"][0],
        ssim_kernel=STUDY["ssim_kernel"],
    message:
        "Quality study on {wildcards.gpu}: every run against the baseline's samples and loss curve"
    script:
        "../scripts/study_compare.py"


rule study_summary:
    input:
        files=lambda wildcards: PLAN.study_result_files([wildcards.gpu]),
        claims="data/paper_claims.yaml",
        code=reporting_code(),
    output:
        layout.study_label_file("summary.md"),
    log:
        layout.study_label_file("logs/summary.log"),
    wildcard_constraints:
        gpu="|".join(PLAN.study_labels),
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
        [layout.study_label_file("summary.md", WORKLOAD, gpu) for gpu in PLAN.study_labels],
    log:
        layout.workload_log("quality_study.log", WORKLOAD),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    message:
        "The quality study's summaries"
    shell:
        "cat {input} | tee {log}"
