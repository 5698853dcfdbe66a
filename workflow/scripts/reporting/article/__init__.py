"""The study's article, ``paper/article.pdf``: a short paper typeset from the workflow's outputs. Title and abstract
from the numbers; an introduction (the study, Med-DDPM, the question); the method (hardware and software from the
runs' provenance, the workload, the variants, how time and kernels were measured, what cannot be measured here, every
difference from upstream Med-DDPM); the results, each registered figure and table with a paragraph written from its
numbers; the paper's claims one by one with their verdict and its evidence; limitations; numbered references
(``workflow/report/references.yaml``, cited in the text as ``[@key]``).

Three parts: the article's own text (`text`), the composition of every block in its order (`compose`), and the
typesetting (`typesetting`): the layout lives in ``workflow/report/article.typ``, which is fed the blocks (headings,
paragraphs, figures, tables) as JSON. Each output's paragraph and the columns its table shows are its own module's
(reporting/outputs/<id>.py).

Inputs: the registered tables' CSVs and figures' PDFs under `root`, and the collected result tables (`collected`:
name -> parquet path; `runs` gives each run's step-time quartiles, from which a speed-up is called faster, slower or
within noise by one function, `reporting.derived.speedup_verdict`).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .compose import article_data
from .typesetting import compile_pdf


def typeset(root: str | Path, template: str | Path, settings: dict, out: str | Path,
            collected: dict[str, str | Path] | None = None, peaks: str | Path | None = None,
            references: str | Path | None = None) -> None:
    """Write the article's PDF (`out`) with Typst from the outputs under `root`."""
    peak_table = yaml.safe_load(Path(peaks).read_text()) if peaks else {}
    compile_pdf(article_data(root, settings, collected, peaks=peak_table, references=references), template, root, out)
