# One profiled step per (hardware label, variant, phase) and tool. Which tools run is decided per label in the
# config (`hardware.<label>.profilers`, `auto` = torch.profiler everywhere, ncu/nsys where installed). One rule per
# tool (profile_torch, profile_ncu, profile_nsys: the SLURM profiles set their resources by name), the same job with
# the tool's own outputs and settings.
PROFILERS = {
    "torch": {
        "name": "torch.profiler",
        "outputs": {"trace": "torch_trace.json"},
        "settings": {},
    },
    "ncu": {
        "name": "Nsight Compute",
        "outputs": {"report": "ncu.ncu-rep", "raw": "ncu_raw.csv", "details": "ncu_details.csv"},
        # resolved per label and phase: a changed metric set re-profiles
        "settings": {"settings": profile_ncu_settings},
    },
    "nsys": {
        "name": "Nsight Systems",
        "outputs": {"report": "nsys.nsys-rep", "kern_sum": "nsys_kern_sum.csv"},
        "settings": {"settings": config["profiling"]["nsys"]},
    },
}


for _tool, _profiler in PROFILERS.items():

    rule:
        name:
            f"profile_{_tool}"
        input:
            dataset=PREPARED,
            preflight=PREFLIGHT,
        output:
            **{key: layout.profile_file(name) for key, name in _profiler["outputs"].items()},
            # The machine's conditions around the profiled step (torch.profiler: profiling.target) or the tool's run (ncu,
            # nsys: profiling.runner), and its wall time.
            conditions=layout.profile_file(f"{_tool}_conditions.json"),
        log:
            job=layout.run_log(f"profile_{{phase}}_{_tool}.log"),
            tool=layout.run_log(f"profile_{{phase}}_{_tool}.tool.log"),
        benchmark:
            layout.run_log(f"profile_{{phase}}_{_tool}.benchmark.tsv")
        conda:
            "../../envs/workload.yaml"
        resources:
            gpu=gpus_needed,
        params:
            **_profiler["settings"],
            tool=_tool,
            device=device_params,
            variant=variant_params,
            model=config["model"],
            diffusion=config["diffusion"],
            train=profiled_train_params,
            warmup_steps=config["profiling"]["warmup_steps"],
        message:
            f"{_profiler['name']}: one {{wildcards.phase}} step of {{wildcards.variant}} on {{wildcards.gpu}}"
        script:
            "../scripts/profile_tool.py"
