"""What the shipped configurations plan (dry runs in a clean copy, nothing measured): the paper's matrix, BraTS and
the profiles target."""

import re

import pytest

from conftest import dry_run, planned_jobs

pytestmark = pytest.mark.workflow


def test_paper_configuration_plans_the_full_matrix(workflow_copy):
    jobs, text = dry_run(workflow_copy, "paper/figures/all", "--configfile", "config/paper.yaml")
    assert jobs["train"] == jobs["sample"] == jobs["quality"] == 5  # five variants on the h200 label
    # The quality study: six variants, each one job training its five seeds; one dataset, one job comparing the runs.
    assert jobs["study_run"] == 6 and jobs["study_compare"] == jobs["study_dataset"] == 1
    assert jobs["profile_torch"] == 10  # two phases each; ncu/nsys join where they are installed
    assert jobs["manifest"] == 1
    # Each job's line reads as words: no Python list or dict of a setting, no empty list at its end.
    lines = re.findall(r"^Job \d+: (.*)$", text, re.M)
    assert len(lines) == sum(jobs.values()) - jobs["manifest"]  # the manifest has no message
    assert not [line for line in lines if re.search(r"[{}\[\]]|\s$", line)], lines
    assert ("Timing the fast samplers deis_ipndm, ddim and dpm_solver_pp_2m at 10, 25 and 50 steps; "
            "deis_ipndm_as_shipped at 10 steps against the 250-step chain with tf32 on h200") in lines
    assert "Paired rounds of train and sample steps on h200, group 1 of 1, until each speed-up's interval decides" \
        in lines and "Collecting the results of h200" in lines


def test_brats_configuration_plans_the_same_study_apart_from_the_whole_head_one(workflow_copy):
    args = ("paper/figures/all", "--configfile", "config/paper.yaml", "config/brats.yaml")
    jobs, text = dry_run(workflow_copy, *args)
    assert jobs["train"] == jobs["sample"] == jobs["quality"] == 5 and jobs["profile_torch"] == 10
    assert jobs["synthetic_brats_dataset"] == jobs["prepare_dataset"] == 1 and "synthetic_dataset" not in jobs
    # The workload is its own axis: the same hardware label, BraTS paths, nothing of the whole-head tree.
    assert "results/brats/h200/tf32_channels_last/train.json" in text and "results/wholehead/" not in text
    assert "results/brats/dataset/prepared" in text and "h200_brats" not in text and "prepared_brats" not in text
    # config/brats.yaml sets every value config/paper.yaml changes: with or without it, the same study.
    assert planned_jobs(workflow_copy, "paper/figures/all", "--configfile", "config/brats.yaml") == jobs


def test_brats_plans_on_a_cluster_with_the_gpu_types_profile_and_no_config_override(workflow_copy):
    """The SLURM profile of a GPU type names the label (its `config: gpus=[h200]`); the workload comes from
    config/brats.yaml alone, so the GPU type's profile plans the BraTS study as it plans the whole-head one."""
    profiles = ("--profile", "profiles/slurm", "--profile", "profiles/slurm-h200")
    jobs, text = dry_run(workflow_copy, *profiles, "--configfile", "config/paper.yaml", "config/brats.yaml", "--",
                         "paper/figures/all")
    assert jobs["train"] == 5 and "results/brats/h200/baseline/train.json" in text, text[-2000:]
    jobs, text = dry_run(workflow_copy, *profiles, "--configfile", "config/paper.yaml", "--", "paper/figures/all")
    assert jobs["train"] == 5 and "results/wholehead/h200/baseline/train.json" in text, text[-2000:]


def test_profiles_target_profiles_every_variant_and_phase_without_training(workflow_copy):
    jobs = planned_jobs(workflow_copy, "profiles", "--configfile", "config/paper.yaml")
    assert jobs["profile_torch"] == jobs["extract_profile"] == 10  # five variants, two phases
    assert "train" not in jobs and "manifest" not in jobs


def test_a_job_line_lists_settings_in_words():
    from reporting.terminal import sampler_words

    assert sampler_words({"ddim": [1], "deis_ipndm": [10, 25], "dpm_solver_pp_2m": [10, 25]}) == (
        "ddim at 1 step; deis_ipndm and dpm_solver_pp_2m at 10 and 25 steps")
