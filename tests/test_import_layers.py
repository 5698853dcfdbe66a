"""The library forms layers, each importing only those below it: jobio (the errors a user can fix, a job's run) <
measurement (timing, devices, provenance) < medddpm (the workload) < profiling < planning (the layout, the plan, the
config checks) < reporting (tables and figures). An upward import would put analysis code on the measurement floor, where the GPU
jobs run. Inside a layer no module imports itself back through others (a cycle makes the import order decide what
exists when), and the job scripts at the top of workflow/scripts are leaves that nothing imports."""

import ast
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "workflow" / "scripts"
LAYERS = ["jobio", "measurement", "medddpm", "profiling", "planning", "reporting"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SCRIPTS).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(SCRIPTS.rglob("*.py"))}
JOB_SCRIPTS = {name for name in MODULES if "." not in name and name not in LAYERS}


def imports_of(name: str) -> set[str]:
    """The workflow's modules that module `name` imports, at module level or inside a function (a lazy import still
    ties the two together); `from package import module` counts the module."""
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
    return {module for module in found if module in MODULES and module != name}


GRAPH = {name: imports_of(name) for name in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first search meets, each as the path that closes it."""
    state, found = {}, []

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        path.append(node)
        for neighbour in sorted(graph[node]):
            if state.get(neighbour) == "open":
                found.append(path[path.index(neighbour):] + [neighbour])
            elif neighbour not in state:
                visit(neighbour, path)
        path.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_no_layer_above_it(layer):
    above = set(LAYERS[LAYERS.index(layer) + 1:])
    mine = [name for name in MODULES if name.split(".")[0] == layer]
    assert mine, f"{layer}: no module of this layer"
    upward = {(name, target) for name in mine for target in GRAPH[name] if target.split(".")[0] in above}
    assert upward == set()


def test_no_module_imports_itself_back():
    assert cycles(GRAPH) == []


def test_the_cycle_search_finds_a_cycle_through_a_lazy_import():
    """The search on the shape the engine and the trainer once had (engine imports training at module level,
    training imports engine for a type), and on a longer ring."""
    assert cycles({"engine": {"training"}, "training": {"engine"}}) == [["engine", "training", "engine"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
    source = ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    from .engine import Placement\n\ndef f():\n    from medddpm import jobs\n")
    tree = ast.parse(source)
    names = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {"engine", "medddpm"} <= names  # the walk sees imports under TYPE_CHECKING and inside functions


def test_job_scripts_are_leaves():
    """Nothing imports a job script (a Snakemake `script:`): what two jobs share lives in a package."""
    assert JOB_SCRIPTS, "no job script found"
    importers = {(name, target) for name, targets in GRAPH.items() for target in targets if target in JOB_SCRIPTS}
    assert importers == set()
