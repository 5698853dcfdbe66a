"""tab06: the quality study per hardware label and variant: its seeds, the mean and SD over them of the metric that
carries the quality claim's verdict and of 3D SSIM against the real images, the variant's paired comparison with
the baseline (mean difference by seed, its 90 % interval, the margin, the outcome; data/paper_claims.yaml), and the
baseline's rerun of one seed as a row of its own (what is left of run-to-run noise). Two more CSVs: every run
(`runs`, the per-seed numbers fig09 draws) and the quality checks of the timing runs (`checks`: float64 errors through
each variant's paths at the weights of a few training steps)."""

from __future__ import annotations

import pandas as pd

from ..claims import QualityJudgement, load_claims, quality_judgement, seed_list
from ..prose import Context, num, shape_text
from ..render import Table
from ..results import variant_order

# Every run (the `runs` CSV, and the study's summary.md with its wall times). No times here: tab06 is the same
# between two clean runs of one configuration (the study's times are in results/<workload>/<label>/study/summary.md
# and the collected study table).
COLUMNS = ["gpu", "variant", "seed", "origin", "device", "date", "volume_shape", "timesteps", "optimizer_steps",
           "final_loss", "ssim_vs_real", "psnr_vs_real_db", "wasserstein_vs_real",
           "lesion_contrast", "lesion_contrast_real", "ssim_vs_baseline", "psnr_vs_baseline_db",
           "max_abs_diff_vs_baseline", "loss_deviation_vs_baseline", "forward_rel_error", "gradient_rel_error"]
TAGS = ["gpu", "variant", "origin", "device", "date", "volume_shape", "timesteps", "optimizer_steps"]
COMPARISON = ["paired_seeds", "mean_difference", "interval_low", "interval_high", "margin", "outcome"]
CAPTION = ("Quality study per variant: every variant trained from every seed, paired with the baseline by seed (the "
           "same initial weights, data order and sampling noise). Over the seeds: mean and SD of the Wasserstein "
           "distance between sample and real intensities per mask label (mean over labels and masks; the metric "
           "of the quality claim's verdict) and of 3D SSIM against the held-out real images. Against the "
           "baseline, seed by seed: the number of paired seeds, the mean difference variant - baseline, its "
           "two-sided 90 % t-interval, the margin (the baseline's seed-to-seed SD times the claims file's factor) "
           "and the outcome (equivalent: the interval within +-margin; different: entirely outside; inconclusive: "
           "across an edge). The row 'baseline, rerun of seed k' is the baseline's seed k trained again in the same "
           "job: its difference is what is left of run-to-run noise. Also: mean 3D SSIM against the baseline's "
           "samples of the same seed, mean final loss, and the largest relative errors of the forward and of all "
           "gradients against float64 at the trained weights. Every run: tab06_quality_runs.csv")


def summary_columns(column: str) -> list[str]:
    """tab06's columns, the verdict's metric (`column`, the claim's `distance`) named in its own."""
    return [*TAGS, "seeds", f"{column}_mean", f"{column}_sd", "ssim_vs_real_mean", "ssim_vs_real_sd", *COMPARISON,
            "ssim_vs_baseline_mean", "final_loss_mean", "forward_rel_error_max", "gradient_rel_error_max"]


def _mean(rows: pd.DataFrame, column: str, how: str = "mean") -> float:
    values = rows[column].astype(float) if column in rows else pd.Series(dtype=float)
    return float(getattr(values, how)()) if values.notna().any() else float("nan")


def variant_row(rows: pd.DataFrame, variant: str, judgement: QualityJudgement) -> dict:
    """One variant's row: its runs over the seeds, and its paired comparison with the baseline."""
    column = judgement.column
    mine = rows[rows["variant"] == variant]
    first = mine.iloc[0]
    row = {key: first[key] for key in TAGS if key in mine} | {
        "seeds": seed_list(mine["seed"]),
        f"{column}_mean": _mean(mine, column), f"{column}_sd": float(mine[column].astype(float).std(ddof=1)),
        "ssim_vs_real_mean": _mean(mine, "ssim_vs_real"),
        "ssim_vs_real_sd": float(mine["ssim_vs_real"].astype(float).std(ddof=1)),
        "margin": judgement.margin, "outcome": judgement.shown(variant),
        "ssim_vs_baseline_mean": _mean(mine, "ssim_vs_baseline"), "final_loss_mean": _mean(mine, "final_loss"),
        "forward_rel_error_max": _mean(mine, "forward_rel_error", "max"),
        "gradient_rel_error_max": _mean(mine, "gradient_rel_error", "max")}
    found = judgement.comparisons.get(variant)
    if found is not None:
        row |= {"paired_seeds": found.n, "mean_difference": found.mean, "interval_low": found.low,
                "interval_high": found.high}
    return row


