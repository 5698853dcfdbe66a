"""The quality study's summary (reporting.study_markdown, the study_summary job's code) on a study recorded on a GPU:
the baseline and one rung beyond the paper, frontier_edges, five seeds each. The claim is not measurable there (none
of the paper's variants ran) and the rung still gets its outcome by the claim's rule."""

from pathlib import Path

from reporting import study_markdown

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "data" / "measurements" / "h100-2026-12-05-frontier-edges-quality"
RUNS = sorted((RECORD / "results" / "wholehead" / "h100" / "study").glob("*/seed*/*"))


def summary() -> str:
    return study_markdown.markdown_of_files(RUNS, "h100", REPO / "data" / "paper_claims.yaml")


def test_the_records_summary_is_what_the_workflows_code_makes_of_its_runs():
    assert len(RUNS) == 2 * 5 * 4  # run.json, comparison.json, losses.csv, slice.npy of every seed
    assert summary() == (RECORD / "summary.md").read_text()


def test_a_study_of_a_rung_beyond_the_paper_gives_the_rung_its_outcome_and_the_claim_none():
    text = summary()
    assert text.startswith("# Quality study: h100 (NVIDIA H100 80GB HBM3)\n")
    assert "32x32x32 voxels, 40,226,433 parameters, T = 250, 1200 optimizer steps per run." in text
    verdict = text.rstrip().splitlines()[-1]
    assert verdict.startswith("Quality claim: **not measurable here**. no optimized variant (tf32, channels_last, "
                              "tf32_channels_last) in the quality study on h100; beyond the paper, ")
    assert "against the margin +-0.0380 (1 x the SD of the baseline's 5 seeds): frontier_edges +0.0103 " \
           "[-0.0393, +0.0599] inconclusive" in verdict
    assert verdict.endswith("rerun of seed 0: weights bit-identical, wasserstein_vs_real +0.0000 against the first "
                            "training")
    rows = [line for line in text.splitlines() if line.startswith("| frontier_edges ") or line.startswith("| baseline ")]
    assert len(rows) == 10
