"""The metrics that Nsight Compute knows on each GPU chip, as ncu itself lists them: one file per chip,
``data/ncu-metrics/<chip>.txt.gz`` (a comment line naming the ncu that wrote it, then one full metric name per line;
gzip, as ncu lists 127,000 to 146,000 full names per chip, 10 MB of text, 0.4 MB compressed).

A metric set names metrics by their full names (``sm__cycles_elapsed.max``); one that a chip lacks stops that chip's
profile (ncu refuses an unknown name, or 2025.3.1 drops it silently). The lists are written on a machine with ncu,
offline (``--chip`` needs no such GPU), and shipped; the test of the per-architecture sets and the plan's check read
them, so a set is checked for every chip without its GPU:

    PYTHONPATH=workflow/scripts python3 -m profiling.metric_lists --out data/ncu-metrics

Volta (gv100) is listed only by an ncu that still supports it: ncu 2025 refuses the chip, and its list is then left
out (said on the terminal). Nothing here invents a list.
"""

from __future__ import annotations

import argparse
import gzip
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from .ncu import locate_ncu

FOLDER = Path(__file__).resolve().parents[3] / "data" / "ncu-metrics"
# The chip ncu names for each compute architecture of config.yaml's hardware labels (H100 and H200 share gh100).
CHIPS = {"sm70": "gv100", "sm80": "ga100", "sm90": "gh100"}
# A full metric name: unit__counter, then its roll-up and sub-metric suffixes (".sum", ".avg.pct_of_peak_...").
METRIC = re.compile(r"^[a-z][a-z0-9_]*__[a-z0-9_]+(?:\.[a-z0-9_]+)*$")
# Listed for every chip this workflow profiles: a list without it is not a metric list.
ALWAYS = "gpu__time_duration.sum"
COMMAND = "PYTHONPATH=workflow/scripts python3 -m profiling.metric_lists --out data/ncu-metrics"


def query_command(ncu: str, chip: str) -> list[str]:
    """ncu's listing of every metric of `chip` by its full names (base names with every suffix)."""
    return [ncu, "--query-metrics", "--query-metrics-mode", "all", "--chip", chip]


def parse_listing(text: str) -> list[str]:
    """The full metric names of ncu's listing, sorted and each once: the first word of each line that is one (the
    table's header, rules and descriptions are not)."""
    names = {line.split()[0] for line in text.splitlines() if line.split() and METRIC.match(line.split()[0])}
    return sorted(names)


def list_path(chip: str, folder: str | Path | None = None) -> Path:
    """Where the list of `chip` lies (default: the shipped folder, FOLDER)."""
    return Path(folder or FOLDER) / f"{chip}.txt.gz"


def write_list(path: str | Path, lines: Iterable[str]) -> None:
    """A list file, gzip-compressed with no time stamp (the same names give the same bytes)."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as packed:
        packed.write("".join(f"{line}\n" for line in lines).encode())


def read_list(path: str | Path) -> set[str]:
    """The metric names of a list file (comment lines left out)."""
    text = gzip.decompress(Path(path).read_bytes()).decode()
    return {line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")}


def shipped_list(architecture: str, folder: str | Path | None = None) -> tuple[str | None, set[str] | None]:
    """(chip, its metric names) for a compute architecture; names None where no list of that chip is shipped."""
    chip = CHIPS.get(architecture)
    if chip is None or not list_path(chip, folder).is_file():
        return chip, None
    return chip, read_list(list_path(chip, folder))


def missing(metrics: Iterable[str], known: set[str]) -> list[str]:
    """The metrics that the chip's list does not hold, in the set's order."""
    return [metric for metric in metrics if metric not in known]


def _version(ncu: str) -> str:
    done = subprocess.run([ncu, "--version"], capture_output=True, text=True, check=False)
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else "version not reported"


def write_lists(ncu: str, out: str | Path, chips: Sequence[str]) -> dict[str, str]:
    """Write `out`/<chip>.txt.gz for every chip this ncu lists; returns what happened to each chip (written, or why
    not). A listing without gpu__time_duration.sum is not taken for a list: ncu's output is kept as
    <chip>.query.txt, to be read."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    version, said = _version(ncu), {}
    for chip in chips:
        command = query_command(ncu, chip)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        names = parse_listing(done.stdout)
        if done.returncode != 0 or ALWAYS not in names:
            (out / f"{chip}.query.txt").write_text(f"$ {' '.join(command)}\n(exit {done.returncode})\n"
                                                   f"{done.stdout}{done.stderr}")
            first = (done.stderr or done.stdout).strip().splitlines()[:1] or ["(no output)"]
            said[chip] = (f"not written: ncu exited {done.returncode} ({first[0]})" if done.returncode else
                          f"not written: its listing holds no {ALWAYS}") + f"; ncu's output: {out / chip}.query.txt"
            continue
        write_list(list_path(chip, out), [f"# {version}: {' '.join(['ncu', *command[1:]])} ({len(names)} metrics)",
                                          *names])
        said[chip] = f"{len(names)} metrics in {list_path(chip, out)}"
    return said


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="Write the metric list of every chip this workflow profiles.")
    parser.add_argument("--ncu", default=None, help="the ncu binary (default: on PATH, else the newest "
                                                    "/opt/nvidia/nsight-compute/<version>/ncu)")
    parser.add_argument("--out", default=str(FOLDER), help="folder of the lists (default: data/ncu-metrics)")
    parser.add_argument("--chips", nargs="+", default=sorted(set(CHIPS.values())))
    args = parser.parse_args(argv)
    ncu = args.ncu or locate_ncu()
    if not ncu:
        print("error: ncu not found: put Nsight Compute on PATH or pass --ncu", file=sys.stderr)
        return 1
    said = write_lists(ncu, args.out, args.chips)
    for chip, what in said.items():
        print(f"{chip}: {what}")
    return 0 if any(what.split()[0].isdigit() for what in said.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
