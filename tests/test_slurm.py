"""The workflow on SLURM: the base profile with its per-GPU overlays, a single-host cluster with fake GPUs, the
sbatch flags.

`test_profiles_*` read the profiles and the workflow's own rules (a dry run, seconds, no cluster).
`test_workflow_through_slurm_*` (marker `slurm`: root, apt, a few minutes) installs and starts a one-node
SLURM with fake GPUs (tests/slurm/), runs a job of each kind (TARGETS) through `--profile profiles/slurm
--profile profiles/slurm-h200` in a temporary copy, and reads back from SLURM itself that every GPU job asked for
`--gpus=h200:1 -C h200` and no CPU job got a GPU. Run it with `pytest -m slurm tests/test_slurm.py`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, copy_workflow
from watched import Stopped, run_watched

SLURM_SCRIPTS = REPO / "tests" / "slurm"
LABELS = ("v100", "a100", "h100", "h200")
# One job of each kind, for the baseline of tests/tiny.yaml: CPU rules (the dataset and its preparation), a GPU rule
# with the profiles' plain GPU block (training) and one with a block merged from it (the device ceilings); collecting,
# rendering and the manifest are local rules and stay off the cluster. What is tested is where each job runs and what
# it asked for: every other GPU rule (sampling, quality, the quality study's runs, the profiles) takes one of the same
# two blocks, which test_profiles_* checks rule by rule, and each level of the DAG costs the cluster run seconds.
TARGETS = ["results/wholehead/h200/baseline/train.json", "results/wholehead/h200/device_rates.json"]
CONFIGFILES = ("tests/tiny.yaml",)  # the smallest whole DAG; the cluster run tests submission, not compute
CLUSTER_LABEL = "h200"
# No wall-clock limit (tests/watched.py): a wait ends when it is stuck; install + start + run + stop take under 10
# minutes on a quiet 2-core machine. Snakemake runs through
# tests/slurm/snakemake_prompt_status.py: the plugin's own status checks come 2 s, then 12 s, 22 s, ... (+10 s each
# time nothing finished) after the last change, which cost each of the DAG's 5 submitted levels 14-36 s of waiting.
PROMPT_STATUS = SLURM_SCRIPTS / "snakemake_prompt_status.py"
FAKE_GPUS_PER_TYPE = 2  # like a 2-core workstation running two jobs at once


def load_profile(name: str) -> dict:
    return yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())


def gpu_profile(label: str) -> dict:
    """What Snakemake makes of `--profile profiles/slurm --profile profiles/slurm-<label>`: the later profile's keys
    replace the earlier one's, each as a whole (set-resources and config too)."""
    return load_profile("slurm") | load_profile(f"slurm-{label}")


def clean_env() -> dict:
    """The caller's environment minus what would change how Snakemake or the plugin behave."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SNAKEMAKE_PROFILE"))}


def run_bounded(cmd: list[str], cwd: Path, log: Path | None = None) -> subprocess.CompletedProcess:
    """Run cmd, both streams into log; stopped (interrupted first: Snakemake then cancels its SLURM jobs) only when
    stuck or runaway (watched.py). The SLURM jobs are not its children: the files they write under cwd are its
    progress."""
    try:
        return run_watched(cmd, cwd, env=clean_env(), merge_output=True, interrupt_first=True, log=log)
    except Stopped as stopped:
        pytest.fail(f"{stopped}" + (f"; log: {log}" if log else ""))


def script(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_watched(["bash", str(SLURM_SCRIPTS / name), *args], SLURM_SCRIPTS, env={**os.environ, **(env or {})})


# ------------------------------------------------------------------------------------------------------------
# Which rules need a GPU: the workflow says so itself, with `resources: gpu=...` (gpus_needed) in the rule.
# ------------------------------------------------------------------------------------------------------------
# The rules as Snakemake builds them from the Snakefile (loops make some: the profilers', the synthetic sources', the
# registered outputs'), each with whether it declares a `gpu` resource; in a process of its own, since parsing the
# workflow sets what a run sets (sys.path, environment variables).
RULES_SCRIPT = """
import json
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings, WorkflowSettings
with SnakemakeApi(OutputSettings()) as api:
    workflow = api.workflow(ResourceSettings(), ConfigSettings(), StorageSettings(), WorkflowSettings(),
                            snakefile=Path("Snakefile"), workdir=Path("."))._workflow
    print(json.dumps({rule.name: "gpu" in rule.resources for rule in workflow.rules}))
