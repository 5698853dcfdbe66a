"""Two clean runs of the tiny configuration: every output not declared timing-bearing is the same bytes.

The second run lives in a file of its own so that the second test worker builds it (after the SLURM test) while the
first builds the shared run (conftest.finished_run) and runs the tests that read it.
"""

import pytest

from conftest import TINY, copy_workflow, file_sha256, snakemake
from reporting.manifest import read_sections
from reporting.registry import deterministic_files, timing_bearing_files

pytestmark = pytest.mark.workflow


# Session scope, like finished_run, so that pytest sets it up first (it orders fixtures by scope, then as the test
# lists them): this worker builds the second run before it waits for the first.
@pytest.fixture(scope="session")
def second_clean_run(tmp_path_factory):
    """The deterministic outputs built again from scratch, in a copy of their own: every job they depend on runs
    again (training, sampling, quality, profiles, the quality study, collecting); the timing-bearing figures and
    tables, which may differ anyway, are not rendered a second time."""
    workdir = copy_workflow(tmp_path_factory.mktemp("again") / "wf")
    done = snakemake(workdir, "--cores", "2", *TINY, *sorted(deterministic_files()))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def test_two_clean_runs_differ_only_in_timing_bearing_files(second_clean_run, finished_run):
    """Every figure and table not declared timing-bearing is byte-identical between two clean runs (the losses,
    samples, quality figures and the hardware and workload tables); the manifest marks the others."""
    first = read_sections(finished_run / "paper/figures/all")
    assert set(first["timing"]) == timing_bearing_files()
    assert set(first["deterministic"]) == deterministic_files()
    again = {name: file_sha256(second_clean_run / name) for name in first["deterministic"]}
    assert again == first["deterministic"]
    assert {"paper/figures/fig09_quality.png", "paper/tables/tab06_quality.csv"} <= set(first["deterministic"])
