"""Mutants of the NDHWC Triton kernels (the @triton.jit functions of medddpm/ndhwc_norm.py), which mutmut cannot
mutate (its trampolines are functions Triton's jit cannot parse), tested under Triton's interpreter on the CPU:

    python3 tests/mutation_kernels.py                 # every mutant (also: python3 tests/mutation.py ndhwc)
    python3 tests/mutation_kernels.py --list          # the mutants, numbered, without running them
    python3 tests/mutation_kernels.py --show N        # mutant N as a diff
    python3 tests/mutation_kernels.py --survivors     # only the last run's survivors, against the current tests

Each mutant changes one node of one jit function's body (the docstrings left alone): an arithmetic operator (+ and -,
* and /, // to * and % to //, also in `+=`), a comparison (< and <=, > and >=), a constant (0 and 1, a small integer
n to n + 1, a float x to x + 1), a cast removed (`.to(...)`), a dtype swapped (float32 and float64, int64 to int32),
`&` and `|`, tl.where replaced by either branch. Its module is written into a scratch copy of the repository
(--workdir, default $TMPDIR/medddpm-mutation/ndhwc) and a fast selection of tests/test_ndhwc_norm.py (TESTS) runs
against it in a child forked from a process that has imported torch and Triton once; a failing test kills the mutant,
so does running past the timeout. Per jit function it prints the mutants killed, those that survived and the score,
and writes them to <workdir>/score.json. This module holds no tests."""

from __future__ import annotations

import argparse
import ast
import copy
import difflib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mutation import scratch_copy  # tests/mutation.py, beside this file

REPO = Path(__file__).resolve().parents[1]
MODULE = Path("workflow/scripts/medddpm/ndhwc_norm.py")
COPIED = ["workflow", "tests", "data", "config", "config.yaml", "pyproject.toml"]
# What each mutant is run against, fastest and widest first (pytest stops at the first failure): the tile offsets
# past 2^31, values and gradients in float64 for three channels per group (nothing stored past the buffers; a
# variance below one) and for several tiles with a partial last one, float32 (the casts between the input's dtype
# and the compute dtype), the reduction programs looping over tiles, bfloat16 (within rounding, and its casts
# truncated as the interpreter truncates), and the per-group passes looping over 70 programs' sums in chunks (the
# slowest, about 17 s). About 35 s in all unmutated, on 2 cores.
FILE = "tests/test_ndhwc_norm.py"
TESTS = [f"{FILE}::test_tile_offsets_are_64_bit_past_2_31_elements",
         f"{FILE}::test_values_and_gradients_equal_groupnorm32_then_silu[fp64-96-(4, 3, 5)]",
         f"{FILE}::test_the_passes_store_nothing_past_their_buffers",
         f"{FILE}::test_a_variance_below_one_is_normalised_as_by_the_reference",
         f"{FILE}::test_values_and_gradients_equal_groupnorm32_then_silu[fp64-64-(5, 6, 7)]",
         f"{FILE}::test_values_and_gradients_equal_groupnorm32_then_silu[fp32-64-(2, 3, 4)]",
         f"{FILE}::test_every_loop_of_the_reductions_adds_each_row_once[fp64-programs-loop-over-tiles]",
         f"{FILE}::test_bfloat16_keeps_dtype_and_layout_and_is_within_rounding",
         f"{FILE}::test_bfloat16_rounds_the_norms_output_before_silu_under_the_interpreter",
         f"{FILE}::test_every_loop_of_the_reductions_adds_each_row_once[fp64-statistics-loop-over-programs]"]

BINARY = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult,
          ast.Mod: ast.FloorDiv, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd}
COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
DTYPES = {"float32": "float64", "float64": "float32", "int64": "int32"}
SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.BitAnd: "&",
          ast.BitOr: "|", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


@dataclass
class Mutant:
    number: int
    function: str
    line: int
    change: str
    source: str


def is_jit(function: ast.FunctionDef) -> bool:
    return any(ast.unparse(d) in ("triton.jit", "jit") for d in function.decorator_list)