"""


def declared_rules() -> tuple[set[str], set[str]]:
    """(GPU rules, CPU rules) of the workflow; GPU = a `gpu=` resource."""
    done = run_watched([sys.executable, "-c", RULES_SCRIPT], REPO, snakemake_api=True)
    assert done.returncode == 0, done.stderr[-2000:]
    needs_gpu = json.loads(done.stdout.strip().splitlines()[-1])
    return {rule for rule, gpu in needs_gpu.items() if gpu}, {rule for rule, gpu in needs_gpu.items() if not gpu}


def declared_localrules() -> set[str]:
    """Rules marked `localrule: True`, and the outputs of the reporting registry (report.smk generates one local rule
    for each): they run in the main Snakemake process, never through sbatch."""
    from reporting.registry import OUTPUTS

    names = {output.id for output in OUTPUTS}
    for path in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]:
        blocks = re.split(r"^rule (\w+):\n", path.read_text(), flags=re.MULTILINE)
        names |= {name for name, body in zip(blocks[1::2], blocks[2::2])
                  if re.search(r"^\s+localrule: True", body.split("\nrule ")[0], flags=re.MULTILINE)}
    return names


def dag_rules(text: str) -> set[str]:
    """Rule names in the `Job stats` table of a (dry) run."""
    table = re.search(r"^job\s+count\n-+\s+-+\n((?:.*\n)*?)total\s", text, flags=re.MULTILINE)
    assert table, "no Job stats table in the output"
    return {line.split()[0] for line in table.group(1).splitlines() if line.strip()}


@pytest.fixture(scope="module")
def rules_by_gpu_need() -> tuple[set[str], set[str]]:
    if not (REPO / "Snakefile").exists():
        pytest.skip("no Snakefile in the repository yet")
    gpu, cpu = declared_rules()
    assert {"train", "sample", "quality"} <= gpu, f"GPU rules found: {sorted(gpu)}"
    return gpu, cpu


@pytest.mark.parametrize("label", LABELS)
def test_profiles_give_every_gpu_rule_one_gpu_of_their_label(label, rules_by_gpu_need):
    gpu_rules, cpu_rules = rules_by_gpu_need
    profile = gpu_profile(label)
    assert profile["executor"] == "slurm"
    # The profilers are declared with the label, not decided by `auto` on the machine that plans the run.
    assert profile["config"] == [f"gpus=[{label}]", f"hardware={{{label}: {{profilers: [torch, ncu]}}}}"]
    assert profile.get("retries") == 0
    assert profile["set-resource-scopes"] == {"gpu": "local"}, "else profiles/default's gpu: 1 serialises GPU jobs"
    assert not {"gpu", "gpu_model", "gres", "constraint"} & set(profile["default-resources"]), "CPU rules get a GPU"
    sets = profile["set-resources"]
    for rule in sorted(gpu_rules):
        assert rule in sets, f"profiles/slurm-{label}: GPU rule {rule!r} has no set-resources entry"
        res = sets[rule]
        # Training takes its count from the workflow (1, or a data-parallel variant's processes): test_data_parallel.
        gpus = res.get("gpu") if rule != "train" else ("from the workflow" if "gpu" not in res else res["gpu"])
        expected = 1 if rule != "train" else "from the workflow"
        assert (gpus, res["gpu_model"], res["constraint"], res["nodes"]) == (expected, label, label, 1), (rule, res)
        assert 0 < res["runtime"] <= 24 * 60 and res["mem_mb"] >= 16000 and res["cpus_per_gpu"] >= 1, (rule, res)
    for rule in sorted(cpu_rules):
        assert not {"gpu", "gpu_model", "gres"} & set(sets.get(rule, {})), f"CPU rule {rule!r} asks for a GPU"


def slurm_dry_run(workdir: Path, overlay: str = "slurm-h200") -> subprocess.CompletedProcess:
    """A dry run of the paper's profiles through the SLURM profiles: what a user sees before submitting, both
    streams in the order printed (stdout)."""
    return run_watched([sys.executable, "-m", "snakemake", "-n", "--profile", "profiles/slurm", "--profile",
                        f"profiles/{overlay}", "--configfile", "config/paper.yaml", "--", "profiles"],
                       workdir, env=clean_env(), merge_output=True)


def test_a_plan_made_without_ncu_keeps_the_nsight_jobs_and_shows_the_gpu_requests(tmp_path, monkeypatch):
    """Planned on a machine without ncu (a login node; here PATH holds none): the overlay's declared profilers keep
    every Nsight Compute job in the plan, and the dry run lists each GPU rule's sbatch request before the plan."""
    from profiling.ncu import locate_ncu

    if locate_ncu():
        pytest.skip("ncu is installed here: not a machine without it")
    workdir = copy_workflow(tmp_path / "wf")
    done = slurm_dry_run(workdir)
    assert done.returncode == 0, done.stdout[-2000:]
    output = done.stdout
    assert {"profile_ncu", "extract_ncu_rules"} <= dag_rules(output)
    assert "WARNING: this plan makes no Nsight Compute profile" not in output
    requests = output[output.index("Cluster requests of the GPU rules"):output.index("Building DAG of jobs")]
    for rule in ("train", "sample", "quality", "profile_ncu", "profile_torch"):
        assert re.search(rf"^  {rule}: --gpus=h200:1 -C h200 --cpus-per-gpu 8 --mem \d+M -t \d+ --nodes 1$", requests,
                         re.MULTILINE), requests


