# How long the finished study took per part, and would take on N GPUs of one node (reporting.reproduce_time): from
# Snakemake's record of the jobs that made paper/figures/all in this folder. A target of its own, after the study:
#   snakemake --cores 8 --configfile config/paper.yaml -- paper/time_to_reproduce.md


rule time_to_reproduce:
    """GPU minutes per part of the finished study and its wall time on 1, 2, 4 and 8 GPUs of one node."""
    input:
        "paper/figures/all",
    output:
        table="paper/time_to_reproduce.md",
        jobs="paper/time_to_reproduce.csv",
    log:
        "paper/logs/time_to_reproduce.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        # Every rule that asks for the gpu resource (this file is included last: all rules are defined).
        gpu_rules=sorted(_rule.name for _rule in workflow.rules if "gpu" in _rule.resources),
        node_gpus=[1, 2, 4, 8],
        title=f"Time to reproduce the {WORKLOAD} study on {', '.join(config['gpus'])}",
    message:
        "Time to reproduce the study: GPU minutes per part and the wall time on 1-8 GPUs"
    script:
        "../scripts/time_to_reproduce.py"
