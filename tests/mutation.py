"""Mutation testing of the numerical core, the timing core and the verdict logic (opt-in, not part of the suite or CI).

    python3 tests/mutation.py                  # every group below, one after the other
    python3 tests/mutation.py units diffusion  # some groups
    python3 tests/mutation.py --list           # the groups, their modules and tests

Each group mutates its modules with mutmut (pinned in envs/requirements-test.txt) and runs only its own tests against
each mutant, in a scratch copy of the repository (--workdir, default $TMPDIR/medddpm-mutation/<group>), so the
working tree is never touched. It prints per module the mutants killed, those that survived and the score (killed
over all mutants; a mutant no test reaches counts as surviving), and writes them to <workdir>/score.json; the
surviving mutants are listed by name (see one with `cd <workdir> && python3 -m mutmut show NAME`).

mutmut mutates the bodies of functions and methods, not module-level tables; the group "constants" mutates the two
tables the numbers depend on, in memory (tests/mutation_tables.py): each kernel-class pattern of profiling/kernels.py
removed in turn, and each unit factor of profiling/units.py multiplied by 1000 in turn, against the table tests.
Nor can it mutate Triton kernels (Triton's jit cannot parse its trampolines); the group "ndhwc" mutates the @triton.jit
functions of medddpm/ndhwc_norm.py with a mutator of its own, under Triton's interpreter (tests/mutation_kernels.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# mutmut names a mutant after its module's import path, which it derives from the file's path with a leading "src."
# dropped; so the scratch copy holds the packages of workflow/scripts under src/ and imports them from there.
SCRIPTS = "src"

# group: (modules to mutate, test selection[, functions]). The selection is what each mutant is run against: the tests
# written for the module, without workflow runs. Where functions are named, only their mutants run (mutmut's globs on
# "<module>.x_<function>"): the readers of a module, not its command-line builders or its diagnoses of failed runs.
PARSERS = ["tests/test_profiling_units.py", "tests/test_profiling_parsers.py"]
CORE = "tests/test_timing_core.py"
GROUPS: dict[str, tuple] = {
    "units": (["profiling/units.py", "profiling/csvpages.py"], PARSERS),
    "ncu": (["profiling/ncu.py"], PARSERS,
            ["parse_raw", "parse_details", "check_raw_csv", "_raw_rows", "_csv_rows", "_numeric", "_identity_columns",
             "_snake", "read_report", "_action_rules", "_as_dict", "_enum_names", "validate_kernels",
             "_missing_metrics"]),
    "nsys": (["profiling/nsys.py"], PARSERS, ["parse_kern_sum", "_checked_rows", "check_csv", "_is_header"]),
    "torchprof": (["profiling/torchprof.py"], PARSERS),
    "tidy": (["profiling/tables.py"], PARSERS),
    "kernels": (["profiling/kernels.py"], ["tests/test_kernel_classes.py", "tests/test_profiling_parsers.py"]),
    "diffusion": (["medddpm/diffusion.py"], ["tests/test_diffusion_reference.py"]),
    "preparation": (["medddpm/prepare.py", "medddpm/brats.py"],
                    ["tests/test_preparation_rules.py", "tests/test_data.py", "tests/test_brats.py",
                     "-k", "not synthetic and not entry_points and not training_sampling"],
                    ["scale_slices", "scale_volume", "_resize", "one_hot", "check_labels", "check_finite",
                     "check_same_grid", "as_shape", "case_id", "split_cases", "*WholeHeadReader*", "crop_or_pad*",
                     "shifted_affine", "*BratsReader*", "_parse"]),
    "claims": (["reporting/claims.py", "reporting/equivalence.py"],
               ["tests/test_claims.py", "tests/test_claims_quality.py", "tests/test_reporting.py", "-k",
                "(claim or threshold) and not tables"]),
    "devices": (["measurement/devices.py"], ["tests/test_devices.py", "tests/test_variants.py"]),
    # The quality study's training: the seeds of a variant trained together, determinism, the upsampling as shifted
    # sums, the pairing of runs. The CUDA-graph capture and replay run on a GPU only (tests/test_study_ensemble.py's
    # GPU tests), so their mutants are left out here rather than counted as surviving.
    "study": (["medddpm/ensemble.py", "medddpm/unet.py", "medddpm/study.py"], ["tests/test_study_ensemble.py"],
              ["*Ensemble*__init__*", "*Ensemble*train*", "*Ensemble*_eager_step*", "*Ensemble*_check_finite*",
               "*Ensemble*losses*", "*Ensemble*warm_up*", "weights_identical", "deterministic_algorithms",
               "determinism_state", "_upsample_axis_x2", "upsample_trilinear_x2", "set_gather_upsampling",
               "reference_of", "study_run"]),
    # The timing core: what turns timed steps into train.json and sample.json, what the trainer feeds the U-Net, how
    # a variant is applied, and how the results become the tables' numbers (tests/test_timing_core.py recomputes
    # them by another route: from the per-step records, on a clock of its own, on hand-made result files).
    "timing": (["measurement/timing.py", "medddpm/engine.py", "medddpm/jobs.py", "measurement/throughput.py"],
               [CORE, "tests/test_engine.py", "-k", "timed_steps or json or timer or summary or throughput"],
               ["*DeviceTimer*", "summary", "timed_steps", "bare_loop", "run_training", "run_sampling",
                "throughput_sweep", "timed_batch", "volumes_per_hour", "best_batch", "run_columns"]),
    "trainer": (["medddpm/training.py", "medddpm/ema.py", "medddpm/engine.py"],
                [CORE, "-k",
                 "optimizer_step or batch or bare_step or ema or non_finite or train_json or receives or warm_up"],
                ["*EMA*", "*Trainer*", "data_batches", "cycle", "*Training*"]),
    "placement": (["medddpm/placement.py", "medddpm/runs.py", "medddpm/variants.py"],
                  [CORE, "tests/test_variants.py", "-k",
                   "placement or receives or backend or variant or switch or start_run or peak"],
                  ["*Placement*", "start_run", "start_job", "peak_memory", "reset_peak_memory", "_set_tf32",
                   "backend_flags", "apply_backend", "memory_format", "prepare_input", "autocast"]),
    "results": (["reporting/results.py", "reporting/derived.py", "reporting/bench.py"],
                [CORE, "tests/test_bench.py", "tests/test_numbers.py", "-k",
                 "runs_table or tab04 or tab07 or fig08 or bench or verdict or same or derived"],
                ["gather", "_runs", "_tag", "_flop_columns", "_rates", "relative_to", "speedup", "speedup_verdict",
                 "bench_rows", "_bench_row"]),
    # The CUDA graph paths, under tests/cpu_graphs.py's recorded graphs and per-device streams on the CPU: the
    # optimizer step's capture and replay, and the sampling evaluation's.
    "graphs": (["medddpm/training.py", "medddpm/sampling.py"], ["tests/test_graphs_on_cpu.py"],
               ["*StepGraph*", "*UNetEvaluation*"]),
    # Where a result was measured, against sources other than this code (tests/test_provenance.py, the PCI address
    # against nvidia-smi's recorded line); the device's clocks and driver come from nvidia-smi on a GPU only.
    "provenance": (["measurement/provenance.py"],
                   ["tests/test_provenance.py",
                    "tests/test_reporting.py::test_clocks_are_read_from_nvidia_smi_as_far_as_the_board_reports_them"],
                   ["config_digest", "workflow_commit", "_pci_address", "parse_clocks", "cpu_name", "device_record",
                    "provenance"]),
    # The device's measured ceilings, against numpy's product and copy timed by the test; the sizes and precisions
    # asked of a GPU and of a CPU, with the measurements replaced by stand-ins.
    "rates": (["measurement/rates.py"], ["tests/test_bench.py", "-k", "cpu_rates"]),
    # FLOPs per kernel class, against a count from the layer shapes and FLOPs written out per operation.
    "flops": (["medddpm/flops.py"], ["tests/test_flops.py"]),
    # The samplers: the respacing, each fast solver's coefficients and update, the chain, x_T (medddpm/sampling.py
    # holds only UNetEvaluation, which the group "graphs" mutates).
    "sampling": (["medddpm/samplers.py"], ["tests/test_samplers.py"]),
    # The paired comparisons' statistics and verdicts: the median's order-statistic interval, its coverage, the halves
    # check, the verdict against the band, when rounds stop, one comparison judged (tests/test_pairing.py, without its
    # tests that start worker processes). Left out: merging the groups' files (verdicts.merge_groups, read_group),
    # whose tests time a real group of worker processes, about 10 s per mutant.
    "pairing": (["measurement/pairing.py", "measurement/verdicts.py"],
                ["tests/test_pairing.py", "-k",
                 "not job_times and not processes_start and not process_fails and not workers_stop "
                 "and not ends_before"],
                ["median_interval_ranks", "coverage", "*Ratio*", "paired_ratio", "halves_disagree", "verdict",
                 "undecided_reason", "*StopRule*", "judge"]),
    # Nsight Compute's pages rebuilt for every call of a repeated operator (repeated_operators: once), against the
    # real pages a probe recorded with and without ncu's exclude filter (tests/fixtures/profiling/ncu_operators).
    "operators": (["profiling/operators.py"], ["tests/test_operators.py"]),
    # Not mutmut: the module-level tables (kernel-class patterns, unit factors), see tests/mutation_tables.py.
    "constants": (["profiling/kernels.py (patterns)", "profiling/units.py (factors)"],
                  ["tests/test_kernel_classes.py", "tests/test_profiling_units.py", "tests/test_profiling_parsers.py"]),
    # Not mutmut: the NDHWC Triton kernels under Triton's interpreter, see tests/mutation_kernels.py.
    "ndhwc": (["medddpm/ndhwc_norm.py (@triton.jit functions)"], ["tests/test_ndhwc_norm.py (a fast selection)"]),
}
COPIED = ["workflow", "tests", "data", "config", "config.yaml"]
PYPROJECT = """\
[tool.pytest.ini_options]
pythonpath = ["{scripts}"]
testpaths = ["tests"]
addopts = "-p no:cacheprovider --strict-markers"
markers = ["workflow: end to end", "slurm: a local SLURM", "cuda: a CUDA GPU",
           "on_gpu_when_present: the GPU where there is one"]

