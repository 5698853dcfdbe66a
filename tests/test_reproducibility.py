"""Two clean runs of the tiny configuration: every output not declared timing-bearing is the same bytes.

The second run lives in a file of its own so that a second test worker builds it while the first builds the shared
run (conftest.finished_run) that test_workflow.py reads.
"""

import pytest

from conftest import run_tiny_configuration
from reporting.manifest import read_sections
from reporting.registry import timing_bearing_files

pytestmark = pytest.mark.workflow


# Session scope, like finished_run, so that pytest sets it up first (it orders fixtures by scope, then as the test
# lists them): this worker builds the second run before it waits for the first.
@pytest.fixture(scope="session")
def second_clean_run(tmp_path_factory):
    """The same tiny configuration run again from scratch, in a copy of its own."""
    workdir = tmp_path_factory.mktemp("again") / "wf"
    run_tiny_configuration(workdir)
    return workdir


def test_two_clean_runs_differ_only_in_timing_bearing_files(second_clean_run, finished_run):
    """Every figure and table not declared timing-bearing is byte-identical between two clean runs (the losses,
    samples, quality figures and the hardware and workload tables); the timing-bearing ones may differ."""
    first = read_sections(finished_run / "paper/figures/all")
    second = read_sections(second_clean_run / "paper/figures/all")
    assert first["deterministic"] == second["deterministic"]
    assert set(first["timing"]) == set(second["timing"]) == timing_bearing_files()
    assert {"paper/figures/fig09_quality.png", "paper/tables/tab06_quality.csv"} <= set(first["deterministic"])