@pytest.mark.parametrize("label", LABELS)
def test_a_data_parallel_rung_asks_slurm_for_its_gpus_on_one_node(label, tmp_path):
    """The rung frontier_ndhwc_ddp2 through a GPU type's profiles: its training job is submitted with two GPUs of
    one node (the plugin's own sbatch line), every other training job with one, and the plan says so before
    submitting."""
    from train_job_requests import planned_train_jobs

    rung = "frontier_ndhwc_ddp2"
    workdir = copy_workflow(tmp_path / "wf")
    (workdir / "ddp.yaml").write_text(f"gpus: [{label}]\nhardware: {{{label}: {{profilers: [torch]}}}}\n"
                                      f"run_variants: [baseline, {rung}]\ntrain: {{gradient_accumulation: 2}}\n")
    jobs = planned_train_jobs(workdir, ["tests/tiny.yaml", "ddp.yaml"],
                              [f"results/wholehead/{label}/{v}/train.json" for v in ("baseline", rung)],
                              gpu_profile(label)["set-resources"])
    for variant, gpus in (("baseline", 1), (rung, 2)):
        flags = jobs[variant]["sbatch"].split()
        assert f"--gpus={label}:{gpus}" in flags and "--nodes=1" in flags, (variant, flags)
        assert not any(flag.startswith(("--ntasks", "--gres")) for flag in flags), flags  # one task starts them
    if label != "h200":
        return
    (workdir / "paper_ddp.yaml").write_text(f"run_variants: [baseline, tf32, {rung}]\n")
    done = run_watched([sys.executable, "-m", "snakemake", "-n", "--profile", "profiles/slurm", "--profile",
                        "profiles/slurm-h200", "--configfile", "config/paper.yaml", "paper_ddp.yaml", "--",
                        f"results/wholehead/h200/{rung}/train.json"], workdir, env=clean_env(), merge_output=True)
    assert done.returncode == 0, done.stdout[-2000:]
    requests = done.stdout[done.stdout.index("Cluster requests of the GPU rules"):]
    assert re.search(r"^  train: --gpus=h200:1 -C h200 .* --nodes 1$", requests, re.MULTILINE), requests
    assert re.search(rf"^  train \({rung}\): --gpus=h200:2 -C h200 --cpus-per-gpu 8 --mem \d+M -t \d+ --nodes 1$",
                     requests, re.MULTILINE), requests


