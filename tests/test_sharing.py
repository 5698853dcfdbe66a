"""Sharing results: the export target writes a small reference set, which reads back as a shipped set, joins another
run's comparison by being listed, and whole result trees of two machines merge by copying (the run:
conftest.finished_run)."""

import io
import os
import shlex
import shutil

import pandas as pd
import pytest

from conftest import RENDERING, TINY, copy_run, file_sha256, job_stats, planned_jobs, snakemake
from reporting import render
from reporting.manifest import read_manifest
from reporting.registry import BY_ID
from planning.layout import file_keys
from reporting.results import collect
from planning.plan import SHIPPED_NAMES

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def exporting_run(finished_run, tmp_path_factory):
    """A copy of the tiny run that ran the one export target (a copy: the shared run is read by other workers)."""
    run = copy_run(finished_run, tmp_path_factory.mktemp("exporting") / "wf")
    done = snakemake(run, "--cores", "1", *TINY, "export")
    assert done.returncode == 0, done.stderr[-3000:]
    # The export alone, with the label's bench table (its bench.csv and bench.md, from the runs): nothing measured again.
    assert "3 of 3 steps" in done.stderr and "Bench table of" in done.stderr, done.stderr[-2000:]
    return run


@pytest.fixture(scope="module")
def exported(exporting_run):
    """The tiny run's results shared as a reference set: data/reference/wholehead/cpu/."""
    return exporting_run / "data/reference/wholehead/cpu"


def test_export_writes_a_small_reference_set_that_exports_to_the_same_bytes(exporting_run, exported):
    listed = read_manifest(exported / "manifest.sha256")
    files = {p.relative_to(exported).as_posix() for p in exported.rglob("*") if p.is_file()}
    assert set(listed) == files - {"manifest.sha256"}
    assert all(file_sha256(exported / name) == digest for name, digest in listed.items())
    assert {"baseline/profile/train/torch_trace.json.gz", "config.yaml", "bench.csv", "channels_last/sample_steps.csv",
            "study/baseline/seed1/run.json", "study/baseline/seed1/comparison.json",
            "study/channels_last/seed0/losses.csv", "study/channels_last/seed0/slice.npy"} <= files
    assert not any(name.endswith((".pt", ".nii.gz", "-rep", "trace.json", ".log")) for name in files)
    trace = (exported / "baseline/profile/train/torch_trace.json.gz").read_bytes()
    assert trace[3] == 0 and trace[4:8] == b"\0\0\0\0"  # gzip -n: no file name, no time
    readme = (exported / "README.md").read_text()
    assert "| torch | 2." in readme and "snakemake --cores 1 --configfile tests/tiny.yaml -- export" in readme
    assert "| baseline |" in readme and "measured | 20" in readme
    before = {name: file_sha256(exported / name) for name in files}
    (exported / "manifest.sha256").unlink()  # the same command again writes the same set
    again = snakemake(exporting_run, "--cores", "1", *TINY, "export")
    assert again.returncode == 0, again.stderr[-2000:]
    assert {name: file_sha256(exported / name) for name in files} == before


def test_the_command_the_readme_gives_checks_a_run_against_the_set(exporting_run, exported, tmp_path):
    """The README's "measures the same and checks it against this set", as written, in a checkout holding the set and
    the label's runs: it plans nothing measured again, and its conformance table, built by the same command for that
    one target, compares them (all within), not "not comparable". The command's other outputs are those every
    end-to-end run renders (test_workflow.py): building them again here would only repeat that."""
    run = copy_run(exporting_run, tmp_path / "wf")
    readme = (exported / "README.md").read_text()
    command = readme.split("checks it against this set (tab08):\n\n```bash\n", 1)[1].split("\n", 1)[0]
    assert command == "snakemake --cores 1 --configfile data/reference/wholehead/cpu/config.yaml -- paper/figures/all"
    words = shlex.split(command)[1:]  # its arguments, as they are (Snakemake runs as in the other tests)
    plan = snakemake(run, "-n", *words)
    assert plan.returncode == 0, plan.stderr[-3000:]
    planned = job_stats(plan)
    assert "tab08_conformance" in planned and not {"train", "sample", "profile_torch"} & set(planned), planned
    done = snakemake(run, *[word.replace("paper/figures/all", "paper/tables/tab08_conformance.csv") for word in words])
    assert done.returncode == 0, done.stderr[-3000:]
    conformance = pd.read_csv(run / "paper/tables/tab08_conformance.csv")
    assert set(conformance["gpu"]) == {"cpu"}, conformance
    # The run against its own export: the same numbers, within every band; a time the suite's load made while it was
    # measured (other processes beyond conformance.max_other_load_cores) is not judged, and says why.
    judged = conformance[conformance["verdict"] != "not measurable under this load"]
    assert set(judged["verdict"]) == {"within"}, conformance
    unjudged = conformance[conformance["verdict"] == "not measurable under this load"]
    assert unjudged["reasons"].str.contains("other processes kept cores busy|quartiles span|speed differs from the "
                                            "reference|speed changed under the "
                                            "job").all(), unjudged


