"""The article's typesetting: its text as Typst's pieces (text, code, strong), each registered figure and table as
the layout (workflow/report/article.typ) shows it (a table with the columns, headers and number format its output
module declares, at the largest legible size that fits the page), and the PDF, compiled by Typst.

Typst comes from the `typst` wheel on PyPI (no TeX installation; the compiler and its fonts inside the wheel). Only
fonts that ship inside Typst are used and the document carries no date, so equal blocks give a byte-identical PDF.
"""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..prose import table_notes
from ..registry import Output

TEXT_WIDTH_CM = 17.0  # A4 less 2 cm margins
PORTRAIT_PT = TEXT_WIDTH_CM / 2.54 * 72
LANDSCAPE_PT = (29.7 - 4) / 2.54 * 72
FIGURE_HEIGHT_CM = 19.0  # the tallest figure that leaves room for its caption and some text on a page
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


def figure_item(output: Output, root: Path) -> dict:
    path = output.files_out()["pdf"]
    width, height = pdf_size(root / path)
    return {"kind": "figure", "id": output.id, "path": "/" + path, "caption": caption(output, root),
            "width_cm": round(min(TEXT_WIDTH_CM, FIGURE_HEIGHT_CM * width / height), 2)}


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def cell(text: str, percent: bool = False) -> str:
    """A CSV value as the article shows it: a fraction as a percentage where `percent`, floats to 4 significant
    digits (integers and version strings such as 13.0 as written)."""
    if not _NUMBER.fullmatch(text):
        return text
    if percent:
        return f"{100 * float(text):.1f}"
    if ("." in text or "e" in text.lower()) and len(re.sub(r"[^0-9]", "", text.lower().partition("e")[0])
                                                    .strip("0")) > 4:
        value = float(text)
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3g}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")
        return f"{value:.4g}"
    return text


def _needs(header: list[str], rows: list[list[str]]) -> list[float]:
    """Characters each column needs: its longest header word (bold: a tenth wider) or its longest value, long texts
    wrapping at about 36."""
    return [max(3.0, min(36.0, max([1.1 * max(map(len, h.split()), default=0)]
                                   + [len(r[k].replace("\u200b", "")) for r in rows])))
            for k, h in enumerate(header)]


def _column_pt(header: list[str], rows: list[list[str]], size: float) -> list[float]:
    """About how wide each column set at `size` points is, its cell inset included."""
    return [need * size * 0.5 + 5 for need in _needs(header, rows)]


def _layout(header: list[str], rows: list[list[str]]) -> tuple[float, bool]:
    """Font size and orientation: the largest legible size at which the table fits a portrait page, else landscape."""
    for landscape, width in ((False, PORTRAIT_PT), (True, LANDSCAPE_PT)):
        for size in (8.5, 8.0, 7.5, 7.0):
            if sum(_column_pt(header, rows, size)) <= width:
                return size, landscape
    return 7.0, True


@dataclass(frozen=True)
class TableView:
    """How the article shows a table, as its output module declares it (reporting/outputs/__init__.py): the columns
    with their headers (None: every column but the row tags), those shown as percentages, and those shown only on the
    first of the rows that share the first one's value."""

    columns: list[tuple[str, str]] | None = None
    percent: frozenset[str] = frozenset()
    once: tuple[str, ...] = ()

    @classmethod
    def of(cls, output: Output) -> TableView:
        module = importlib.import_module(output.module)
        return cls(getattr(module, "ARTICLE_COLUMNS", None), frozenset(getattr(module, "ARTICLE_PERCENT_COLUMNS", ())),
                   tuple(getattr(module, "ARTICLE_SHOWN_ONCE", ())))


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


def table_item(output: Output, root: Path) -> dict:
    files = output.files_out()
    try:
        frame = pd.read_csv(root / files["csv"], dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame()
    view = TableView.of(output)
    frame, header = article_frame(view, frame)
    numeric = [all(_NUMBER.fullmatch(v) is not None for v in frame[c] if v) and bool(frame[c].ne("").any())
               for c in frame.columns]
    rows = [[cell(value, column in view.percent).replace("_", "_\u200b") for value, column in zip(row, frame.columns)]
            for row in frame.itertuples(index=False)]
    header = [h + (" %" if not h.endswith("%") and "of" not in h else "") if c in view.percent else h
              for c, h in zip(frame.columns, header)]
    size, landscape = _layout(header, rows)
    return {"kind": "table", "id": output.id, "caption": caption(output, root),
            "notes": table_notes(root / files["md"]),
            "header": header, "numeric": numeric, "rows": rows, "empty": "no rows: nothing was measured for this table",
            "size": size, "landscape": landscape, "widths": [round(w, 1) for w in _column_pt(header, rows, size)]}


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
