FIGURES = {
    "fig08_end_to_end": "fig08_end_to_end.rst",
    "fig09_quality": "fig09_quality.rst",
}
TABLES = {
    "tab02_workload": "tab02_workload.rst",
    "tab06_quality": "tab06_quality.rst",
}


def figure_outputs(name):
    caption = f"../report/{FIGURES[name]}"
    return {
        "pdf": report(f"paper/figures/{name}.pdf", caption=caption, category="Figures"),
        "png": report(f"paper/figures/{name}.png", caption=caption, category="Figures"),
    }


def table_outputs(name):
    caption = f"../report/{TABLES[name]}"
    return {
        "csv": report(f"paper/tables/{name}.csv", caption=caption, category="Tables"),
        "tex": f"paper/tables/{name}.tex",
        "md": f"paper/tables/{name}.md",
    }


rule fig08_end_to_end:
    input:
        train=measured("results/{gpu}/{variant}/train.json"),
        sample=measured("results/{gpu}/{variant}/sample.json"),
    output:
        **figure_outputs("fig08_end_to_end"),
    params:
        gpus=config["gpus"],
    log:
        "paper/logs/fig08_end_to_end.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/fig08_end_to_end.py"


rule fig09_quality:
    input:
        dataset=PREPARED,
        steps=measured("results/{gpu}/{variant}/train_steps.csv"),
        quality=measured("results/{gpu}/{variant}/quality.json"),
        first_samples=measured("results/{gpu}/{variant}/samples/sample_000.nii.gz"),
    output:
        **figure_outputs("fig09_quality"),
    params:
        gpus=config["gpus"],
    log:
        "paper/logs/fig09_quality.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/fig09_quality.py"


rule tab02_workload:
    input:
        dataset=PREPARED,
    output:
        **table_outputs("tab02_workload"),
    params:
        settings=job_settings("model", "diffusion", "train", "dataset"),
    log:
        "paper/logs/tab02_workload.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/tab02_workload.py"


rule tab06_quality:
    input:
        quality=measured("results/{gpu}/{variant}/quality.json"),
    output:
        **table_outputs("tab06_quality"),
    log:
        "paper/logs/tab06_quality.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/tab06_quality.py"


rule manifest:
    input:
        [rules.fig08_end_to_end.output.pdf, rules.fig08_end_to_end.output.png],
        [rules.fig09_quality.output.pdf, rules.fig09_quality.output.png],
        list(rules.tab02_workload.output),
        list(rules.tab06_quality.output),
    output:
        "paper/figures/all",
    log:
        "paper/logs/manifest.log",
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/manifest.py"