def test_a_plan_that_makes_no_nsight_data_says_so_before_submitting(tmp_path):
    """An overlay that leaves the profilers to `auto` on a machine without ncu: the plan holds no Nsight jobs, and
    says so before anything is submitted, naming the label, why, what lacks data and the fix."""
    from profiling.ncu import locate_ncu

    if locate_ncu():
        pytest.skip("ncu is installed here: auto would find it")
    workdir = copy_workflow(tmp_path / "wf")
    overlay = workdir / "profiles" / "slurm-h200-auto"
    overlay.mkdir()
    profile = load_profile("slurm-h200") | {"config": ["gpus=[h200]"]}
    (overlay / "config.yaml").write_text(yaml.safe_dump(profile))
    done = slurm_dry_run(workdir, "slurm-h200-auto")
    assert done.returncode == 0, done.stdout[-2000:]
    output = done.stdout
    assert "profile_ncu" not in dag_rules(output)
    warning = output[output.index("WARNING: this plan makes no Nsight Compute profile for h200:"):]
    assert output.index("WARNING: this plan") < output.index("Building DAG of jobs")
    assert "h200: profilers: auto found no ncu on this machine, which plans the run" in warning
    assert "fig03, fig04, fig05, fig06, fig10 will have no data for it" in warning
    fix = re.search(r"fix: declare the profilers in a --configfile overlay \(hardware: (\{.*\}); the SLURM", warning)
    (workdir / "declared.yaml").write_text(f"hardware: {fix.group(1)}\n")
    declared = run_watched([sys.executable, "-m", "snakemake", "-n", "--profile", "profiles/slurm", "--profile",
                            "profiles/slurm-h200-auto", "--configfile", "config/paper.yaml", "declared.yaml",
                            "--", "profiles"], workdir, env=clean_env())
    assert declared.returncode == 0, declared.stderr[-2000:]
    assert "profile_ncu" in dag_rules(declared.stdout + declared.stderr)
    assert "WARNING: this plan" not in declared.stdout + declared.stderr


def test_noacct_overlay_only_switches_status_checks():
    assert load_profile("slurm-noacct") == {
        "slurm-status-command": "squeue",
        "slurm-init-seconds-before-status-checks": 2,
    }


