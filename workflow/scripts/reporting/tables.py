"""Tables written as CSV, LaTeX, Markdown and HTML from one DataFrame, with numbered notes under the LaTeX, Markdown
and HTML. The HTML is what the workflow's HTML report (`snakemake --report`) shows inline."""

from __future__ import annotations

import html as _html
from pathlib import Path

import pandas as pd


def write_table(frame: pd.DataFrame, csv: str | Path, tex: str | Path, md: str | Path, caption: str,
                notes: list[str] = (), float_format: str = "{:.4g}", html: str | Path | None = None) -> None:
    frame.to_csv(csv, index=False)
    formatted = frame.copy()
    for column in formatted.columns:
        if pd.api.types.is_float_dtype(formatted[column]):
            formatted[column] = formatted[column].map(lambda v: "" if pd.isna(v) else float_format.format(v))
        elif pd.api.types.is_integer_dtype(formatted[column]) and formatted[column].hasnans:  # nullable (Int64)
            formatted[column] = formatted[column].map(lambda v: "" if pd.isna(v) else str(v))
    latex = formatted.to_latex(index=False, caption=caption, escape=True, column_format="l" * len(frame.columns))
    if notes:
        escaped = [_latex_escape(text) for text in notes]
        block = "\\par\\footnotesize\n" + "\\\\\n".join(f"[{k}] {text}" for k, text in enumerate(escaped, 1)) + "\n"
        latex = latex.replace("\\end{table}", block + "\\end{table}")
    Path(tex).write_text(latex)
    lines = [caption, "", formatted.to_markdown(index=False)]
    if notes:
        lines += ["", *[f"[{k}] {text}  " for k, text in enumerate(notes, 1)]]
    Path(md).write_text("\n".join(lines) + "\n")
    if html is not None:
        Path(html).write_text(html_table(formatted, caption, notes))


# Self-contained (the report embeds each file as a data URI and shows it in a frame): no scripts, no external files.
_STYLE = """body { font: 13px/1.4 system-ui, sans-serif; margin: 16px; color: #1e293b; background: #fff; }
p.caption { font-weight: 600; max-width: 70em; }
table { border-collapse: collapse; }
th, td { border-bottom: 1px solid #e2e8f0; padding: 3px 8px; text-align: left; vertical-align: top;
         white-space: nowrap; }
td.long { white-space: normal; min-width: 18em; max-width: 40em; }
th { background: #f1f5f9; position: sticky; top: 0; }
tr:hover td { background: #f8fafc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
ol.notes { font-size: 12px; color: #475569; max-width: 70em; }"""


def html_table(formatted: pd.DataFrame, caption: str, notes: list[str] = ()) -> str:
    """A standalone HTML page: the caption, the table (cells as already formatted), the numbered notes."""
    numeric = [pd.api.types.is_numeric_dtype(formatted[column]) or _all_numbers(formatted[column])
               for column in formatted.columns]
    head = "".join(f"<th>{_html.escape(str(column))}</th>" for column in formatted.columns)
    rows = []
    for values in formatted.itertuples(index=False):
        cells = []
        for value, is_number in zip(values, numeric):
            text = "" if _missing(value) else _html.escape(str(value))
            kind = "num" if is_number else "long" if len(text) > 40 else ""  # long text wraps, the rest does not
            cells.append(f'<td class="{kind}">{text}</td>' if kind else f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{_html.escape(caption)}</title>", f"<style>\n{_STYLE}\n</style></head><body>",
             f'<p class="caption">{_html.escape(caption)}</p>',
             f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>", *rows, "</tbody></table>"]
    if notes:
        parts += ['<ol class="notes">', *[f"<li>{_html.escape(text)}</li>" for text in notes], "</ol>"]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _missing(value) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _all_numbers(column: pd.Series) -> bool:
    """A column of formatted numbers (strings): right-aligned like a numeric one."""
    values = [str(v) for v in column if not _missing(v) and str(v) != ""]
    if not values:
        return False
    try:
        [float(v) for v in values]
    except ValueError:
        return False
    return True


_LATEX = {"\\": "\\textbackslash{}", "&": "\\&", "%": "\\%", "$": "\\$", "#": "\\#", "_": "\\_", "{": "\\{",
          "}": "\\}", "~": "\\textasciitilde{}", "^": "\\^{}"}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX.get(char, char) for char in text)
