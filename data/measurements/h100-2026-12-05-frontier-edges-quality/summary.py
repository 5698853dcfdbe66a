"""Rebuilds summary.md from this record's quality study runs with the workflow's own code (the study_summary job's
reporting.study_markdown): the runs' numbers, the quality claim's verdict, and frontier_edges's outcome beyond it.

    PYTHONPATH=workflow/scripts python3 data/measurements/h100-2026-12-05-frontier-edges-quality/summary.py
"""

from pathlib import Path

from reporting.study_markdown import markdown_of_files

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

if __name__ == "__main__":
    runs = sorted((HERE / "results" / "wholehead" / "h100" / "study").glob("*/seed*/*"))
    (HERE / "summary.md").write_text(markdown_of_files(runs, "h100", REPO / "data" / "paper_claims.yaml"))
