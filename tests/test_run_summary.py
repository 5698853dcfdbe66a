"""What a run prints: one line per job while it runs (reporting.terminal), the summary at its end
(reporting.run_summary, workflow/rules/summary.smk) on the tables the tiny end-to-end run rendered, on missing and
broken files, and after a failed job."""

import logging
import re

import pandas as pd
import pytest
from snakemake.logging import LogEvent

from conftest import TINY, copy_run, snakemake
from reporting import terminal
from reporting.registry import OUTPUTS
from reporting.run_summary import FailedJob, failed_jobs_from_log, failure_summary, success_summary


def test_summary_names_what_was_built_and_the_headline_numbers_of_the_rendered_tables(finished_run):
    lines = success_summary(finished_run)
    text = "\n".join(lines)
    figures = sum(output.kind == "figure" for output in OUTPUTS)
    assert f"Built {figures} figures (paper/figures/) and {len(OUTPUTS) - figures} tables (paper/tables/)" in text
    assert "Article: paper/article.pdf" in lines and "snakemake --report report.html" in text
    # The fastest variant of each label: the shortest training time in tab04 among those measurably faster than the
    # baseline (tab04's verdict, from the step-time quartiles), its speed-up tab04's; never a direction within noise.
    tab04 = pd.read_csv(finished_run / "paper/tables/tab04_optimization.csv")
    for gpu, rows in tab04.groupby("gpu"):
        faster = rows[rows["train_verdict"] == "faster"]
        if faster.empty:  # on a small CPU run the variants are within noise of the baseline, or slower
            (line,) = [line for line in lines
                       if line.startswith(f"  {gpu} ({rows['origin'].iloc[0]}): none measurably faster than baseline")]
            for word in ("within noise", "slower"):  # each named with its verdict
                named = ", ".join(rows.loc[rows["train_verdict"] == word, "variant"])
                assert (f"; {word}: {named}" in line) == bool(named), line
        else:
            best = faster.loc[faster["train_ms_per_sample"].idxmin()]
            (line,) = [line for line in lines if line.startswith(f"  {gpu} ({best['origin']}): {best['variant']}, "
                                                                 f"{best['train_speedup_vs_baseline']:.2f}x")]
            if best["paired"] == "no":  # separate jobs: said so, and no interval (tab04's bounds are quartiles there)
                assert line.endswith(", separate jobs)") and "[" not in line, line
            else:
                assert f"x [{best['train_speedup_low']:.2f}-{best['train_speedup_high']:.2f}] over baseline" in line
                # the times beside a paired ratio are the jobs' own, not the rounds' (their quotient may differ)
                base = rows.loc[rows["variant"] == "baseline", "train_ms_per_sample"].iloc[0]
                assert line.endswith(f"(own jobs {best['train_ms_per_sample']:.1f} vs {base:.1f} ms/sample)"), line
    # Every claim of tab05 with the verdict of every label (the claim's text may be cut, never the verdicts).
    tab05 = pd.read_csv(finished_run / "paper/tables/tab05_claims.csv")
    for claim, rows in tab05.groupby("claim", sort=False):
        verdicts = "; ".join(f"{row.gpu}: {row.verdict}" for row in rows.itertuples())
        assert any(line.endswith(f": {verdicts}") and claim[:20] in line for line in lines), claim
    tab08 = pd.read_csv(finished_run / "paper/tables/tab08_conformance.csv")
    assert "Conformance with the shipped reference sets (tab08):" in lines
    for gpu in tab08["gpu"].unique():
        assert any(line.startswith(f"  {gpu}: ") for line in lines[lines.index("Conformance with the shipped "
                                                                                 "reference sets (tab08):"):])
    # One screen: the headlines (the samplers' as fast as the fastest take a line per label) and the claims.
    assert len(lines) <= 28 and max(map(len, lines)) <= 118


