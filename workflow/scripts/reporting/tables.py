"""Tables written as CSV, LaTeX and Markdown from one DataFrame."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def write_table(frame: pd.DataFrame, csv: str | Path, tex: str | Path, md: str | Path, caption: str,
                float_format: str = "{:.4g}") -> None:
    frame.to_csv(csv, index=False)
    formatted = frame.copy()
    for column in formatted.columns:
        if pd.api.types.is_float_dtype(formatted[column]):
            formatted[column] = formatted[column].map(lambda v: "" if pd.isna(v) else float_format.format(v))
    Path(tex).write_text(
        formatted.to_latex(index=False, caption=caption, escape=True, column_format="l" * len(frame.columns))
    )
    Path(md).write_text(f"{caption}\n\n" + formatted.to_markdown(index=False) + "\n")
