# One profiled step per (hardware label, variant, phase) and tool. Which tools run is decided per label in the
# config (`hardware.<label>.profilers`, `auto` = torch.profiler everywhere, ncu/nsys where installed).


rule profile_torch:
    input:
        dataset=PREPARED,
    output:
        trace="results/{gpu}/{variant}/profile/{phase}/torch_trace.json",
    log:
        job="results/{gpu}/{variant}/logs/profile_{phase}_torch.log",
        tool="results/{gpu}/{variant}/logs/profile_{phase}_torch.tool.log",
    benchmark:
        "results/{gpu}/{variant}/logs/profile_{phase}_torch.benchmark.tsv"
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        tool="torch",
        device=device_params,
        variant=variant_params,
        model=config["model"],
        diffusion=config["diffusion"],
        train=profiled_train_params,
        warmup_steps=config["profiling"]["warmup_steps"],
    message:
        "torch.profiler: one {wildcards.phase} step of {wildcards.variant} on {wildcards.gpu}"
    script:
        "../scripts/profile_run.py"


rule profile_ncu:
    input:
        dataset=PREPARED,
    output:
        report="results/{gpu}/{variant}/profile/{phase}/ncu.ncu-rep",
        raw="results/{gpu}/{variant}/profile/{phase}/ncu_raw.csv",
        details="results/{gpu}/{variant}/profile/{phase}/ncu_details.csv",
    log:
        job="results/{gpu}/{variant}/logs/profile_{phase}_ncu.log",
        tool="results/{gpu}/{variant}/logs/profile_{phase}_ncu.tool.log",
    benchmark:
        "results/{gpu}/{variant}/logs/profile_{phase}_ncu.benchmark.tsv"
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        tool="ncu",
        settings=lambda wildcards: ncu_settings(wildcards.gpu, wildcards.phase),
        device=device_params,
        variant=variant_params,
        model=config["model"],
        diffusion=config["diffusion"],
        train=profiled_train_params,
        warmup_steps=config["profiling"]["warmup_steps"],
    message:
        "Nsight Compute: one {wildcards.phase} step of {wildcards.variant} on {wildcards.gpu}"
    script:
        "../scripts/profile_run.py"


rule profile_nsys:
    input:
        dataset=PREPARED,
    output:
        report="results/{gpu}/{variant}/profile/{phase}/nsys.nsys-rep",
        kern_sum="results/{gpu}/{variant}/profile/{phase}/nsys_kern_sum.csv",
    log:
        job="results/{gpu}/{variant}/logs/profile_{phase}_nsys.log",
        tool="results/{gpu}/{variant}/logs/profile_{phase}_nsys.tool.log",
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        tool="nsys",
        settings=config["profiling"]["nsys"],
        device=device_params,
        variant=variant_params,
        model=config["model"],
        diffusion=config["diffusion"],
        train=profiled_train_params,
        warmup_steps=config["profiling"]["warmup_steps"],
    message:
        "Nsight Systems: one {wildcards.phase} step of {wildcards.variant} on {wildcards.gpu}"
    script:
        "../scripts/profile_run.py"
