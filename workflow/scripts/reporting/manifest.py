"""The manifest of the paper's outputs: every figure and table with its sha256 (the `paper/figures/all` target).

The format is sha256sum's (`sha256sum -c paper/figures/all` checks it; it skips the comment lines), in two sections:
the deterministic files, byte-identical between clean runs of one configuration on one machine, then the
timing-bearing ones (reporting.registry.Output.timing), which show measured times and differ from run to run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

DETERMINISTIC = "# deterministic: byte-identical in every clean run of this configuration on this machine"
TIMING = "# timing-bearing: measured times, or shares, speed-ups and means weighted by them; they differ between runs"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(paths: list[str | Path], out: str | Path, timing: Iterable[str] = ()) -> None:
    """`paths` with their sha256, the deterministic ones first, then those in `timing` (each section sorted)."""
    timing = set(map(str, timing))
    names = sorted(map(str, paths))
    lines = [f"# {Path(out).as_posix()}: sha256 of every figure and table (sha256sum -c reads it)", DETERMINISTIC]
    lines += [f"{sha256(Path(p))}  {p}" for p in names if p not in timing]
    lines += [TIMING] + [f"{sha256(Path(p))}  {p}" for p in names if p in timing]
    Path(out).write_text("\n".join(lines) + "\n")


def read_sections(path: str | Path) -> dict[str, dict[str, str]]:
    """{"deterministic": {file: sha256}, "timing": {file: sha256}} of a manifest."""
    sections: dict[str, dict[str, str]] = {"deterministic": {}, "timing": {}}
    current = "deterministic"
    for line in Path(path).read_text().splitlines():
        if line.startswith("#"):
            current = "timing" if line == TIMING else ("deterministic" if line == DETERMINISTIC else current)
            continue
        digest, name = line.split("  ", 1)
        sections[current][name] = digest
    return sections


def read_manifest(path: str | Path) -> dict[str, str]:
    """Every file of a manifest with its sha256."""
    sections = read_sections(path)
    return {**sections["deterministic"], **sections["timing"]}
