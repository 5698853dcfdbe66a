"""The manifest of the paper's outputs: every figure and table with its sha256 (the `paper/figures/all` target)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(paths: list[str | Path], out: str | Path) -> None:
    lines = [f"{sha256(Path(p))}  {p}" for p in sorted(map(str, paths))]
    Path(out).write_text("\n".join(lines) + "\n")


def read_manifest(path: str | Path) -> dict[str, str]:
    entries = {}
    for line in Path(path).read_text().splitlines():
        digest, name = line.split("  ", 1)
        entries[name] = digest
    return entries
