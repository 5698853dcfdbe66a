# The preflight of each hardware label's timed campaign (profiling.preflight): conv3d at the study's shapes against
# float64 in every precision and layout the variants use, cuDNN running it on a GPU, the stack's versions. Every timed
# rule takes its record as an input, ancient(): a failing preflight stops the campaign before anything is timed,
# and checking the stack again (--forcerun the record) does not time everything again. A timed job refuses a record
# of another stack than its own.


rule preflight:
    output:
        layout.label_file("preflight.json"),
    log:
        layout.label_log("preflight.log"),
    conda:
        "../../envs/workload.yaml"
    resources:
        gpu=gpus_needed,
    params:
        device=device_params,
        conv=preflight_params,
    message:
        "Preflight of {wildcards.gpu}: conv3d against float64 in every precision the variants use, cuDNN, versions"
    script:
        "../scripts/preflight.py"
