# The preflight of each hardware label's timed campaign (profiling.preflight): conv3d at the study's shapes against
# float64 in every precision, layout and autotuner setting a variant can use, cuDNN running it on a GPU, the stack's
# versions. Every timed rule takes its record as an input, so a failing preflight stops the campaign before anything
# is timed; a timed job refuses a record of another stack than its own, or one whose check of its variant's
# combination failed (measurement.conv_checks). Not ancient(): Snakemake 9.27 then skips the jobs downstream of a
# preflight that runs again, even where they have reasons of their own to run.


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