def test_export_then_import_round_trips(finished_run, exported, tmp_path):
    """Read back as a shipped set, the export gives the tables of the original results (only the origin tag
    differs), hence the same figures and tables."""
    measured = [p for p in (finished_run / "results/wholehead/cpu").rglob("*") if p.is_file() and file_keys(p)["kind"]]
    original = collect(measured, [], ["cpu"])
    imported = collect([], [p for p in exported.rglob("*") if p.name.endswith(SHIPPED_NAMES)], [])
    for name, frame in original.items():
        pd.testing.assert_frame_equal(frame.drop(columns="origin", errors="ignore"),
                                      imported[name].drop(columns="origin", errors="ignore"), obj=name)
    assert len(original["slices"]) == 2 * 4 and len(original["kernels"]) > 0 and len(original["bench"]) == 2
    assert len(original["study"]) == 4  # the quality study's runs: baseline and channels_last at two seeds each
    # The same drawings from both: the runs, the quality study (slices, losses, verdict) and the kernel table.
    for output_id in ("fig08_end_to_end", "fig09_quality", "tab03_kernels"):
        files = {name: finished_run / path for name, path in BY_ID[output_id].files.items()}  # fig09: the claims
        made = [render.build(output_id, {**bundle(tables, tmp_path / side), **files})
                for side, tables in (("original", original), ("imported", imported))]
        if BY_ID[output_id].kind == "figure":
            assert figure_bytes(made[0]) == figure_bytes(made[1]), output_id
        else:
            pd.testing.assert_frame_equal(made[0].frame, made[1].frame)


def test_a_shared_reference_set_joins_the_comparison_by_listing_it(exporting_run, exported, tmp_path):
    """Import: a set in data/reference/<workload>/<label>/ and `reference_results` naming it; nothing is measured. Here the
    tiny run's own export stands for another machine's twice: as the a100 set, drawn beside the cpu runs, and as
    the cpu set, the reference that the cpu runs measured here are checked against (tab08: all within)."""
    merged = tmp_path / "merged"
    copy_run(exporting_run, merged)
    shutil.copytree(exported, merged / "data/reference/wholehead/a100")
    # The set is the same run: its times are not refused for the load the tests put on the machine beside them.
    (merged / "imported.yaml").write_text("reference_results: [h200, a100, cpu]\n"
                                          "conformance: {max_other_load_cores: null}\n")
    args = ("--configfile", "tests/tiny.yaml", "imported.yaml", "--")
    planned = planned_jobs(merged, *args, "paper/figures/all")
    assert planned.get("collect_results") == 1 and set(planned) <= RENDERING, planned
    done = snakemake(merged, "--cores", "2", *args, "paper/tables/tab04_optimization.csv",
                     "paper/tables/tab08_conformance.csv")
    assert done.returncode == 0, done.stderr[-3000:]
    optimization = pd.read_csv(merged / "paper/tables/tab04_optimization.csv").set_index(["gpu", "variant"])
    assert list(optimization.loc["a100", "origin"]) == ["shipped reference"] * 2
    assert optimization.loc[("a100", "baseline"), "train_ms_per_sample"] == \
        optimization.loc[("cpu", "baseline"), "train_ms_per_sample"]
    conformance = pd.read_csv(merged / "paper/tables/tab08_conformance.csv")
    assert set(conformance["gpu"]) == {"cpu"} and len(conformance) == 2 * 5, conformance  # three end-to-end metrics
    # and two profiled steps' shares per variant. Every judged row is within (the set is the run itself); with the
    # load limit off, a time is left unjudged only where its own steps spread wider than the band (under the suite's
    # load the tiny steps of 8^3 can), its job lies further than the band from the same run's paired rounds, or the
    # fixed single-core workload ran further than the band apart on the two sides (the suite's load moves it), and
    # says so.
    judged = conformance[conformance["verdict"] != "not measurable under this load"]
    assert set(judged["verdict"]) == {"within"} and len(judged) >= 2 * 3, conformance
    unjudged = conformance[conformance["verdict"] == "not measurable under this load"]
    assert all(any(said in str(why) for said in ("quartiles span more than the band", "the machine's speed changed "
                                                 "under the job", "the machine's speed differs from the reference's"))
               for why in unjudged["reasons"]), unjudged


def test_result_trees_of_two_machines_merge_by_copying(finished_run, tmp_path):
    """The README's path for whole trees (checkpoints, volumes, raw reports): another machine's results/<workload>/<gpu>/ tree
    (the tiny run's own, under the a100 label) next to ours, the dataset dated back: a dry run plans only tables,
    figures and the bench table, nothing measured again."""
    merged = tmp_path / "merged"
    copy_run(finished_run, merged)
    tree = merged / "results" / "wholehead"
    shutil.copytree(tree / "cpu", tree / "a100")  # keeps times, like rsync -a
    for path in [tree / "dataset", *(tree / "dataset").rglob("*")]:
        os.utime(path, (946684800, 946684800), follow_symlinks=False)  # 2000-01-01, as the README says
    (merged / "merged.yaml").write_text("gpus: [cpu, a100]\n")
    args = ("--configfile", "tests/tiny.yaml", "merged.yaml", "--rerun-triggers", "params", "input", "--")
    planned = planned_jobs(merged, *args, "paper/figures/all")
    assert planned.get("collect_results") == 1 and set(planned) <= RENDERING | {"bench_table"}, planned


def bundle(tables: dict, folder) -> dict:
    """The collected tables as the rules write them, with one origin (the only tag that differs)."""
    folder.mkdir(exist_ok=True)
    paths = {}
    for name, frame in tables.items():
        paths[name] = folder / f"{name}.parquet"
        (frame.assign(origin="either") if "origin" in frame else frame).to_parquet(paths[name], index=False)
    return paths


def figure_bytes(fig) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", metadata={"Software": None})
    return out.getvalue()
