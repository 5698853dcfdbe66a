# Med-DDPM GPU performance study as a workflow: every table and figure is rebuilt from the user's own measurements.
# Embedded default: `snakemake --cores 1 paper/figures/all`; the full study: add `--configfile config/paper.yaml --`.

import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

# The workflow's packages (workflow/scripts) serve the Snakefile and the DAG's input functions too.
sys.path.insert(0, str(Path(workflow.basedir) / "workflow" / "scripts"))
from planning.configcheck import ConfigError, check_start  # noqa: E402

# Snakemake must run in this folder (-s ../Snakefile from a subfolder would look for config.yaml there).
try:
    check_start(workflow.basedir)
except ConfigError as _error:
    raise WorkflowError(str(_error)) from None


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/checks.smk"
include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/preflight.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/sample.smk"
include: "workflow/rules/compare.smk"
include: "workflow/rules/quality.smk"
include: "workflow/rules/quality_study.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/metrics.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/export.smk"
include: "workflow/rules/summary.smk"
include: "workflow/rules/reproduce_time.smk"


rule all:
    """The default target: paper/figures/all, every figure and table and the article."""
    default_target: True
    input:
        "paper/figures/all",
    localrule: True
