"""Mutants of the module-level tables that mutmut leaves alone (it mutates function bodies only), tested in-process:
each kernel-class pattern of profiling/kernels.py removed in turn, and each unit factor of profiling/units.py changed
by a factor 1000 in turn, with the table tests run against every mutant. Run by `python3 tests/mutation.py tables`;
this module only defines the mutants and runs them (it holds no tests)."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KERNEL_TESTS = ["tests/test_kernel_classes.py::test_each_real_kernel_name_gets_the_decided_class",
                "tests/test_kernel_classes.py::test_rules_without_a_real_example",
                "tests/test_profiling_parsers.py::test_classify_and_precision"]
UNIT_TESTS = ["tests/test_profiling_units.py::test_every_printed_unit_converts_to_its_base_unit",
              "tests/test_profiling_units.py::test_ncu_raw_reader_converts_generated_pages",
              "tests/test_profiling_parsers.py::test_ncu_raw_units_and_separators"]


def killed(tests: list[str]) -> bool:
    """True when the tests fail (the mutant is caught)."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = pytest.main(["-x", "-q", "-n", "0", "-p", "no:cacheprovider", "--rootdir", str(REPO), *tests])
    return code == pytest.ExitCode.TESTS_FAILED


def kernel_pattern_mutants():
    from profiling import kernels

    original = kernels._COMPILED
    for index, (name, patterns) in enumerate(original):
        for k, pattern in enumerate(patterns):
            mutated = list(original)
            mutated[index] = (name, patterns[:k] + patterns[k + 1:])
            kernels._COMPILED = mutated
            try:
                yield f"kernels: {name} without {pattern.pattern!r}", killed(KERNEL_TESTS)
            finally:
                kernels._COMPILED = original


def unit_factor_mutants():
    from profiling import units

    for table_name in ("_TIME_NS", "_PREFIX"):
        table = getattr(units, table_name)
        for key in list(table):
            value = table[key]
            table[key] = value * 1000
            try:
                yield f"units: {table_name}[{key!r}] x 1000", killed(UNIT_TESTS)
            finally:
                table[key] = value


def main() -> dict:
    sys.path[:0] = [str(REPO / "workflow" / "scripts"), str(REPO / "tests")]
    results = {"profiling/kernels.py (patterns)": list(kernel_pattern_mutants()),
               "profiling/units.py (factors)": list(unit_factor_mutants())}
    for module, rows in results.items():
        caught = sum(k for _, k in rows)
        print(f"tables: {module}: {caught} of {len(rows)} killed ({caught / len(rows):.1%})")
        for name, k in rows:
            if not k:
                print(f"    {name}")
    return results


if __name__ == "__main__":
    main()
