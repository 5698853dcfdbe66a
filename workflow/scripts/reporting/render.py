"""Renders one registered output: loads the collected results it declared, calls its module's `build`, writes the
figure (PDF, PNG) or the table (CSV, LaTeX, Markdown, HTML)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .registry import BY_ID, Output
from .results import TABLES, Results
from .tables import write_table


@dataclass
class Table:
    frame: pd.DataFrame
    caption: str
    notes: list[str] = field(default_factory=list)  # numbered notes under the LaTeX and Markdown table
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)  # further CSV files, by output name


@dataclass
class Job:
    """What an output's `build` gets: the collected results, its other input files, its config sections."""

    output: Output
    results: Results
    files: dict[str, Path]
    settings: dict


def build(output_id: str, inputs: dict[str, str | Path], settings: dict | None = None):
    """The figure or Table of `output_id` from its declared inputs (bundle tables and files, by name)."""
    output = BY_ID[output_id]
    results = Results.load({name: path for name, path in inputs.items() if name in TABLES})
    files = {name: Path(inputs[name]) for name in output.files}
    module = importlib.import_module(output.module)
    if output.kind == "figure":
        from .style import apply_style  # here: a table job never loads matplotlib (0.4 s of its start-up)

        apply_style()
    made = module.build(Job(output, results, files, settings or {}))
    if output.kind == "table" and results.workloads():
        # Every table names the workload its rows were measured on (the figures do in their panel titles).
        made.caption = f"{made.caption} (workload: {', '.join(results.workloads())})"
    return made


def render(output_id: str, inputs: dict[str, str | Path], outputs: dict[str, str | Path],
           settings: dict | None = None) -> None:
    made = build(output_id, inputs, settings)
    if BY_ID[output_id].kind == "figure":
        from .style import save

        save(made, outputs["pdf"], outputs["png"])
        return
    write_table(made.frame, outputs["csv"], outputs["tex"], outputs["md"], caption=made.caption, notes=made.notes,
                html=outputs["html"])
    for name, frame in made.extra.items():
        frame.to_csv(outputs[name], index=False)
