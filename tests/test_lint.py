"""The workflow's own style checks, run on the repository as a contributor runs them: `snakemake --lint` (Snakemake's
best practices) and `snakefmt --check .` (the formatting of the Snakefile and the rule files, pyproject.toml's
[tool.snakefmt]). Each fails with the command's own output, so the message says what to change."""

import sys
from pathlib import Path

from watched import run_watched

REPO = Path(__file__).resolve().parents[1]


def run(*args):
    return run_watched([sys.executable, "-m", *args], REPO)


def test_snakemake_lint_finds_nothing():
    lint = run("snakemake", "--lint")
    assert lint.returncode == 0, f"`snakemake --lint` exited {lint.returncode}:\n{lint.stdout}{lint.stderr}"


def test_snakefmt_would_change_no_file():
    check = run("snakefmt", "--check", ".")
    if check.returncode != 0:
        # --check names no file: the diff says which would change and how (`snakefmt .` applies it).
        diff = run("snakefmt", "--compact-diff", ".")
        raise AssertionError(f"`snakefmt --check .` exited {check.returncode}:\n{check.stdout}{check.stderr}"
                             f"{diff.stdout}{diff.stderr}")
