"""Snakemake's command line imported once per test worker, and forked for every `python -m snakemake` the tests run.

Importing Snakemake with its plugins takes about 2 s, more than a dry run of the workflow itself, and the suite runs
Snakemake some two hundred times. This server imports it once, with the libraries every command imports after it
(nothing of the workflow: every command still parses its own copy of the workflow and imports that copy's modules),
and forks a child per command. The child is what `python -m snakemake ARGS` would be: its own session (a process
group to signal), the command's folder, environment, standard input and output files, then Snakemake's `main()`; its
exit code is the command's. Its jobs' scripts run in children of the job server (job_server.py) where the request names
its shim ("job_interpreter"): Snakemake runs a script with `sys.executable`.

A test's `python -c` program of Snakemake's API (a dry run that reads the DAG's jobs, the workflow's rules) is forked
the same way where it asks for it (`run_watched(..., snakemake_api=True)`): it imports Snakemake's API and its
plugins, which the server holds, and parses the workflow itself as a command does.

Protocol, one JSON object per line on the server's standard input: {"args", "cwd", "env", "stdin", "stdout", "stderr",
"status", "job_interpreter", "code" (null, or a `python -c` program)}; the server answers the child's pid on a line of
its standard output and, once the child has ended, writes its exit code (negative: the signal that ended it, as
subprocess gives) to the file named by "status". The server ends when its standard input closes (the test worker
ended); running children are left to finish.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import traceback

import snakemake.cli  # the import every command skips
import snakemake.workflow
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry
from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry
from snakemake_interface_report_plugins.registry import ReportPluginRegistry
from snakemake_interface_storage_plugins.registry import StoragePluginRegistry

from interpreter_exit import end_process, ended_children, system_exit_code

# What a command imports after `snakemake.cli`, none of it the workflow's: Snakemake's own later modules and the
# libraries they bring (smart_open with boto3 and requests for every source file it reads, the report's nbformat,
# docutils, jinja2 and pygments, the config's schema validators), and its plugin registries, singletons that find
# the installed plugins on first use. A dry run in the child took 1.06-1.13 s without them and 0.77-0.94 s with them.
LATER_IMPORTS = ("snakemake.api", "snakemake.dag", "snakemake.jobs", "snakemake.scheduling.job_scheduler",
                 "snakemake.sourcecache", "snakemake.profiles", "snakemake.report.html_reporter", "smart_open",
                 "boto3", "requests", "nbformat", "docutils.core", "jinja2", "pygments.formatters.html", "jsonschema",
                 "fastjsonschema", "yte", "dpath", "PIL.Image", "pandas", "yaml")


def _import_what_commands_share() -> None:
    for name in LATER_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed here (smart_open takes boto3 where it is): the commands go without it too
            pass
    for registry in (ExecutorPluginRegistry, LoggerPluginRegistry, ReportPluginRegistry, StoragePluginRegistry):
        registry()


def _redirect(fd: int, path: str | None, flags: int) -> None:
    opened = os.open(path or os.devnull, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)


def _run_child(request: dict) -> None:
    """In the forked child: become `python -m snakemake ARGS` (or, where the request holds "code", `python -c CODE
    ARGS`) run in request's folder; never returns."""
    code = 1
    try:
        os.setsid()
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(number, signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL)
        os.chdir(request["cwd"])
        sys.path[0] = os.getcwd()  # what `python -m` puts first
        # The one value Snakemake takes from the process at import (its log's "Run directory"), taken again here.
        snakemake.workflow.Workflow._rundir = os.getcwd()
        os.environ.clear()
        os.environ.update(request["env"])
        _redirect(0, request["stdin"], os.O_RDONLY)
        _redirect(1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        if request["stderr"]:
            _redirect(2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        else:
            os.dup2(1, 2)
        sys.stdin = open(0, closefd=False)
        if request.get("job_interpreter"):  # the jobs' scripts handed to the job server (job_server.py)
            sys.executable = request["job_interpreter"]
        try:
            if request.get("code") is None:
                sys.argv = [os.path.join(os.path.dirname(snakemake.cli.__file__), "__main__.py"), *request["args"]]
                snakemake.cli.main()
            else:  # `python -c CODE ARGS`: a program of Snakemake's API (watched.run_watched(..., snakemake_api=True))
                sys.argv = ["-c", *request["args"]]
                exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as ended:
            code = system_exit_code(ended)
        except KeyboardInterrupt:
            code = 128 + signal.SIGINT
        except BaseException:  # noqa: BLE001 (what an uncaught exception prints and returns in `python -m`)
            traceback.print_exc()
            code = 1
    finally:
        end_process(code)


def _reap(children: dict[int, str]) -> None:
    """Every ended child's exit code into its status file (written whole, then renamed into place)."""
    for path, code in ended_children(children):
        with open(path + ".part", "w") as out:
            out.write(str(code))
        os.replace(path + ".part", path)


def serve() -> None:
    children: dict[int, str] = {}
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0.02)
        _reap(children)
        if not ready:
            continue
        line = sys.stdin.readline()
        if not line:
            return
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_child(request)
        children[pid] = request["status"]
        print(pid, flush=True)


if __name__ == "__main__":
    _import_what_commands_share()
    serve()
