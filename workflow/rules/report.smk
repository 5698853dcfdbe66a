# The study's figures and tables. Every result (measured here or shipped, data/reference/<workload>/<label>/) is read
# once into the collected tables (collect_results); one rule per registered output (reporting.registry) renders it
# from the tables it declares; the manifest lists them all with their sha256 (`paper/figures/all`).
from reporting.registry import ARTICLE_TABLES, BUNDLE, OUTPUTS, registered_files


rule collect_results:
    """Every result measured here and shipped, read into the collected tables the outputs draw."""
    input:
        measured=PLAN.measured_result_files(),
        shipped=SHIPPED,
        references=CONFORMANCE_REFERENCES,
        code=reporting_code(),
    output:
        **{name: layout.collected_table(name, WORKLOAD) for name in ("hardware", *BUNDLE)},
    log:
        layout.collected_log(WORKLOAD),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        gpus=config["gpus"],
        references=PLAN.reference_labels(),
        conformance=PLAN.conformance_labels(),
    message:
        f"Collecting the results of {join_words(config['gpus'])}"
        + (
            f" and the shipped reference sets of {join_words(PLAN.reference_labels())}"
            if PLAN.reference_labels()
            else ""
        )
    script:
        "../scripts/collect_results.py"


for _output in OUTPUTS:

    rule:
        name:
            _output.id
        input:
            **output_inputs(_output),
        output:
            **output_files(_output),
        log:
            f"paper/logs/{_output.id}.log",
        localrule: True
        conda:
            "../../envs/analysis.yaml"
        params:
            output=_output.id,
            settings={section: config[section] for section in _output.config},
        message:
            f"Rendering {_output.id}: {_output.title}"
        script:
            "../scripts/registered_output.py"

    # Its line in `snakemake --list-target-rules`.
    workflow.get_rule(_output.id).docstring = _output.title


# The study's article from every registered output (reporting.article; Typst, from PyPI's typst wheel).
rule article:
    """paper/article.pdf, typeset from every figure and table."""
    input:
        # The collected results the text is written from: step-time quartiles (faster, slower or within noise),
        # kernels, Nsight Compute counters and rule results.
        **{name: layout.collected_table(name, WORKLOAD) for name in ARTICLE_TABLES},
        outputs=registered_files(),
        captions=[output.caption for output in OUTPUTS],
        peaks="data/gpu_peaks.yaml",
        references="workflow/report/references.yaml",
        template="workflow/report/article.typ",
        code=article_code(),
    output:
        pdf=report("paper/article.pdf", caption="../report/article.rst", category="Article"),
    log:
        "paper/logs/article.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        settings=article_settings(),
    message:
        "Typesetting the article from every figure and table"
    script:
        "../scripts/article.py"


rule manifest:
    """paper/figures/all: every figure and table with its sha256 (the main target)."""
    input:
        outputs=registered_files(),
        article=rules.article.output.pdf,
        # Which outputs are timing-bearing is declared in the registry; the manifest marks them.
        code=["workflow/scripts/reporting/registry.py", "workflow/scripts/reporting/manifest.py"],
    output:
        "paper/figures/all",
    log:
        "paper/logs/manifest.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    script:
        "../scripts/manifest.py"
