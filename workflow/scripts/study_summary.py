"""Snakemake job: one hardware label's quality study as a Markdown summary (the runs' numbers and the quality
claim's verdict by the rule of data/paper_claims.yaml), which the target `quality_study` prints."""

from pathlib import Path

from jobio.errors import writing
from jobio.job import run_job
from reporting.claims import load_claims, quality_verdict
from reporting.outputs.tab06_quality import COLUMNS
from reporting.results import collect

snakemake: "Snakemake"  # noqa: F821 (injected by Snakemake)

# tab06's numbers and the wall times of every run (tab06 leaves times out: they differ between two runs).
SHOWN = ["variant", "seed", "run_s", "train_s", "sample_s_per_volume"] + [
    c for c in COLUMNS if c not in ("gpu", "variant", "seed", "origin", "device", "date", "volume_shape", "timesteps")]


def main() -> None:
    gpu = snakemake.wildcards.gpu
    tables = collect(snakemake.input.files, (), [gpu])
    study = tables["study"]
    claims = load_claims(snakemake.input.claims)
    claim = next(c for c in claims["claims"] if c["measure"] == "quality_unchanged")
    measured, verdict = quality_verdict(claim, gpu, study, claims.get("optimized_variants", []))
    first = study.iloc[0]
    lines = [f"# Quality study: {gpu} ({first['device']})", "",
             f"{first['volume_shape']} voxels, {int(first['parameters']):,} parameters, T = {int(first['timesteps'])}, "
             f"{int(first['optimizer_steps'])} optimizer steps per run.", "",
             study.reindex(columns=SHOWN).to_markdown(index=False, floatfmt=".4g"), "",
             f"Quality claim: **{verdict}**. {measured}", ""]
    with writing(snakemake.output[0]):
        Path(snakemake.output[0]).write_text("\n".join(lines))


run_job(snakemake.log[0], main, snakemake.output)
