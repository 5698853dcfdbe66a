"""The training jobs of a plan as Snakemake builds them (a dry run through its API): each job's `gpu` resource, and
the sbatch request the SLURM executor plugin would submit it with (its own functions, nothing submitted).

A dry run on the command line prints each job's `message:`, not its resources; the DAG's jobs hold them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from watched import run_watched

SCRIPT = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings,
                                      WorkflowSettings)
from snakemake_executor_plugin_slurm.submit_string import get_submit_command
from snakemake_executor_plugin_slurm.utils import set_gres_string

set_resources, configfiles, targets = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
with SnakemakeApi(OutputSettings(dryrun=True)) as api:
    workflow_api = api.workflow(ResourceSettings(overwrite_resources=set_resources),
                                ConfigSettings(configfiles=[Path(p) for p in configfiles]), StorageSettings(),
                                WorkflowSettings(), snakefile=Path("Snakefile"), workdir=Path("."))
    workflow_api.dag(DAGSettings(targets=set(targets))).execute_workflow(executor="dryrun")
    params = {"run_uuid": "job", "slurm_logfile": "job.log", "comment_str": "job", "account": "", "partition": "",
              "workdir": None}
    jobs = {job.wildcards_dict["variant"]: {"gpu": job.resources.get("gpu"),
                                             "sbatch": get_submit_command(job, params) + set_gres_string(job)}
            for job in workflow_api._workflow.dag.jobs if job.rule.name == "train"}
print("TRAIN_JOBS " + json.dumps(jobs))
"""


def planned_train_jobs(workdir: Path, configfiles: list[str], targets: list[str],
                       set_resources: dict | None = None) -> dict[str, dict]:
    """{variant: {"gpu": the job's gpu resource, "sbatch": the plugin's sbatch line}} of the training jobs that a dry
    run of `targets` plans in `workdir` (`set_resources`: a profile's, as --profile gives them)."""
    done = run_watched([sys.executable, "-c", SCRIPT, json.dumps(set_resources or {}), json.dumps(configfiles),
                        json.dumps(targets)], workdir, snakemake_api=True)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("TRAIN_JOBS "))
    return json.loads(line.removeprefix("TRAIN_JOBS "))
