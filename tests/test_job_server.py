"""tests/job_server.py: a job forked from the preloaded server is what `python SCRIPT` would be, and goes when it
is told to or when the process that asked for it goes."""

import array
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import job_server
from watched import run_watched

# What a script sees of its process, written as lines (the last one: whether torch was imported before the script
# ran, the server's mark).
SCRIPT = """
import os, sys
print("argv", [os.path.basename(sys.argv[0]), *sys.argv[1:]])
print("cwd", os.getcwd())
print("path0", sys.path[0])
print("marker", os.environ.get("MARKER"))
print("pythonpath_first", sys.path[1] if os.environ.get("PYTHONPATH") else None)
print("name", __name__, os.path.basename(__file__))
print("umask", oct(os.umask(0o022)))
print("sigpipe_ignored", __import__("signal").getsignal(__import__("signal").SIGPIPE) == __import__("signal").SIG_IGN)
print("to stderr", file=sys.stderr)
print("preloaded", "torch" in sys.modules)
sys.exit(int(os.environ.get("EXIT", "0")))
"""


@pytest.fixture(scope="module")
def server():
    process, shim = job_server.start(sys.executable)
    yield shim
    process.stdin.close()
    process.wait()


def _script(tmp_path: Path, text: str, name: str = "tmpabc.job.py") -> Path:
    folder = tmp_path / ".snakemake" / "scripts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def _run(interpreter: str, script: Path, cwd: Path, **env) -> subprocess.CompletedProcess:
    old = os.umask(0o027)
    try:
        return subprocess.run([interpreter, str(script)], cwd=cwd, capture_output=True, text=True,
                              env={**os.environ, "MARKER": "m", "PYTHONPATH": str(cwd), **env})
    finally:
        os.umask(old)


def test_a_forked_job_sees_what_a_process_of_its_own_sees(server, tmp_path):
    script = _script(tmp_path, SCRIPT)
    forked = _run(server, script, tmp_path, EXIT="3")
    own = _run(sys.executable, script, tmp_path, EXIT="3")
    assert forked.returncode == own.returncode == 3
    assert forked.stderr == own.stderr == "to stderr\n"
    forked_lines, own_lines = forked.stdout.splitlines(), own.stdout.splitlines()
    assert forked_lines[:-1] == own_lines[:-1]
    assert "cwd " + str(tmp_path) in forked_lines and "umask 0o27" in forked_lines and "marker m" in forked_lines
    assert f"pythonpath_first {tmp_path}" in forked_lines
    # The fork path was taken: torch was there before the script ran, as it is not in a process of its own.
    assert (forked_lines[-1], own_lines[-1]) == ("preloaded True", "preloaded False")


def test_an_uncaught_exception_prints_its_traceback_and_exits_1(server, tmp_path):
    done = _run(server, _script(tmp_path, "raise ValueError('the job failed here')\n"), tmp_path)
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith("ValueError: the job failed here")


def test_anything_but_a_snakemake_script_runs_in_the_real_interpreter(server, tmp_path):
    done = subprocess.run([server, "-c", "import sys; print('torch' in sys.modules, sys.executable)"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.split() == ["False", sys.executable]


def _started(tmp_path: Path, shim: str) -> tuple[subprocess.Popen, int]:
    """A forked job that writes its pid and then waits; the shim's process and the job's pid."""
    script = _script(tmp_path, "import os, time\nopen('pid', 'w').write(str(os.getpid()))\ntime.sleep(3600)\n")
    shim_process = subprocess.Popen([shim, str(script)], cwd=tmp_path)
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
        assert shim_process.poll() is None, "the job ended before it wrote its pid"
        time.sleep(0.05)
    return shim_process, int((tmp_path / "pid").read_text())


def test_a_signal_to_the_shim_reaches_the_job_and_ends_both(server, tmp_path):
    shim_process, pid = _started(tmp_path, server)
    shim_process.send_signal(signal.SIGTERM)
    assert shim_process.wait() == -signal.SIGTERM
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_job_whose_shim_is_killed_is_killed_with_it(server, tmp_path):
    shim_process, pid = _started(tmp_path, server)
    job = psutil.Process(pid)
    shim_process.kill()
    shim_process.wait()
    job.wait(timeout=120)  # the server sees the connection close within its 50 ms poll


def test_a_client_gone_before_it_read_its_pid_has_its_job_killed_and_the_server_serves_on(server, tmp_path):
    """A shim killed between sending its job and reading the job's pid (a signal before its handlers, on a busy
    machine) leaves that pid unread: the server's next read of the connection is a reset, not an end of file."""
    script = _script(tmp_path, "import os, time\nopen('pid', 'w').write(str(os.getpid()))\ntime.sleep(3600)\n")
    request = {"argv": [str(script)], "cwd": str(tmp_path), "env": dict(os.environ), "umask": 0o022}
    with open(os.devnull, "r+") as null:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(Path(server).with_name("socket")))
        client.sendmsg([(json.dumps(request) + "\n").encode()],
                       [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [null.fileno()] * 3))])
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
        time.sleep(0.05)
    job = psutil.Process(int((tmp_path / "pid").read_text()))
    client.close()  # the pid line the server sent is still unread
    job.wait(timeout=120)
    done = _run(server, _script(tmp_path, "print('served')\n", "tmpdef.job.py"), tmp_path)
    assert (done.returncode, done.stdout) == (0, "served\n")


def test_a_snakemake_command_forks_its_jobs_unless_told_not_to(tmp_path, monkeypatch):
    (tmp_path / "Snakefile").write_text('rule seen:\n    output: "seen.txt"\n    script: "seen.py"\n')
    (tmp_path / "seen.py").write_text(
        "import sys\nopen(snakemake.output[0], 'w').write(str('torch' in sys.modules))\n")
    seen = {}
    for forked in ("1", "0"):
        monkeypatch.setenv("TESTS_FORK_JOBS", forked)
        (tmp_path / "seen.txt").unlink(missing_ok=True)
        done = run_watched([sys.executable, "-m", "snakemake", "--cores", "1", "seen.txt"], tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        seen[forked] = (tmp_path / "seen.txt").read_text()
    assert seen == {"1": "True", "0": "False"}
