# One profiled step per (hardware label, variant, phase) and tool. Which tools run is decided per label in the
# config (`hardware.<label>.profilers`, `auto` = torch.profiler everywhere, ncu/nsys where installed).


rule profile_torch:
    input:
        dataset=PREPARED,
    output:
        trace=layout.profile_file("torch_trace.json"),
    log:
        job=layout.run_log("profile_{phase}_torch.log"),
        tool=layout.run_log("profile_{phase}_torch.tool.log"),
    benchmark:
        layout.run_log("profile_{phase}_torch.benchmark.tsv")
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
        report=layout.profile_file("ncu.ncu-rep"),
        raw=layout.profile_file("ncu_raw.csv"),
        details=layout.profile_file("ncu_details.csv"),
    log:
        job=layout.run_log("profile_{phase}_ncu.log"),
        tool=layout.run_log("profile_{phase}_ncu.tool.log"),
    benchmark:
        layout.run_log("profile_{phase}_ncu.benchmark.tsv")
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        tool="ncu",
        settings=profile_ncu_settings,
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
        report=layout.profile_file("nsys.nsys-rep"),
        kern_sum=layout.profile_file("nsys_kern_sum.csv"),
    log:
        job=layout.run_log("profile_{phase}_nsys.log"),
        tool=layout.run_log("profile_{phase}_nsys.tool.log"),
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
