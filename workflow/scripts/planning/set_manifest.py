"""The checksums of a reference set, ``data/reference/<workload>/<label>/manifest.sha256``: every file of the set with
its sha256, in sha256sum's format (``sha256sum -c manifest.sha256`` in the set's folder checks it).

`export` writes one with every set (reporting.export); the sets shipped in this repository carry one too. Every set
that a run reads must have one, and every file read from it must be listed there with that digest: a file cut at a
row boundary, or a value edited by hand, still parses, and would otherwise be drawn as if it had been measured
(`check_sets`, before the collector reads anything). After changing a shipped set on purpose, write its manifest
again:

    PYTHONPATH=workflow/scripts python3 -m planning.set_manifest data/reference/wholehead/h200
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from jobio.errors import ExpectedError

MANIFEST = "manifest.sha256"
SEAL_COMMAND = "PYTHONPATH=workflow/scripts python3 -m planning.set_manifest"


class SetManifestError(ExpectedError):
    """A reference set without its manifest.sha256, or a file of it unlike the manifest; the message names the file
    and the fix."""


def manifest_text(files: dict[Path, bytes]) -> str:
    """sha256sum's lines for `files` (relative path -> content), sorted by path."""
    lines = [f"{hashlib.sha256(data).hexdigest()}  {path.as_posix()}" for path, data in sorted(files.items())]
    return "\n".join(lines) + "\n"


def seal(folder: str | Path) -> Path:
    """Write the manifest of the set in `folder` (every file but the manifest itself); returns its path."""
    folder = Path(folder)
    files = {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*"))
             if path.is_file() and path.name != MANIFEST}
    out = folder / MANIFEST
    out.write_text(manifest_text(files))
    return out


def set_folder(path: str | Path) -> Path | None:
    """The folder of the reference set holding `path` (data/reference/<workload>/<label>), or None."""
    parts = Path(path).parts
    for at in range(len(parts) - 1, 0, -1):
        if parts[at] == "reference" and parts[at - 1] == "data" and len(parts) > at + 2:
            return Path(*parts[: at + 3])
    return None


def _restore(folder: Path) -> str:
    return (f"fix: restore the set from where it came from (git checkout -- {folder} for a set committed here, or copy "
            f"the exported set again); (cd {folder} && sha256sum -c {MANIFEST}) lists every damaged file")


def missing_manifest(folder: str | Path) -> str | None:
    """Why the set in `folder` cannot be checked (no manifest.sha256), with the fix; None when it has one."""
    folder = Path(folder)
    if (folder / MANIFEST).is_file():
        return None
    return (f"{folder}/ has no {MANIFEST}, so no file of it can be checked against what was exported (every set "
            f"the export target writes has one); fix: copy the exported set again with its {MANIFEST}, or, for a set "
            f"you have checked yourself, write one: {SEAL_COMMAND} {folder}")


def _listed(folder: Path) -> dict[str, str]:
    manifest = folder / MANIFEST
    listed = {}
    for number, line in enumerate(manifest.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        digest, _, name = line.partition("  ")
        if not name.strip() or len(digest) != 64:
            raise SetManifestError(f"{manifest}: line {number} is not '<sha256>  <file>'; fix: copy the set again "
                                   f"with its {MANIFEST} (or write it again: {SEAL_COMMAND} {folder})")
        listed[name.strip()] = digest.lower()
    return listed


def check_sets(paths: Iterable[str | Path]) -> None:
    """Every reference set that `paths` (files a job reads) belong to: its manifest.sha256 is there, every file it
    lists is there with that sha256, and every one of `paths` is listed. SetManifestError names the first problem."""
    by_folder: dict[Path, list[Path]] = {}
    for path in map(Path, paths):
        folder = set_folder(path)
        if folder is not None:
            by_folder.setdefault(folder, []).append(path)
    for folder, read in by_folder.items():
        problem = missing_manifest(folder)
        if problem:
            raise SetManifestError(problem)
        listed = _listed(folder)
        for name, digest in listed.items():
            path = folder / name
            if not path.is_file():
                raise SetManifestError(f"{path}: listed in {folder / MANIFEST} but missing; {_restore(folder)}")
            if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                raise SetManifestError(f"{path}: its sha256 differs from the one in {folder / MANIFEST} (damaged, "
                                       f"cut short or edited since the export); {_restore(folder)}")
        for path in read:
            if path.name != MANIFEST and path.relative_to(folder).as_posix() not in listed:
                raise SetManifestError(f"{path}: not listed in {folder / MANIFEST} (added or renamed since the "
                                       f"export); {_restore(folder)}")


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(f"usage: {SEAL_COMMAND} data/reference/<workload>/<label> ...", file=sys.stderr)
        return 2
    for folder in argv:
        if not Path(folder).is_dir():
            print(f"error: {folder} is not a folder", file=sys.stderr)
            return 1
        print(f"wrote {seal(folder)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