[tool.mutmut]
source_paths = ["{scripts}"]
only_mutate = {only}
also_copy = {also}
pytest_add_cli_args = ["-n", "0", "-p", "no:randomly"]
pytest_add_cli_args_test_selection = {selection}
use_git_change_detection = false
"""


def mutant_globs(group: str) -> list[str]:
    """mutmut's names of the mutants to run: every mutant of the group's modules, or those of the named functions."""
    modules, _, *functions = GROUPS[group]
    if not functions:
        return []
    return [f"{module[:-3].replace('/', '.')}.x{sep}{function}__mutmut_*" for module in modules
            for function in functions[0] for sep in ("_", "ǁ")]


def scratch_copy(workdir: Path, paths: list[str], *ignored: str) -> None:
    """A fresh workdir holding the repository's `paths` (caches and `ignored` patterns left out)."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", *ignored)
    for path in paths:
        source = REPO / path
        if source.is_dir():
            shutil.copytree(source, workdir / path, ignore=ignore)
        else:
            shutil.copy2(source, workdir / path)


def prepare(group: str, workdir: Path) -> None:
    modules, selection, *_ = GROUPS[group]
    scratch_copy(workdir, COPIED)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    shutil.copytree(REPO / "workflow" / "scripts", workdir / SCRIPTS, ignore=ignore)
    (workdir / "pyproject.toml").write_text(PYPROJECT.format(
        scripts=SCRIPTS, only=json.dumps([f"{SCRIPTS}/{m}" for m in modules]),
        also=json.dumps([p for p in COPIED if p != "tests"]), selection=json.dumps(selection)))


