"""Tables written as CSV, LaTeX and Markdown from one DataFrame, with numbered notes under the LaTeX and Markdown."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def write_table(frame: pd.DataFrame, csv: str | Path, tex: str | Path, md: str | Path, caption: str,
                notes: list[str] = (), float_format: str = "{:.4g}") -> None:
    frame.to_csv(csv, index=False)
    formatted = frame.copy()
    for column in formatted.columns:
        if pd.api.types.is_float_dtype(formatted[column]):
            formatted[column] = formatted[column].map(lambda v: "" if pd.isna(v) else float_format.format(v))
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


_LATEX = {"\\": "\\textbackslash{}", "&": "\\&", "%": "\\%", "$": "\\$", "#": "\\#", "_": "\\_", "{": "\\{",
          "}": "\\}", "~": "\\textasciitilde{}", "^": "\\^{}"}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX.get(char, char) for char in text)
