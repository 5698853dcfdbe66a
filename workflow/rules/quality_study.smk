# The quality study (medddpm.study): every variant of `quality_study.variants` trains its own model from every seed of
# `quality_study.seeds` on the same data and budget, samples the first held-out masks from the same noise, and is
# compared with the held-out real images and with the baseline's run of the same seed (the verdict pairs them). Target
# `quality_study` prints each label's summary and verdict; paper/figures/all collects the study too (fig09, tab05,
# tab06). Sizes: config.yaml (a CPU miniature), config/paper.yaml (the H200 study and its budget). The runs and their
# files: planning.plan.Plan; the settings a run takes: common.smk.


rule study_dataset:
    """The quality study's own dataset, at its size."""
    input:
        raw=study_raw_input(),
    output:
        prepared=directory(STUDY_PREPARED),
    log:
        layout.dataset_log("study", WORKLOAD),
    conda:
        "../../envs/workload.yaml"
    params:
        source=PREPARATION,
        root=config["dataset"]["root"],
        cases=STUDY["dataset"]["cases"],
        heldout=STUDY["dataset"]["heldout"],
        shape=STUDY["dataset"]["shape"],
        seed=config["dataset"]["seed"],
    message:
        f"Preparing the quality study's dataset at {'x'.join(map(str, STUDY['dataset']['shape']))}"
    script:
        "../scripts/study_dataset.py"


# One job per (label, variant) trains every seed of the variant together (medddpm.ensemble: on CUDA each run's step
# is replayed from a CUDA graph on its own stream), so that the study's thousands of small kernels reach the GPU as
# a few launches and one compilation serves every seed.
rule study_run:
    input:
        dataset=STUDY_PREPARED,
        preflight=PREFLIGHT,
    output:
        summary=PLAN.study_variant_files("run.json"),
        losses=PLAN.study_variant_files("losses.csv"),
        slice=PLAN.study_variant_files("slice.npy"),
        volumes=[volume for seed in STUDY["seeds"] for volume in PLAN.study_volumes(seed=seed)],
    log:
        layout.study_label_file("logs/{variant}.log"),
    benchmark:
        layout.study_label_file("logs/{variant}.benchmark.tsv")
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
        train=study_train(),
        seeds=STUDY["seeds"],
        rerun=study_rerun,
        samplers=study_samplers,
        study={
            key: STUDY[key]
            for key in ("steps", "masks", "noise_seed", "ssim_kernel", "sample_batch", "deterministic", "graphs")
        },
    message:
        "Quality study: training {wildcards.variant} from seeds "
        + ", ".join(map(str, STUDY["seeds"]))
        + " on {wildcards.gpu}"
    script:
        "../scripts/study_run.py"


# One job per label compares every run with the baseline's run of the same seed (study.reference_of): comparing is a
# few seconds of SSIM and loss curves, while each job of its own paid seconds of start-up (torch, torchmetrics) and,
# on a cluster, a submission.
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
        first_seed=STUDY["seeds"][0],
        ssim_kernel=STUDY["ssim_kernel"],
    message:
        "Quality study on {wildcards.gpu}: every run against the baseline's run of its seed"
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
    """The quality study alone: every variant from every seed, and its summaries (fig09, tab06)."""
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
