"""What the profilers' CSV exports share: a table that starts at a header line, possibly after notices."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable

# A UTF-8 byte-order mark, which some editors and spreadsheet programs write at the start of a CSV file: not part of
# the first header cell.
BOM = "\ufeff"


def without_bom(text: str) -> str:
    return text.removeprefix(BOM)


def rows_from_header(lines: Iterable[str], is_header: Callable[[list[str]], bool]) -> list[list[str]]:
    """Non-blank CSV rows from the first one `is_header` accepts; [] when there is none.

    Strict parsing: raises csv.Error where the text stops inside a quoted field, so a cut file does not pass.
    """
    rows = [row for row in csv.reader(lines, strict=True) if row]
    for start, row in enumerate(rows):
        if is_header(row):
            return rows[start:]
    return []


def ragged_row(rows: list[list[str]]) -> str | None:
    """'row N has K of W columns' for the first row (1-based, header = 1) not as wide as the header, or None."""
    width = len(rows[0])
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != width:
            return f"row {number} has {len(row)} of {width} columns"
    return None
