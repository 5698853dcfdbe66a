# What a run prints. While it runs, one line per job (reporting.terminal); at its end (reporting.run_summary), after a
# run that built paper/figures/all, what was built, where the article and the HTML report are and the headline
# numbers; after a failed run, which jobs failed and their logs. Snakemake calls neither handler for a dry run or when
# there was nothing to do.
from pathlib import Path

from snakemake.logging import logger

from reporting import terminal
from reporting.run_summary import FailedJob, MANIFEST, failed_jobs_from_log, failure_summary, success_summary

# Job subprocesses (exec mode "subprocess" or "remote") parse this file too: they keep Snakemake's own output. The
# local rules (`localrule: True`: the renderings, seconds each) print no log path; Snakemake keeps their names in
# a private set (locally every job counts as local in its job records), read when a job starts.
terminal.install(
    logger,
    main_process=getattr(workflow.exec_mode, "name", "") == "DEFAULT",
    quick=lambda rule: rule in getattr(workflow, "_localrules", ()),
)


def _summary_targets():
    """The files this invocation asked for (the default target's inputs included); empty if unknown."""
    try:
        return {str(target) for target in workflow.dag.derived_targetfiles}
    except Exception:
        return set()


def _failed_jobs(log):
    """The failed jobs from the scheduler, else from the `Error in rule` blocks of Snakemake's main log."""
    try:
        jobs = workflow.scheduler.failed
        return [
            FailedJob(job.rule.name, dict(job.wildcards_dict), [str(path) for path in job.log])
            for job in sorted(jobs, key=lambda job: job.jobid)
        ]
    except Exception:
        pass
    found = []
    for path in log or []:
        try:
            found += failed_jobs_from_log(Path(path).read_text())
        except OSError:
            pass
    return found


onsuccess:
    if MANIFEST in _summary_targets():
        try:
            logger.info("\n".join(success_summary(Path.cwd())))
        except Exception as error:  # the summary never fails a run that succeeded
            logger.info(f"(no summary of the run: {type(error).__name__}: {error})")


onerror:
    try:
        logger.info("\n".join(failure_summary(_failed_jobs(log))))
    except Exception as error:
        logger.info(f"(no summary of the failed jobs: {type(error).__name__}: {error})")
