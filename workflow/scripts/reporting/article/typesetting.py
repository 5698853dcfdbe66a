"""The article's typesetting: its text as Typst's pieces (text, code, strong), each registered figure and table as
the layout (workflow/report/article.typ) shows it (a table with the columns, headers and number format its output
module declares, at the largest legible size that fits the page), and the PDF, compiled by Typst.

Typst comes from the `typst` wheel on PyPI (no TeX installation; the compiler and its fonts inside the wheel). Only
fonts that ship inside Typst are used and the document carries no date, so equal blocks give a byte-identical PDF.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..prose import table_notes
from ..registry import Output

TEXT_WIDTH_CM = 17.0  # A4 less 2 cm margins
PORTRAIT_PT = TEXT_WIDTH_CM / 2.54 * 72
LANDSCAPE_PT = (29.7 - 4) / 2.54 * 72
# A figure and its caption fit the page's text height (A4 less the 2.2 and 2.4 cm margins) with the room a float
# takes above and below it: the caption's lines at 8.5 pt (about 125 characters each, 0.42 cm apart) are taken from it.
FIGURE_ROOM_CM = 29.7 - 2.2 - 2.4 - 1.2
CAPTION_CHARS_PER_LINE, CAPTION_LINE_CM = 125, 0.42
SMALLEST_PRINTED_PT = 6.0  # no text of a figure or table is printed smaller (tests/test_article.py measures it)
# Columns that tag a table's rows (the label's device, origin and date, said in tab01): a table that declares no
# ARTICLE_COLUMNS shows every column but these.
TAGS = ("origin", "device", "date")


# -- text pieces ----------------------------------------------------------------------------------------------------
def pieces(text: str) -> list[dict]:
    """A paragraph as {text}, {code} and {strong} pieces: ``literal`` and `code` become code, **strong** bold."""
    out = []
    # re.split interleaves the text with the three groups: k % 4 == 0 is text, 1 and 2 code, 3 strong.
    for k, part in enumerate(re.split(r"``(.+?)``|`([^`]+)`|\*\*(.+?)\*\*", text)):
        if part:
            out.append({"text": part} if k % 4 == 0 else {"strong": part} if k % 4 == 3 else {"code": part})
    return out


def paragraphs(text: str) -> list[list[dict]]:
    """Blank-line separated paragraphs (lines joined), as pieces."""
    return [pieces(" ".join(block.split())) for block in re.split(r"\n\s*\n", text.strip()) if block.strip()]


def caption(output: Output, root: Path) -> list[dict]:
    return [piece for para in paragraphs((root / output.caption).read_text()) for piece in para + [{"text": " "}]][:-1]


# -- figures and tables ---------------------------------------------------------------------------------------------
def pdf_size(path: Path) -> tuple[float, float]:
    """Width and height (points) of a one-page PDF, from its MediaBox."""
    match = re.search(rb"/MediaBox\s*\[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]", path.read_bytes())
    if match is None:
        raise ValueError(f"{path}: no MediaBox (not a PDF page)")
    x0, y0, x1, y1 = map(float, match.groups())
    return x1 - x0, y1 - y0


def figure_width_cm(width: float, height: float, caption_pieces: list[dict]) -> float:
    """The width the article sets a figure of `width` x `height` (any one unit) at: the text width, or less where the
    figure would not fit the page's height beside its caption."""
    chars = len("".join(next(iter(piece.values())) for piece in caption_pieces)) + 20  # and the bold id before it
    lines = -(-chars // CAPTION_CHARS_PER_LINE)
    room = FIGURE_ROOM_CM - lines * CAPTION_LINE_CM
    return round(min(TEXT_WIDTH_CM, room * width / height), 2)


def print_scale(output: Output, root: Path, width_in: float, height_in: float) -> float:
    """How much the article scales a figure drawn `width_in` x `height_in` inches: its printed size over its own."""
    return figure_width_cm(width_in, height_in, caption(output, root)) / (width_in * 2.54)


def figure_item(output: Output, root: Path) -> dict:
    path = output.files_out()["pdf"]
    width, height = pdf_size(root / path)
    pieces = caption(output, root)
    return {"kind": "figure", "id": output.id, "path": "/" + path, "caption": pieces,
            "width_cm": figure_width_cm(width, height, pieces)}


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_INTEGER = re.compile(r"[-+]?\d+")
SI_PREFIXES = {3: "k", 6: "M", 9: "G", 12: "T"}


@dataclass(frozen=True)
class ColumnFormat:
    """How the article writes one column's numbers, the same way in every row of a hardware label (rows of another
    label are another workload, often of other magnitudes): integers with thousands separators; other numbers with one
    number of decimals (three significant digits at the median), over a factor of a thousand or more (named after the
    header: "(M)") where they reach 100,000, or all in scientific notation where they span three decades or more;
    percentages with one decimal."""

    decimals: int | None = None  # None: integers as written, with separators
    power: int = 0  # the values are divided by 10**power (an SI prefix after the header)
    scientific: bool = False

    @classmethod
    def of(cls, values: list[str], percent: bool = False) -> ColumnFormat:
        numbers = [float(v) for v in values if _NUMBER.fullmatch(v)]
        if percent:
            return cls(decimals=1)
        if all(_INTEGER.fullmatch(v) for v in values if _NUMBER.fullmatch(v)):
            return cls()
        sizes = sorted(abs(n) for n in numbers if n != 0 and math.isfinite(n))
        if not sizes:
            return cls(decimals=1)
        median = sizes[len(sizes) // 2]
        if sizes[-1] / sizes[0] >= 1e3 or sizes[-1] < 1e-3:
            return cls(scientific=True)
        power = 3 * int(math.log10(median) // 3) if sizes[-1] >= 1e5 else 0
        median /= 10 ** power
        return cls(decimals=min(4, max(0, 2 - math.floor(math.log10(median)))), power=power)

    @property
    def suffix(self) -> str:
        return f" ({SI_PREFIXES.get(self.power, f'1e{self.power}')})" if self.power else ""

    def __call__(self, text: str, percent: bool = False) -> str:
        if not _NUMBER.fullmatch(text):
            return text
        value = float(text) * (100 if percent else 1)
        if self.scientific:
            mantissa, exponent = f"{value:.2e}".split("e")
            return f"{mantissa}e{int(exponent)}"
        if self.decimals is None:
            return f"{int(value):,}"
        return f"{value / 10 ** self.power:,.{self.decimals}f}"


def cell(text: str, percent: bool = False) -> str:
    """One CSV value as the article shows it on its own (a column's values: ColumnFormat)."""
    return ColumnFormat.of([text], percent)(text, percent)


def _needs(header: list[str], rows: list[list[str]], wrap: float = 36.0) -> list[float]:
    """Characters each column needs: its longest header word (bold: a tenth wider) or its longest value, long texts
    wrapping at about `wrap` (variant names after an underscore)."""
    return [max(3.0, min(wrap, max([1.1 * max(map(len, h.split(" ")), default=0)]
                                   + [len(r[k].replace("\u200b", "")) for r in rows])))
            for k, h in enumerate(header)]


def _column_pt(header: list[str], rows: list[list[str]], size: float, wrap: float = 36.0) -> list[float]:
    """About how wide each column set at `size` points is, its cell inset included."""
    return [need * size * 0.5 + 5 for need in _needs(header, rows, wrap)]


def _layout(header: list[str], rows: list[list[str]]) -> tuple[float, bool, float]:
    """Font size, orientation and wrap width: the largest legible size at which the table fits a portrait page, its
    long texts wrapping shorter first; else landscape."""
    for landscape, width in ((False, PORTRAIT_PT), (True, LANDSCAPE_PT)):
        for size in (8.5, 8.0, 7.5, 7.0):
            for wrap in (36.0, 24.0, 18.0):
                if sum(_column_pt(header, rows, size, wrap)) <= width:
                    return size, landscape, wrap
    return 7.0, True, 18.0


def glued(header: str) -> str:
    """A header whose short words (a unit, "%", "SD", at most three characters) stay on the line of the word before
    them: "compile s" never breaks."""
    words = header.split(" ")
    out = words[:1]
    for word in words[1:]:
        if len(word) <= 3:
            out[-1] += "\u00a0" + word
        else:
            out.append(word)
    return " ".join(out)


@dataclass(frozen=True)
class TableView:
    """How the article shows a table, as its output module declares it (reporting/outputs/__init__.py): the columns
    with their headers (None: every column but the row tags), those shown as percentages, and those shown only on the
    first of the rows that share the first one's value."""

    columns: list[tuple[str, str]] | None = None
    percent: frozenset[str] = frozenset()
    once: tuple[str, ...] = ()
    format_by: tuple[str, ...] = ()  # columns whose values split a number column's formats further (a unit)

    @classmethod
    def of(cls, output: Output) -> TableView:
        module = importlib.import_module(output.module)
        return cls(getattr(module, "ARTICLE_COLUMNS", None), frozenset(getattr(module, "ARTICLE_PERCENT_COLUMNS", ())),
                   tuple(getattr(module, "ARTICLE_SHOWN_ONCE", ())), tuple(getattr(module, "ARTICLE_FORMAT_BY", ())))


def article_frame(view: TableView, frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The columns the article shows, with their headers."""
    if view.columns is None:
        keep = [c for c in frame.columns if not ("gpu" in frame and c in TAGS)]
        return frame[keep], [c.replace("_", " ") for c in keep]
    chosen = [(c, h) for c, h in view.columns if c in frame.columns]
    # A column the article shows that holds nothing in any row says nothing.
    chosen = [(c, h) for c, h in chosen if frame[c].ne("").any()]
    frame = frame[[c for c, _ in chosen]].copy()
    if view.once:
        first = view.once[0]
        repeated = frame[first].duplicated() if first in frame else pd.Series(False, index=frame.index)
        for column in view.once:
            if column in frame:
                frame.loc[repeated, column] = ""
    return frame, [h for _, h in chosen]


def formatted_rows(frame: pd.DataFrame, numeric: list[bool], percent: frozenset[str],
                   labels: pd.Series) -> tuple[list[list[str]], list[str]]:
    """The cells as the article writes them (each numeric column in one ColumnFormat per hardware label, `labels`
    giving each row's: its label, and its unit where the table's rows mix units), and each column's header suffix (the
    power of ten its values are shown in, where every group's format has the same one)."""
    cells = frame.copy()
    suffixes = []
    for column, is_number in zip(frame.columns, numeric):
        found = set()
        if is_number:
            for _, rows in frame[column].groupby(labels.to_numpy(), sort=False):
                shown = ColumnFormat.of(list(rows), column in percent)
                if rows.ne("").any():
                    found.add(shown.suffix)
                cells.loc[rows.index, column] = [shown(value, column in percent) for value in rows]
        suffixes.append(found.pop() if len(found) == 1 else "")
        if len(found) > 1:  # labels of other magnitudes: each value says its own power of ten
            for _, rows in frame[column].groupby(labels.to_numpy(), sort=False):
                shown = ColumnFormat.of(list(rows), column in percent)
                cells.loc[rows.index, column] = [f"{shown(v, column in percent)}{shown.suffix.strip(' ()')}" if v
                                                 else v for v in rows]
    return [[value.replace("_", "_\u200b") for value in row] for row in cells.itertuples(index=False)], suffixes


def table_item(output: Output, root: Path) -> dict:
    files = output.files_out()
    try:
        frame = pd.read_csv(root / files["csv"], dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame()
    view = TableView.of(output)
    # Each label's rows (and, where the table says so, each unit's) get their own format.
    keys = [frame[c] for c in ("gpu", *view.format_by) if c in frame]
    labels = pd.Series(list(zip(*keys)), index=frame.index) if keys else pd.Series("", index=frame.index)
    frame, header = article_frame(view, frame)
    numeric = [all(_NUMBER.fullmatch(v) is not None for v in frame[c] if v) and bool(frame[c].ne("").any())
               for c in frame.columns]
    rows, suffixes = formatted_rows(frame, numeric, view.percent, labels)
    header = [h + (" %" if not h.endswith("%") and "of" not in h else "") if c in view.percent else h
              for c, h in zip(frame.columns, header)]
    header = [h + suffix for h, suffix in zip(header, suffixes)]
    header = [glued(h) for h in header]
    size, landscape, wrap = _layout(header, rows)
    return {"kind": "table", "id": output.id, "caption": caption(output, root),
            "notes": table_notes(root / files["md"]),
            "header": header, "numeric": numeric, "rows": rows, "empty": "no rows: nothing was measured for this table",
            "size": size, "landscape": landscape,
            "widths": [round(w, 1) for w in _column_pt(header, rows, size, wrap)]}


def item(output: Output, root: Path) -> dict:
    return figure_item(output, root) if output.kind == "figure" else table_item(output, root)


# -- the PDF --------------------------------------------------------------------------------------------------------
def compile_pdf(data: dict, template: str | Path, root: str | Path, out: str | Path) -> None:
    """Write the PDF (`out`) of the article's `data` (reporting.article.compose.article_data) with Typst; `root` is
    where the figures' paths start."""
    import typst

    fonts = typst.Fonts(include_system_fonts=False)
    compiler = typst.Compiler(str(template), root=str(Path(root).resolve()), font_paths=fonts,
                              ignore_system_fonts=True)
    pdf = compiler.compile(format="pdf", sys_inputs={"data": json.dumps(data, sort_keys=True)})
    Path(out).write_bytes(pdf)