def node_mutations(node: ast.AST):
    """(description, replacement node) for each mutant of this one node."""
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        new = copy.deepcopy(node)
        new.op = BINARY[type(node.op)]()
        yield f"{SYMBOL[type(node.op)]} -> {SYMBOL[type(new.op)]}", new
    elif isinstance(node, ast.AugAssign) and type(node.op) in (ast.Add, ast.Sub):
        new = copy.deepcopy(node)
        new.op = BINARY[type(node.op)]()
        yield f"{SYMBOL[type(node.op)]}= -> {SYMBOL[type(new.op)]}=", new
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARE:
        new = copy.deepcopy(node)
        new.ops = [COMPARE[type(node.ops[0])]()]
        yield f"{SYMBOL[type(node.ops[0])]} -> {SYMBOL[type(new.ops[0])]}", new
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value = node.value
        if isinstance(value, int):
            changed = {0: 1, 1: 0}.get(value, value + 1)
        else:
            changed = 1.0 if value == 0.0 else value + 1.0
        yield f"{value!r} -> {changed!r}", ast.Constant(changed)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "to" and len(node.args) == 1:
            yield f"cast .to({ast.unparse(node.args[0])}) removed", node.func.value
        elif ast.unparse(node.func) == "tl.where" and len(node.args) == 3:
            yield "tl.where -> its true branch", node.args[1]
            yield "tl.where -> its false branch", node.args[2]
    elif (isinstance(node, ast.Attribute) and node.attr in DTYPES and isinstance(node.value, ast.Name)
          and node.value.id == "tl"):
        yield f"tl.{node.attr} -> tl.{DTYPES[node.attr]}", ast.Attribute(node.value, DTYPES[node.attr], ast.Load())