def test_the_sampler_headline_names_the_settings_as_fast_as_the_fastest(tmp_path):
    """Settings of as many U-Net evaluations whose speed-up intervals overlap the fastest's are listed beside it (on a
    loaded machine which one comes out ahead changes from run to run); one clearly slower, or of more evaluations,
    is not."""
    tables = tmp_path / "paper" / "tables"
    tables.mkdir(parents=True)
    rows = [("ddpm", 10, 10, 1.5, None, None, None), ("deis_ipndm", 2, 2, 0.30, 5.0, 3.1, 8.2),
            ("ddim", 2, 2, 0.26, 5.8, 4.0, 6.3), ("dpm_solver_pp_2m", 2, 2, 0.60, 2.5, 2.4, 2.6),
            ("dpm_solver_pp_2m", 3, 3, 0.35, 4.3, 3.9, 6.0)]
    pd.DataFrame([{"gpu": "cpu", "sampler": name, "steps": steps, "evaluations": evaluations, "timed_variant":
                   "baseline", "timed_shape": "16x16x16", "seconds_per_volume": seconds, "chain_speedup": ratio,
                   "chain_speedup_low": low, "chain_speedup_high": high,
                   "chain_speedup_verdict": None if ratio is None else "faster", "study_variant": None,
                   "outcome": None} for name, steps, evaluations, seconds, ratio, low, high in rows]
                 ).to_csv(tables / "tab09_samplers.csv", index=False)
    lines = success_summary(tmp_path)
    at = lines.index("Fast samplers against the T-step chain (tab09):")
    assert lines[at + 1] == "  cpu (baseline, 16^3): ddim 2 steps 0.26 s/volume, 5.80x [4-6.3] over the 10-step chain"
    assert lines[at + 2] == "    as fast within the intervals: deis_ipndm 2 steps"


def test_summary_of_a_folder_without_outputs_says_what_is_missing_in_one_line_each(tmp_path):
    lines = success_summary(tmp_path)
    assert "paper/figures/all is missing: nothing to summarise of what was built." in lines
    assert "paper/tables/tab04_optimization.csv is missing: no fastest variant to report." in lines
    assert "paper/tables/tab05_claims.csv is missing: no verdicts on the paper's claims to report." in lines
    assert not any("tab08" in line for line in lines)  # without a shipped reference there is no conformance table


def test_summary_of_a_broken_table_says_so_and_goes_on(tmp_path):
    tables = tmp_path / "paper" / "tables"
    tables.mkdir(parents=True)
    (tables / "tab04_optimization.csv").write_text("gpu,variant\ncpu,baseline\n")  # columns of another table
    (tables / "tab05_claims.csv").write_text("claim,gpu,verdict\nIPC +7 %,cpu,contradicted\n")
    lines = success_summary(tmp_path)
    assert any(line.startswith("(could not summarise fastest: KeyError") for line in lines)
    assert "  IPC +7 %: cpu: contradicted" in lines


MAIN_LOG = """\
[Tue Dec  1 17:25:30 2026]
Error in rule tab08_conformance:
    message: None
    jobid: 43
    input: results/collected/hardware.parquet
    output: paper/tables/tab08_conformance.csv, paper/tables/tab08_conformance.md
    log: paper/logs/tab08_conformance.log (check log file(s) for error details)
Logfile paper/logs/tab08_conformance.log:
================================================================================
Traceback (most recent call last):
================================================================================
[Tue Dec  1 17:25:31 2026]
Error in rule train:
    jobid: 7
    output: results/wholehead/cpu/tf32/train.json
    log: results/wholehead/cpu/tf32/logs/train.log (check log file(s) for error details)
    wildcards: gpu=cpu, variant=tf32
Shutting down, this might take some time.
"""


def test_failed_jobs_are_read_from_snakemakes_main_log():
    assert failed_jobs_from_log(MAIN_LOG) == [
        FailedJob("tab08_conformance", {}, ["paper/logs/tab08_conformance.log"]),
        FailedJob("train", {"gpu": "cpu", "variant": "tf32"}, ["results/wholehead/cpu/tf32/logs/train.log"]),
    ]
    lines = failure_summary(failed_jobs_from_log(MAIN_LOG))
    assert "  failed: train (gpu=cpu, variant=tf32); log: results/wholehead/cpu/tf32/logs/train.log" in lines
    assert "  failed: tab08_conformance; log: paper/logs/tab08_conformance.log" in lines
    assert any("No failed job was recorded" in line for line in failure_summary([]))


def record(event, msg="", **fields) -> logging.LogRecord:
    made = logging.LogRecord("snakemake.logging", logging.INFO, __file__, 1, msg, None, None)
    made.__dict__.update(event=event, **fields)
    return made


