"""The article (paper/article.pdf) as a paper: its sections in order, numbered references that the text cites, no
near-empty page; and, from small hand-made tables, an abstract that says 'within noise' where a speed-up's quartiles
overlap the baseline's and never calls a variant faster there."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from reporting import article
from reporting.derived import speedup_verdict

REPO = Path(__file__).resolve().parents[1]


# -- the abstract from constructed inputs ---------------------------------------------------------------------------
def run(gpu: str, variant: str, step_ms: float, q1: float, q3: float) -> dict:
    return {"gpu": gpu, "variant": variant, "train_ms_per_sample": step_ms / 2, "train_step_median_ms": step_ms,
            "train_step_q1_ms": q1, "train_step_q3_ms": q3, "sample_step_median_ms": 10.0, "sample_step_q1_ms": 9.9,
            "sample_step_q3_ms": 10.1, "volume_shape": "32x32x32", "parameters": 10065729, "sample_timesteps": 10,
            "train_peak_memory_gib": 1.0}


def inputs_with(tmp_path: Path, runs: list[dict], sms=None) -> article.Inputs:
    tables = tmp_path / "paper/tables"
    tables.mkdir(parents=True)
    labels = sorted({r["gpu"] for r in runs})
    pd.DataFrame({"label": labels, "device": ["NVIDIA H200" if sms else "AMD EPYC"] * len(labels),
                  "sms": [sms] * len(labels), "origin": ["measured here"] * len(labels),
                  "date": ["2026-12-01"] * len(labels)}).to_csv(tables / "tab01_hardware.csv", index=False)
    pd.DataFrame(columns=["claim", "gpu", "verdict"]).to_csv(tables / "tab05_claims.csv", index=False)
    pd.DataFrame(columns=["gpu", "variant", "verdict"]).to_csv(tables / "tab08_conformance.csv", index=False)
    path = tmp_path / "runs.parquet"
    pd.DataFrame(runs).to_parquet(path)
    return article.Inputs(tmp_path, {"runs": path})


def test_abstract_says_within_noise_for_a_speedup_whose_quartiles_overlap(tmp_path):
    # channels_last's median is 5 % faster, but its quartiles (1800-2100 ms) overlap the baseline's (1850-2060 ms).
    inputs = inputs_with(tmp_path, [run("cpu", "baseline", 2000.0, 1850.0, 2060.0),
                                    run("cpu", "channels_last", 1900.0, 1800.0, 2100.0)])
    text = article.abstract(inputs, {}, speedup_verdict)
    assert "channels_last 1.05x, within noise" in text
    assert "no variant is measurably faster than the baseline" in text
    assert "fastest" not in text and "1.05x faster" not in text


def test_abstract_names_a_real_speedup_and_the_fastest_variant(tmp_path):
    inputs = inputs_with(tmp_path, [run("h200", "baseline", 2454.0, 2454.0, 2455.0),
                                    run("h200", "tf32", 472.0, 469.0, 478.0),
                                    run("h200", "frontier", 162.0, 160.0, 163.0)], sms=132)
    text = article.abstract(inputs, {}, speedup_verdict)
    assert "tf32 5.20x faster" in text
    assert "the fastest variant measured, frontier, 15.1x faster" in text
    assert article.title(inputs, speedup_verdict).endswith("TF32 trains 5.20x faster than FP32 on the NVIDIA H200")


def test_abstract_takes_the_verdict_function_it_is_given(tmp_path):
    inputs = inputs_with(tmp_path, [run("cpu", "baseline", 2000.0, 1990.0, 2010.0),
                                    run("cpu", "channels_last", 1000.0, 990.0, 1010.0)])

    def everything_within_noise(runs, phase):
        out = speedup_verdict(runs, phase)
        out.loc[out["verdict"] != "reference", "verdict"] = "within noise"
        return out

    assert "channels_last 2.00x faster" in article.abstract(inputs, {}, speedup_verdict)
    assert "channels_last 2.00x, within noise" in article.abstract(inputs, {}, everything_within_noise)


# -- references -----------------------------------------------------------------------------------------------------
def test_citations_resolve_to_numbers_and_an_unknown_key_is_refused():
    refs = article.load_references(REPO / article.REFERENCES)
    numbers = {ref["key"]: k + 1 for k, ref in enumerate(refs)}
    assert article.resolve_citations("as in [@study] and [@pytorch, @snakemake].", numbers) == \
        f"as in [1] and [{numbers['pytorch']}, {numbers['snakemake']}]."
    with pytest.raises(ValueError, match="nosuchpaper"):
        article.resolve_citations("[@nosuchpaper]", numbers)
    wanted = {"study", "medddpm", "pytorch", "ncu", "nsys", "snakemake", "torchmetrics", "scipy", "typst"}
    assert wanted <= set(numbers)


def test_tab08_of_only_not_comparable_rows_is_a_sentence(tmp_path):
    tables = tmp_path / "paper/tables"
    tables.mkdir(parents=True)
    pd.DataFrame([{"gpu": "cpu", "variant": None, "metric": "every metric", "verdict": "not comparable",
                   "reasons": "no shipped reference set of cpu is listed in reference_results"}]) \
        .to_csv(tables / "tab08_conformance.csv", index=False)
    assert article.only_not_comparable("tab08_conformance", tmp_path)
    text = article.text_tab08(article.Inputs(tmp_path), speedup_verdict)
    assert text.startswith("Nothing here can be checked against a shipped reference: no shipped reference set")


# -- the typeset article of the tiny run ----------------------------------------------------------------------------
def page_texts(pdf: Path) -> list[str]:
    import pypdfium2

    document = pypdfium2.PdfDocument(pdf)
    return [page.get_textpage().get_text_range() for page in document]


def squeezed(text: str) -> str:  # lines joined; cells may break after an underscore; smart quotes as typed
    return re.sub(r"[\s\u200b]+", " ", text).translate(str.maketrans("\u2018\u2019\u201c\u201d", "''\"\""))


def test_article_reads_as_a_paper(finished_run):
    pages = page_texts(finished_run / "paper/article.pdf")
    text = squeezed(" ".join(pages))
    # The sections, numbered and in order.
    positions = [text.find(f"{k + 1} {title}") for k, title in enumerate(article.SECTION_TITLES)]
    assert all(p >= 0 for p in positions), dict(zip(article.SECTION_TITLES, positions))
    assert positions == sorted(positions)
    for subsection in ("Differences from upstream Med-DDPM", "What cannot be measured here", "Measuring time"):
        assert subsection in text
    # Every reference listed with its number, and cited before the list.
    body, _, listed = text.rpartition(f"{len(article.SECTION_TITLES)} References")
    refs = article.load_references(finished_run / article.REFERENCES)
    for k, ref in enumerate(refs, start=1):
        assert f"[{k}]" in listed and ref["text"].split(".")[0][:30] in squeezed(listed), ref["key"]
        assert re.search(rf"\[(\d+, )*{k}(, \d+)*\]", body), f"[{k}] ({ref['key']}) is never cited"
    # No near-empty page: each holds at least a few lines of text (a figure page its labels and caption).
    for number, page in enumerate(pages, start=1):
        lines = [line for line in page.splitlines() if line.strip()]
        assert len(lines) >= 6, f"page {number} holds {len(lines)} lines"
