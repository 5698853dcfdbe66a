"""A label's bench files, bench.csv and bench.md: its runs through the reader every table uses (reporting.results)
against its device_rates.json (reporting.bench). Apart from reporting.bench, which the reader itself uses."""

from __future__ import annotations

import json
from pathlib import Path

from .bench import BENCH_COLUMNS, bench_markdown, bench_rows
from .results import collect


def write_bench(label: str, train: list[Path], sample: list[Path], rates_path: Path, csv: Path, md: Path,
                comparison: list[Path] = ()) -> None:
    """A label's bench.csv and bench.md: its runs through the reader every table uses (reporting.results), against
    its device_rates.json, the variants in the order of `train` (the configuration's); the speed-ups from the
    label's paired rounds (`comparison`, its comparison.json) where it has them, with their intervals."""
    tables = collect([*train, *sample, *comparison], measured_labels=[label])
    rates = json.loads(rates_path.read_text())
    order = [path.parent.name for path in train]
    bench = bench_rows(tables["runs"], {label: rates}).set_index("variant", drop=False)
    bench = bench.loc[[variant for variant in order if variant in bench.index]].reset_index(drop=True)
    bench.reindex(columns=BENCH_COLUMNS).to_csv(csv, index=False)
    provenance = json.loads(tables["hardware"].set_index("gpu").loc[label, "provenance"])
    md.write_text(bench_markdown(bench, label, rates, provenance, tables["runs"].iloc[0]))