def score(group: str, workdir: Path) -> dict:
    """Per module: killed, timed out (a mutant that makes a test loop forever is caught too), survived, not reached
    by any test, other (crashes, suspicious), and the score: killed and timed out over all mutants run."""
    listing = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=workdir,
                             capture_output=True, text=True, check=True).stdout
    modules = {m: {"killed": 0, "timeout": 0, "survived": 0, "no tests": 0, "other": 0, "surviving": []}
               for m in GROUPS[group][0]}
    for line in listing.splitlines():
        if ":" not in line:
            continue
        name, status = (part.strip() for part in line.rsplit(":", 1))
        module = next((m for m in modules if name.startswith(m[:-3].replace("/", ".") + ".")), None)
        if module is None:
            continue
        counts = modules[module]
        if status == "not checked":  # outside the functions run
            continue
        if status in ("killed", "timeout"):
            counts[status] += 1
        elif status in ("survived", "no tests"):
            counts["survived" if status == "survived" else "no tests"] += 1
            counts["surviving"].append(name)
        else:
            counts["other"] += 1
    for counts in modules.values():
        total = counts["killed"] + counts["timeout"] + counts["survived"] + counts["no tests"] + counts["other"]
        counts["total"] = total
        counts["score"] = round((counts["killed"] + counts["timeout"]) / total, 4) if total else None
    return modules


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("groups", nargs="*", metavar="GROUP", help=f"groups to run (default: all): {', '.join(GROUPS)}")
    parser.add_argument("--workdir", type=Path,
                        default=Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / "medddpm-mutation")
    parser.add_argument("--max-children", type=int, default=1, help="mutants tested in parallel (default 1)")
    parser.add_argument("--list", action="store_true", help="list the groups and exit")
    parser.add_argument("--survivors", action="store_true",
                        help="run again only the mutants that survived the group's last run, against the current tests "
                             "(the other results are kept)")
    args = parser.parse_args()
    if args.list:
        for group, (modules, selection, *functions) in GROUPS.items():
            only = f" (functions: {', '.join(functions[0])})" if functions else ""
            print(f"{group}: {', '.join(modules)}{only} <- {' '.join(selection)}")
        return 0
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(GROUPS)}")
    failed = False
    for group in args.groups or list(GROUPS):
        if group == "constants":
            env = {**os.environ, "HYPOTHESIS_EXAMPLES": os.environ.get("HYPOTHESIS_EXAMPLES", "15")}
            failed |= subprocess.run([sys.executable, str(REPO / "tests" / "mutation_tables.py")], cwd=REPO,
                                     env=env).returncode != 0
            continue
        if group == "ndhwc":
            failed |= subprocess.run([sys.executable, str(REPO / "tests" / "mutation_kernels.py"), "--workdir",
                                      str(args.workdir / group), *(["--survivors"] if args.survivors else [])],
                                     cwd=REPO).returncode != 0
            continue
        workdir = args.workdir / group
        names = mutant_globs(group)
        if args.survivors:
            names = [n for counts in score(group, workdir).values() for n in counts["surviving"]]
            for target in (workdir / "tests", workdir / "mutants" / "tests"):
                shutil.copytree(REPO / "tests", target, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            if not names:
                print(f"{group}: no surviving mutant to run again")
                continue
        else:
            prepare(group, workdir)
        started = time.monotonic()
        # Property tests run fewer examples against each mutant than in the suite.
        env = {**os.environ, "HYPOTHESIS_EXAMPLES": os.environ.get("HYPOTHESIS_EXAMPLES", "15")}
        run = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children), *names],
                             cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        seconds = time.monotonic() - started
        if run.returncode != 0:
            print(f"{group}: mutmut failed ({run.returncode}): {run.stderr.strip().splitlines()[-1:]}")
            failed = True
            continue
        modules = score(group, workdir)
        (workdir / "score.json").write_text(json.dumps({"seconds": round(seconds), "modules": modules}, indent=2))
        for module, counts in modules.items():
            print(f"{group}: {module}: {counts['killed'] + counts['timeout']} of {counts['total']} killed "
                  f"({counts['score']:.1%}; {counts['timeout']} by a timeout), {counts['survived']} survived, "
                  f"{counts['no tests']} not reached, {counts['other']} other [{seconds:.0f} s]")
            for name in counts["surviving"]:
                print(f"    {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
