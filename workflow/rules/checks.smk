# What the workflow checks and says while it parses, before any job runs or is submitted: the configuration (one
# line per problem), its variants, the targets typed on the command line, the Nsight Compute settings, and the
# cluster's requests and the GPU labels without an Nsight Compute profile. And the plan of the checked configuration
# (planning.plan.Plan), which every rule file reads.
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version, validate

from medddpm.switches import Variant
from planning.cluster import cluster_requests
from planning.configcheck import ConfigError, check_config
from planning.ncu import ncu_settings
from planning.plan import Plan, nsight_warning
from planning.results_lock import ResultsInUse, hold
from planning.targets import target_problem
from reporting.registry import OUTPUTS

min_version("9.0")


# One line per problem, naming the key and the file that set it (planning.configcheck; the schema's own messages
# dump the schema). Snakemake's validate() then runs as in every catalog workflow; it finds nothing left.
try:
    check_config(
        config,
        workflow.basedir,
        [Path(workflow.basedir) / "config.yaml", *workflow.overwrite_configfiles],
        dict(workflow.config_settings.config),
    )
except ConfigError as _error:
    raise WorkflowError(str(_error)) from None
validate(config, schema="../schemas/config.schema.yaml")


# Every variant is checked once, when the DAG is built: a bad switch is one line naming the variant.
for _name, _switches in config["variants"].items():
    try:
        Variant.from_config(_name, _switches)
    except (TypeError, ValueError) as _error:
        raise WorkflowError(f"config: {_error}") from None


# What this configuration measures and reads (planning.plan.Plan; every path from planning.layout).
PLAN = Plan(config, Path(workflow.basedir))
WORKLOAD = PLAN.workload
STUDY = PLAN.study


# A result path typed on the command line that this configuration cannot build: one line naming the setting to change,
# before Snakemake's bare "No rule to produce ...". (Snakemake parses this file before it knows its targets, so the
# command line is read as typed: every argument under results/, targets and --forcerun files alike.)
for _argument in sys.argv[1:]:
    _problem = target_problem(
        _argument,
        config,
        [Path(workflow.basedir) / "config.yaml", *workflow.overwrite_configfiles],
    )
    if _problem:
        raise WorkflowError(_problem)


# The Nsight Compute settings of every label that runs it, resolved when the DAG is built: a missing or broken
# metric-set file is then one line, not the traceback of the input function that needs it.
for _label in config["gpus"]:
    if "ncu" in PLAN.tools[_label]:
        for _phase in config["profiling"]["phases"]:
            try:
                ncu_settings(config, workflow.basedir, _label, _phase)
            except ConfigError as _error:
                raise WorkflowError(str(_error)) from None


# Before anything runs or is submitted (not again in the jobs a cluster runs): the sbatch request of every GPU rule of
# a cluster profile, which a dry run shows too, and loudly, every GPU label that no Nsight Compute job profiles
# (`profilers: auto` is decided on the machine that plans the run, a login node without ncu on a cluster).
if not workflow.remote_exec:
    _requests = cluster_requests(workflow.resource_settings.overwrite_resources, {"train": PLAN.training_gpus()})
    if _requests:
        print(
            "Cluster requests of the GPU rules (every job of the rule, from the profiles' set-resources):",
            *_requests,
            sep="\n",
            file=sys.stderr,
        )
    else:
        # A local run (no cluster settings in the profiles): a data-parallel training job that asks for more GPUs
        # than --resources gpu allows is one line now, not Snakemake's refusal (about pipes) when the job is due.
        _gpus = workflow.global_resources.get("gpu")
        _problem = PLAN.local_gpu_problem(getattr(_gpus, "value", _gpus))
        if _problem:
            raise WorkflowError(_problem)
    _warning = nsight_warning(PLAN, OUTPUTS)
    if _warning:
        print(_warning, file=sys.stderr)


# One run at a time on one results folder, from this checkout or another whose `results` is this one's (Snakemake's
# own lock lives in each checkout's .snakemake/ and cannot see the other): taken when the first job is about to
# start, held until this process ends (planning.results_lock; the list keeps the open lock file referenced). Dry runs
# and the jobs a cluster runs never get here.
RESULTS_LOCK = []


onstart:
    try:
        RESULTS_LOCK.append(hold(workflow.basedir, shlex.join(["snakemake", *sys.argv[1:]])))
    except ResultsInUse as _error:
        raise WorkflowError(str(_error)) from None