def test_terminal_keeps_one_line_per_job_and_the_progress():
    handler = logging.StreamHandler()
    handler.last_msg_was_job_info = False
    keep = terminal.TerseFilter(handler).filter
    assert not keep(record(LogEvent.JOB_STARTED, "Execute 2 jobs..."))
    assert not keep(record(LogEvent.JOB_FINISHED, "Finished jobid: 3 (Rule: train)"))
    assert not keep(record(None, "Select jobs to execute..."))
    assert keep(record(LogEvent.PROGRESS, done=1, total=45)) and keep(record(None, "Building DAG of jobs..."))
    measured = {"rule_msg": "Training baseline on cpu", "log": ["results/wholehead/cpu/baseline/logs/train.log"],
                "rule_name": "train"}
    assert keep(record(LogEvent.JOB_INFO, **measured)) and handler.last_msg_was_job_info  # no blank line before it
    line = terminal.TerseFormatter(None, quick={"manifest"}.__contains__).format(record(LogEvent.JOB_INFO, **measured))
    assert re.fullmatch(r"\[\d\d:\d\d:\d\d\] Training baseline on cpu  \(log: results/wholehead/cpu/baseline/logs/"
                        r"train\.log\)", line)
    rendering = {"rule_msg": "", "rule_name": "manifest", "wildcards": {}, "log": ["paper/logs/manifest.log"]}
    assert terminal.job_line(rendering, quick={"manifest"}.__contains__).endswith("] manifest")  # seconds: no log
    assert terminal.job_line(rendering).endswith("] manifest  (log: paper/logs/manifest.log)")


def test_a_dry_run_names_two_files_of_each_kind_in_a_reason():
    reason = ("Missing output files: results/a.parquet, results/b.parquet, results/c.parquet, results/d.parquet; "
              "Input files updated by another job: x.csv, y.csv; Code has changed since last execution")
    assert terminal.short_reason(reason) == ("Missing output files: results/a.parquet, results/b.parquet and 2 more; "
                                             "Input files updated by another job: x.csv, y.csv; Code has changed "
                                             "since last execution")
    assert terminal.short_reason("Missing output files: a, b, c") == "Missing output files: a, b, c"  # "and 1 more"
    # The formatter shortens a copy: the main log's handler gets the record as Snakemake made it.
    seen = []

    class Inner(logging.Formatter):
        def format(self, made):
            seen.append((made.reason, made.input))
            return ""

    job = record(LogEvent.JOB_INFO, reason=reason, input=[f"in{k}" for k in range(70)], output=["out"])
    terminal.ShortReasonFormatter(Inner()).format(job)
    assert seen == [(terminal.short_reason(reason), ["in0", "in1", "and 68 more"])]
    assert job.reason == reason and len(job.input) == 70


def test_terminal_is_left_alone_for_a_dry_run_and_in_job_processes():
    class Settings(logging.Filter):
        dryrun, printshellcmds, verbose = True, False, False

    logger = logging.getLogger("test_run_summary.dry")
    handler = logging.StreamHandler()
    handler.addFilter(Settings())
    logger.addHandler(handler)
    assert not terminal.install(logger, main_process=True)
    assert isinstance(handler.formatter, terminal.ShortReasonFormatter)  # its reasons shortened, nothing else
    assert not handler.filters[1:]
    Settings.dryrun = False
    assert not terminal.install(logger, main_process=False)
    assert terminal.install(logger, main_process=True) and not terminal.install(logger, main_process=True)
    logger.removeHandler(handler)


@pytest.mark.workflow
def test_a_run_prints_a_line_per_job_and_ends_with_the_summary_a_failed_one_names_the_log(finished_run, tmp_path):
    workdir = copy_run(finished_run, tmp_path / "wf")
    done = snakemake(workdir, "--cores", "1", "-f", *TINY, "paper/figures/all")
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed[-2000:]
    assert "Shell command" not in printed and "Reason:" not in printed and "Finished jobid" not in printed
    assert "1 of 1 steps (100%) done" in printed and re.search(r"^\[\d\d:\d\d:\d\d\] manifest$", printed, re.M)
    summary = printed[printed.index("\nSummary\n"):]
    assert "Article: paper/article.pdf" in summary and "The paper's claims (tab05)" in summary
    assert len(printed.splitlines()) < 60, printed
    # A dry run plans with Snakemake's own output (each job's reason) and prints no summary.
    plan = snakemake(workdir, "-n", "-f", *TINY, "paper/figures/all")
    planned = plan.stdout + plan.stderr
    assert plan.returncode == 0 and "reason: " in planned.lower() and "Summary" not in planned

    next(workdir.glob("results/**/collected/hardware.parquet")).write_text("not a parquet file")
    failed = snakemake(workdir, "--cores", "1", "-f", *TINY, "paper/tables/tab01_hardware.csv")
    printed = failed.stdout + failed.stderr
    assert failed.returncode != 0
    assert "  failed: tab01_hardware; log: paper/logs/tab01_hardware.log" in printed, printed[-3000:]
