"""One hardware label's quality study as Markdown: the runs' numbers and the quality claim's verdict by the rule of
data/paper_claims.yaml (reporting.claims.quality_verdict). The `study_summary` job writes it, and `quality_study`
prints it; a record of a study made elsewhere rebuilds it from the record's files (`markdown_of_files`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from .claims import load_claims, quality_verdict
from .outputs.tab06_quality import COLUMNS
from .results import collect

# tab06's numbers and the wall times of every run (tab06 leaves times out: they differ between two runs).
SHOWN = ["variant", "seed", "run_s", "train_s", "sample_s_per_volume"] + [
    c for c in COLUMNS if c not in ("gpu", "variant", "seed", "origin", "device", "date", "volume_shape", "timesteps")]


def markdown(gpu: str, study: pd.DataFrame, claims: dict) -> str:
    """The summary of `gpu`'s study runs (collect's `study` table) under the claims file's quality claim."""
    claim = next(c for c in claims["claims"] if c["measure"] == "quality_unchanged")
    measured, verdict = quality_verdict(claim, gpu, study, claims.get("optimized_variants", []))
    first = study.iloc[0]
    lines = [f"# Quality study: {gpu} ({first['device']})", "",
             f"{first['volume_shape']} voxels, {int(first['parameters']):,} parameters, T = {int(first['timesteps'])}, "
             f"{int(first['optimizer_steps'])} optimizer steps per run.", "",
             study.reindex(columns=SHOWN).to_markdown(index=False, floatfmt=".4g"), "",
             f"Quality claim: **{verdict}**. {measured}", ""]
    return "\n".join(lines)


def markdown_of_files(files: Iterable, gpu: str, claims_path: str | Path) -> str:
    """The summary from the study's result files (paths in the workflow's layout, `results/<workload>/<gpu>/study/
    <variant>/seed<k>/...`)."""
    return markdown(gpu, collect(files, (), [gpu])["study"], load_claims(claims_path))
