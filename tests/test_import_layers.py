"""The library packages form layers, each importing only those below it: measurement (timing, devices,
provenance) < medddpm (the workload) < profiling < reporting (tables and figures). An upward import would put
analysis code on the measurement floor, where the GPU jobs run."""

import ast
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "workflow" / "scripts"
LAYERS = ["measurement", "medddpm", "profiling", "reporting"]


def imported_packages(package: str) -> set[str]:
    """The other library packages that any module of `package` imports (at module level or inside a function)."""
    found = set()
    for path in (SCRIPTS / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            else:
                continue
            found |= {name.split(".")[0] for name in names} & set(LAYERS) - {package}
    return found


@pytest.mark.parametrize("package", LAYERS)
def test_a_package_imports_no_layer_above_it(package):
    above = set(LAYERS[LAYERS.index(package) + 1:])
    assert imported_packages(package) & above == set()