def rerun_row(rows: pd.DataFrame, judgement: QualityJudgement) -> dict:
    """The baseline's seed trained again: its distance, and its difference from the first training against the
    margin (one pair: no interval)."""
    rerun = judgement.rerun
    first = rows[(rows["variant"] == "baseline") & (rows["seed"] == rerun.seed)].iloc[0]
    return {key: first[key] for key in TAGS if key in rows} | {
        "variant": f"baseline, rerun of seed {rerun.seed}", "seeds": str(rerun.seed),
        f"{judgement.column}_mean": rerun.distance, "ssim_vs_real_mean": rerun.ssim, "paired_seeds": 1,
        "mean_difference": rerun.difference, "margin": judgement.margin, "outcome": rerun.weights}


def summary(study: pd.DataFrame, claim: dict, optimized: list[str]) -> pd.DataFrame:
    """One row per (hardware label, variant), the baseline's rerun after the baseline (the labels in the study's
    order)."""
    columns = summary_columns(claim["distance"])
    out = []
    for gpu in dict.fromkeys(study["gpu"]) if len(study) else []:
        rows = study[study["gpu"] == gpu]
        judgement = quality_judgement(claim, gpu, rows, optimized)
        for variant in variant_order(rows["variant"]):
            out.append(variant_row(rows, variant, judgement))
            if variant == "baseline" and judgement.rerun is not None:
                out.append(rerun_row(rows, judgement))
    frame = pd.DataFrame(out).reindex(columns=columns) if out else pd.DataFrame(columns=columns)
    # A count, blank for the baseline (it is the reference): whole numbers in the CSV, nothing where there is none.
    frame["paired_seeds"] = pd.Series([None if pd.isna(n) else int(n) for n in frame["paired_seeds"]], dtype=object,
                                      index=frame.index)
    return frame


def workload_notes(study: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """One line per label: its study's own workload (volume, T, optimizer steps), smaller than its timed runs', whose
    volume is named where it differs."""
    notes = []
    for gpu, rows in study.groupby("gpu", sort=False) if len(study) else []:
        first = rows.iloc[0]
        timed = runs.loc[runs["gpu"] == gpu, "volume_shape"].dropna() if len(runs) else pd.Series(dtype=object)
        other = f"; its timed runs (tab04, tab07) are {shape_text(timed.iloc[0])}" \
            if len(timed) and timed.iloc[0] != first["volume_shape"] else ""
        notes.append(f"{gpu}: the study's workload is {shape_text(first['volume_shape'])} volumes, T = "
                     f"{int(first['timesteps'])}, {int(first['optimizer_steps']):,} optimizer steps{other}.")
    return notes


def build(job) -> Table:
    claims = load_claims(job.files["claims"])
    claim = next(c for c in claims["claims"] if c["measure"] == "quality_unchanged")
    study = job.results.table("study")
    runs = study.reindex(columns=COLUMNS)
    return Table(summary(study, claim, claims.get("optimized_variants", [])), CAPTION,
                 notes=workload_notes(study, job.results.table("runs")),
                 extra={"runs": runs, "checks": job.results.table("quality")})


# The article's table shows these columns, with these headers (the CSV keeps them all).
ARTICLE_COLUMNS = [("gpu", "label"), ("variant", "variant"), ("seeds", "seeds"),
                   ("wasserstein_vs_real_mean", "W1 real"), ("wasserstein_vs_real_sd", "W1 SD"),
                   ("ssim_vs_real_mean", "SSIM real"), ("mean_difference", "diff. vs base"),
                   ("interval_low", "90 % low"), ("interval_high", "90 % high"), ("margin", "margin"),
                   ("outcome", "outcome")]
# The label once, above its rows (tab06's notes name each label's study workload).
ARTICLE_SHOWN_ONCE = ("gpu",)


def describe(context: Context) -> str:
    inputs = context.inputs
    quality = inputs.table("tab06_quality")
    if quality.empty or "forward_rel_error_max" not in quality or quality["forward_rel_error_max"].isna().all():
        return "No numeric check was run."
    errors = quality.dropna(subset=["forward_rel_error_max"])
    said = []
    for gpu, rows in errors.groupby("gpu", sort=False):  # each label its own study workload: never ranked together
        worst = rows.loc[rows["forward_rel_error_max"].astype(float).idxmax()]
        best = rows.loc[rows["forward_rel_error_max"].astype(float).idxmin()]
        said.append(f"on {gpu} from {num(best['forward_rel_error_max'])} ({best['variant']}) to "
                    f"{num(worst['forward_rel_error_max'])} ({worst['variant']})")
    return (f"The float64 check at the trained weights: the forward pass's relative error ranges "
            f"{'; '.join(said)}; fp32 arithmetic stays near 1e-7, TF32 and bf16 trade about three orders of "
            "magnitude of it for speed. SSIM and PSNR are "
            "torchmetrics' [@torchmetrics], the Wasserstein distance of the intensities per mask label and the "
            "t-intervals of the paired differences SciPy's [@scipy].")
