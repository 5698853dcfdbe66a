"""The tests' own machinery for a loaded machine: subprocesses stopped by what they do, not by the clock
(tests/watched.py), and a shared build that fails reported once (tests/shared_builds.py)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from watched import Stopped, run_watched

TESTS = Path(__file__).resolve().parent


def test_a_finished_command_gives_what_subprocess_run_gives(tmp_path):
    done = run_watched([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                       tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    merged = run_watched([sys.executable, "-c", "import sys; print('a', flush=True); print('b', file=sys.stderr)"],
                         tmp_path, merge_output=True)
    assert merged.stdout == "a\nb\n" and merged.stderr == ""


def test_a_command_that_waits_for_nothing_is_stopped_as_stuck(tmp_path):
    with pytest.raises(Stopped, match=r"made no progress for 3 s: no CPU time used and no file changed .* \(stuck\)"):
        run_watched([sys.executable, "-c", "import time; time.sleep(120)"], tmp_path, stall_seconds=3)


def test_a_command_that_burns_cpu_past_its_limit_is_stopped_as_runaway(tmp_path):
    with pytest.raises(Stopped, match=r"used more than 2 s of CPU time \(runaway\)"):
        run_watched([sys.executable, "-c", "while True: pass"], tmp_path, cpu_seconds=2)


def test_the_cpu_time_of_a_grandchild_counts(tmp_path):
    """Snakemake's jobs are its children's children: their CPU time is the run's."""
    program = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])"
    with pytest.raises(Stopped, match="runaway"):
        run_watched(["bash", "-c", f"{sys.executable} -c \"{program}\""], tmp_path, cpu_seconds=2)


def test_a_slow_command_that_keeps_writing_files_is_not_stopped(tmp_path):
    """Progress is CPU time or a file written under the command's folder (a SLURM job is no child of the command): a
    command idle for longer than the stall limit in all but writing a file now and then runs to its end."""
    program = textwrap.dedent("""
        import pathlib, time
        for k in range(7):
            time.sleep(1)
            pathlib.Path(f"step{k}").write_text(str(k))
        print("done")
    """)
    done = run_watched([sys.executable, "-c", program], tmp_path, stall_seconds=3)
    assert done.returncode == 0 and done.stdout == "done\n"


def test_a_failed_shared_build_is_reported_once_and_its_dependents_are_not_run(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        import pytest
        from shared_builds import built_once, pytest_runtest_makereport, pytest_terminal_summary  # noqa: F401

        def broken(folder):
            raise RuntimeError("snakemake exited 1: MissingInputException in rule train")

        @pytest.fixture(scope="session")
        def shared(tmp_path_factory):
            return built_once(tmp_path_factory, "demo_run", broken)
    """))
    (tmp_path / "test_demo.py").write_text("".join(f"def test_{k}(shared):\n    pass\n\n" for k in range(4)))
    # A session of its own: not a worker of this one (xdist's and pytest's variables left out).
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                           "-o", "addopts=-rs", "--basetemp", str(tmp_path / "base"), str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    out = done.stdout
    assert done.returncode == 1, out
    assert "1 error" in out and "3 skipped" in out, out
    assert out.count("MissingInputException in rule train") >= 2  # the builder's error and the summary's block
    assert out.count("shared build demo_run failed =") == 1, out
    assert out.count("SKIPPED") == 3 and "not run: the shared build demo_run failed" in out, out
    assert "built by test_demo.py::test_0; 3 test(s) that need it were not run" in out, out


SNAKEFILE = """
rule where:
    output: "where.txt"
    shell: "echo $MARKER > {output} && pwd >> {output} && echo $0 >> {output}"
"""


def test_a_forked_snakemake_is_what_a_process_of_its_own_would_be(tmp_path, monkeypatch):
    """tests/snakemake_server.py: the command's folder, environment, output and exit code, forked or not (a job of
    it sees the same folder and variables; a target that no rule makes fails alike)."""
    seen = {}
    for forked in ("1", "0"):
        folder = tmp_path / f"forked{forked}"
        folder.mkdir()
        (folder / "Snakefile").write_text(SNAKEFILE)
        monkeypatch.setenv("TESTS_FORK_SNAKEMAKE", forked)
        env = {**os.environ, "MARKER": f"marker-{forked}"}
        done = run_watched([sys.executable, "-m", "snakemake", "--cores", "1", "where.txt"], folder, env=env)
        missing = run_watched([sys.executable, "-m", "snakemake", "--cores", "1", "nothing.txt"], folder, env=env)
        seen[forked] = (done.returncode, (folder / "where.txt").read_text().split("\n")[:2], missing.returncode,
                        [line for line in missing.stderr.splitlines() if "nothing.txt" in line])
    assert seen["1"][0] == seen["0"][0] == 0
    assert seen["1"][1] == ["marker-1", str(tmp_path / "forked1")]
    assert seen["0"][1] == ["marker-0", str(tmp_path / "forked0")]
    assert seen["1"][2] == seen["0"][2] != 0
    assert seen["1"][3] == seen["0"][3] != []