def body_nodes(function: ast.FunctionDef):
    """The nodes of a function's body, its docstring left out, in source order."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    nodes = [n for statement in body for n in ast.walk(statement)]
    return sorted(nodes, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))


def mutants(source: str) -> list[Mutant]:
    """Every mutant of the module's jit functions, numbered from 1 in source order (the same numbers on every call
    with the same source); mutants that give the same module as an earlier one are left out."""
    tree = ast.parse(source)
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    found, seen = [], {source}
    for function in tree.body:
        if not (isinstance(function, ast.FunctionDef) and is_jit(function)):
            continue
        for node in body_nodes(function):
            if not hasattr(node, "end_lineno"):
                continue
            begin = starts[node.lineno - 1] + len(source.splitlines()[node.lineno - 1].encode()[:node.col_offset]
                                                  .decode())
            end = starts[node.end_lineno - 1] + len(source.splitlines()[node.end_lineno - 1]
                                                    .encode()[:node.end_col_offset].decode())
            for change, replacement in node_mutations(node):
                text = ast.unparse(replacement)
                if isinstance(node, ast.expr) and not isinstance(replacement, (ast.Constant, ast.Name,
                                                                                ast.Attribute, ast.Call)):
                    text = f"({text})"
                mutated = source[:begin] + text + source[end:]
                if mutated in seen:
                    continue
                seen.add(mutated)
                found.append(Mutant(len(found) + 1, function.name, node.lineno, change, mutated))
    return found


def diff(original: str, mutant: Mutant) -> str:
    return "".join(difflib.unified_diff(original.splitlines(keepends=True), mutant.source.splitlines(keepends=True),
                                        f"a/{MODULE}", f"b/{MODULE}", n=1))


def prepare(workdir: Path) -> None:
    scratch_copy(workdir, COPIED, "results", ".snakemake")


def run_tests(workdir: Path, source: str, timeout: float, log: Path) -> tuple[str, float]:
    """("killed" | "survived" | "timeout", seconds): the test selection against the module `source`, in a child."""
    target = workdir / MODULE
    target.write_text(source)
    for cache in target.parent.glob("__pycache__"):
        shutil.rmtree(cache)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: a fresh import of the project's modules from the copy
        try:
            import pytest

            os.chdir(workdir)
            for name in [m for m in sys.modules if m.split(".")[0] in ("medddpm", "conftest", "reporting",
                                                                         "measurement", "profiling")]:
                del sys.modules[name]
            sys.path[:] = [p for p in sys.path if not p.startswith(str(REPO))]
            with open(log, "w") as out:
                os.dup2(out.fileno(), 1)
                os.dup2(out.fileno(), 2)
                code = pytest.main(["-x", "-q", "-n", "0", "-p", "no:cacheprovider", "-p", "no:randomly",
                                    "--rootdir", str(workdir), f"--basetemp={workdir / 'basetemp'}", *TESTS])
            os._exit(0 if code == 0 else 1)
        except BaseException:
            os._exit(2)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        seconds = time.monotonic() - started
        if done:
            return ("survived" if os.waitstatus_to_exitcode(status) == 0 else "killed"), seconds
        if seconds > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", seconds
        time.sleep(0.1)


def report(results: list[dict], seconds: float, note: str) -> dict:
    functions: dict[str, dict] = {}
    for row in results:
        counts = functions.setdefault(row["function"], {"killed": 0, "timeout": 0, "survived": 0, "surviving": []})
        counts[row["status"]] += 1
        if row["status"] == "survived":
            counts["surviving"].append(f"{row['number']}: line {row['line']}: {row['change']}")
    total = {"killed": 0, "timeout": 0, "survived": 0}
    for counts in functions.values():
        counts["total"] = counts["killed"] + counts["timeout"] + counts["survived"]
        counts["score"] = round((counts["killed"] + counts["timeout"]) / counts["total"], 4)
        for key in total:
            total[key] += counts[key]
    total["total"] = sum(total.values())
    total["score"] = round((total["killed"] + total["timeout"]) / total["total"], 4) if total["total"] else None
    return {"module": str(MODULE), "tests": TESTS, "note": note, "seconds": round(seconds), "all": total,
            "functions": functions, "mutants": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path,
                        default=Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / "medddpm-mutation" / "ndhwc")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--show", type=int, metavar="N", help="print mutant N as a diff and exit")
    parser.add_argument("--only", type=lambda s: [int(n) for n in s.split(",")], metavar="N,M",
                        help="run only these mutants (with --survivors: only these of the survivors)")
    parser.add_argument("--sample", type=int, metavar="K", help="run K mutants drawn with --seed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=0,
                        help="seconds after which a mutant counts as killed (default: 3 x the unmutated run + 30)")
    parser.add_argument("--survivors", action="store_true",
                        help="run again only the last run's survivors, against the current tests (the other results "
                             "are kept)")
    args = parser.parse_args()
    original = (REPO / MODULE).read_text()
    every = mutants(original)
    if args.show is not None:
        print(f"{args.show}: {every[args.show - 1].function}, line {every[args.show - 1].line}: "
              f"{every[args.show - 1].change}")
        print(diff(original, every[args.show - 1]), end="")
        return 0
    if args.list:
        for m in every:
            print(f"{m.number}: {m.function}, line {m.line}: {m.change}")
        return 0
    chosen, kept, note = every, [], "every mutant"
    if args.survivors:
        last = json.loads((args.workdir / "score.json").read_text())
        survivors = {r["number"] for r in last["mutants"] if r["status"] == "survived"}
        if args.only:
            survivors &= set(args.only)
        kept = [r for r in last["mutants"] if r["number"] not in survivors]
        chosen, note = [m for m in every if m.number in survivors], last["note"] + "; survivors run again"
        shutil.copytree(REPO / "tests", args.workdir / "tests", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        if args.only:
            chosen, note = [m for m in every if m.number in args.only], f"mutants {args.only}"
        elif args.sample:
            chosen = sorted(random.Random(args.seed).sample(every, args.sample), key=lambda m: m.number)
            note = f"{args.sample} of {len(every)} drawn with seed {args.seed}"
        prepare(args.workdir)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ.setdefault("HYPOTHESIS_EXAMPLES", "15")
    import torch  # noqa: F401 (imported once, before the children fork)
    import triton  # noqa: F401

    logs = args.workdir / "logs"
    logs.mkdir(exist_ok=True)
    status, baseline = run_tests(args.workdir, original, 600, logs / "unmutated.log")
    if status != "survived":
        print(f"ndhwc: the tests fail on the unmutated module ({logs / 'unmutated.log'})")
        return 1
    timeout = args.timeout or 3 * baseline + 30
    print(f"ndhwc: unmutated run {baseline:.0f} s; {len(chosen)} mutants ({note}), timeout {timeout:.0f} s",
          flush=True)
    started = time.monotonic()
    results = list(kept)
    for m in chosen:
        outcome, seconds = run_tests(args.workdir, m.source, timeout, logs / f"{m.number}.log")
        results.append({"number": m.number, "function": m.function, "line": m.line, "change": m.change,
                        "status": outcome, "seconds": round(seconds, 1)})
        print(f"  {m.number}: {m.function}, line {m.line}: {m.change}: {outcome} ({seconds:.0f} s)", flush=True)
        # after every mutant, so that an interrupted run keeps what it measured (its note says how far it got)
        results.sort(key=lambda r: r["number"])
        partial = f"{note} (stopped after {len(results) - len(kept)} of {len(chosen)})"
        (args.workdir / "score.json").write_text(json.dumps(
            report(results, time.monotonic() - started, partial), indent=2))
    (args.workdir / MODULE).write_text(original)
    score = report(results, time.monotonic() - started, note)
    (args.workdir / "score.json").write_text(json.dumps(score, indent=2))
    for function, counts in score["functions"].items():
        print(f"ndhwc: {function}: {counts['killed'] + counts['timeout']} of {counts['total']} killed "
              f"({counts['score']:.1%}; {counts['timeout']} by a timeout), {counts['survived']} survived")
        for name in counts["surviving"]:
            print(f"    {name}")
    total = score["all"]
    print(f"ndhwc: all: {total['killed'] + total['timeout']} of {total['total']} killed ({total['score']:.1%}) "
          f"[{score['seconds'] / 60:.1f} min]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