# ------------------------------------------------------------------------------------------------------------
# The real thing: a SLURM cluster on this machine.
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A running single-host SLURM with fake GPUs of every label; stopped (by pid) after this file's tests, while the
    other test worker is still busy (its daemons take seconds to stop: at the end of the session nothing overlaps)."""
    if os.geteuid() != 0:
        pytest.skip("the SLURM test cluster needs root (munged, slurmd)")
    installed = script("install.sh")
    if installed.returncode != 0:
        pytest.fail(installed.stderr.strip().splitlines()[-1] if installed.stderr.strip() else "install.sh failed")

    # Declare the node big enough for the largest GPU request of any profile, FAKE_GPUS_PER_TYPE at a time.
    sets = [r for label in LABELS for r in gpu_profile(label)["set-resources"].values()]
    cpus = FAKE_GPUS_PER_TYPE * max(r.get("cpus_per_gpu", 1) for r in sets) + 4
    mem = FAKE_GPUS_PER_TYPE * max(r.get("mem_mb", 0) for r in sets) + 16000
    state = tmp_path_factory.mktemp("slurm-state")
    env = {"FAKE_GPU_TYPES": " ".join(LABELS), "FAKE_GPUS_PER_TYPE": str(FAKE_GPUS_PER_TYPE),
           "FAKE_NODE_MIN_CPUS": str(cpus), "FAKE_NODE_MIN_MEM_MB": str(mem), "START_TIMEOUT_S": "60"}
    started = script("start.sh", str(state), env=env)
    try:
        assert started.returncode == 0, started.stderr.strip() or started.stdout
        yield state
    finally:
        stopped = script("stop.sh", str(state))
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def scontrol_jobs(name: str) -> list[dict[str, str]]:
    """SLURM's own record of every job named `name` (the plugin names all jobs of a run by its run id)."""
    out = subprocess.run(
        ["scontrol", "show", "job", "--oneliner"], check=False, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    jobs = []
    for line in out.stdout.splitlines():
        fields = dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", line))
        if fields.get("JobName") == name:
            jobs.append(fields)
    return jobs


def rule_of_comment(comment: str, rules: set[str]) -> str:
    """The plugin comments each job `rule_<rule>` or `rule_<rule>_wildcards_<values>`."""
    matches = [r for r in rules if comment == f"rule_{r}" or comment.startswith(f"rule_{r}_wildcards_")]
    assert matches, f"job comment {comment!r} names none of the rules {sorted(rules)}"
    return max(matches, key=len)


@pytest.mark.slurm
def test_workflow_through_slurm_gives_gpu_jobs_their_gpu(slurm_cluster, rules_by_gpu_need, tmp_path):
    gpu_rules, cpu_rules = rules_by_gpu_need
    copy = copy_workflow(tmp_path / "wf")
    (copy / "emulate.yaml").write_text("emulate_gpus_on_cpu: true\n")  # not --config: that drops the profile's
    log = tmp_path / "snakemake.log"
    cmd = [sys.executable, str(PROMPT_STATUS),
           "--profile", "profiles/slurm", "--profile", f"profiles/slurm-{CLUSTER_LABEL}",
           "--profile", "profiles/slurm-noacct",
           "--configfile", *CONFIGFILES, "emulate.yaml", "--verbose", "--directory", str(copy), "--", *TARGETS]
    done = run_bounded(cmd, cwd=copy, log=log)
    assert done.returncode == 0, f"snakemake failed (log: {log}):\n{done.stdout[-4000:]}"
    assert all((copy / target).is_file() for target in TARGETS)
    train = json.loads((copy / f"results/wholehead/{CLUSTER_LABEL}/baseline/train.json").read_text())
    assert train["provenance"]["emulated_on_cpu"] is True

    # 1. What the plugin asked for: its `sbatch call:` lines (printed with --verbose), against the profile.
    profile = gpu_profile(CLUSTER_LABEL)
    calls = re.findall(r"^sbatch call: (sbatch .*)$", done.stdout, flags=re.MULTILINE)
    assert calls, f"no sbatch call in the log {log}"
    submitted = {}
    for call in calls:
        rule = re.search(r"--allowed-rules '?(\w+)", call).group(1)
        flags = call.split(" --wrap=", 1)[0] + " "
        submitted.setdefault(rule, []).append(flags)
        if rule in gpu_rules:
            res = profile["set-resources"][rule]
            expected = [f" --gpus={CLUSTER_LABEL}:1 ", f" -C {CLUSTER_LABEL} ", f" -t {res['runtime']} ",
                        f" --mem {res['mem_mb']} ", f" --cpus-per-gpu={res['cpus_per_gpu']} "]
            assert all(flag in flags for flag in expected), (rule, flags)
        else:
            assert rule in cpu_rules, f"{rule} is declared by no rule file"
            res = profile["default-resources"]
            assert f" -t {res['runtime']} " in flags and f" --mem {res['mem_mb']} " in flags, (rule, flags)
            assert "--gpus" not in flags and "--gres" not in flags and " -C " not in flags, (rule, flags)
    in_dag, local = dag_rules(done.stdout), declared_localrules()
    assert gpu_rules & in_dag, f"no GPU rule in the DAG: {sorted(in_dag)}"
    assert not gpu_rules & local, f"GPU rules declared local: {sorted(gpu_rules & local)}"
    assert not local & set(submitted), f"local rules went to SLURM: {sorted(local & set(submitted))}"
    missing = in_dag - local - set(submitted)
    assert not missing, f"rules never submitted to SLURM: {sorted(missing)}"

    # 2. What SLURM recorded (MinJobAge keeps finished jobs): the GPU and the node feature of every job.
    run_id = re.search(r"--job-name (\S+)", calls[0]).group(1)
    jobs = scontrol_jobs(run_id)
    keys = ("JobId", "Comment", "JobState", "TresPerJob", "Features", "TimeLimit", "NumCPUs")
    table = "\n".join("\t".join(job.get(k, "-") for k in keys) for job in jobs)
    (tmp_path / "slurm-jobs.tsv").write_text("\t".join(keys) + "\n" + table + "\n")
    print(f"SLURM's record of run {run_id}:\n{table}")  # shown with pytest -rP
    assert len(jobs) == len(calls), f"{len(calls)} sbatch calls but SLURM knows {len(jobs)} jobs of run {run_id}"
    for job in jobs:
        rule = rule_of_comment(job["Comment"], gpu_rules | cpu_rules)
        assert job["JobState"] == "COMPLETED", (rule, job["JobId"], job["JobState"])
        if rule in gpu_rules:
            assert job.get("TresPerJob") == f"gres:gpu:{CLUSTER_LABEL}:1", (rule, job.get("TresPerJob"))
            assert job.get("Features") == CLUSTER_LABEL, (rule, job.get("Features"))
        else:
            assert job.get("TresPerJob", "(null)") in ("", "(null)"), (rule, job.get("TresPerJob"))
            assert job.get("Features") in ("", "(null)", None), (rule, job.get("Features"))
