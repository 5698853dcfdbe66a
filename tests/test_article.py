"""The article (paper/article.pdf) as a paper: its sections in order, numbered references that the text cites, no
near-empty page; and, from small hand-made tables, an abstract that says 'within noise' where a speed-up's quartiles
overlap the baseline's and never calls a variant faster there."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from printed_numbers import agrees
from reporting.article import compose, references, typesetting
from reporting.article import text as article_text
from reporting.derived import speedup_verdict
from reporting.outputs import tab08_conformance
from reporting.prose import Context, Inputs
from reporting.registry import BY_ID, Output

REPO = Path(__file__).resolve().parents[1]


# -- the abstract from constructed inputs ---------------------------------------------------------------------------
def run(gpu: str, variant: str, step_ms: float, q1: float, q3: float) -> dict:
    return {"gpu": gpu, "variant": variant, "train_ms_per_sample": step_ms / 2, "train_step_median_ms": step_ms,
            "train_step_q1_ms": q1, "train_step_q3_ms": q3, "sample_step_median_ms": 10.0, "sample_step_q1_ms": 9.9,
            "sample_step_q3_ms": 10.1, "volume_shape": "32x32x32", "parameters": 10065729, "sample_timesteps": 10,
            "train_peak_memory_gib": 1.0}


def inputs_with(tmp_path: Path, runs: list[dict], sms=None) -> Inputs:
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
    return Inputs(tmp_path, {"runs": path})


def test_abstract_says_within_noise_for_a_speedup_whose_quartiles_overlap(tmp_path):
    # channels_last's median is 5 % faster, but its quartiles (1800-2100 ms) overlap the baseline's (1850-2060 ms).
    inputs = inputs_with(tmp_path, [run("cpu", "baseline", 2000.0, 1850.0, 2060.0),
                                    run("cpu", "channels_last", 1900.0, 1800.0, 2100.0)])
    text = article_text.abstract(inputs, {}, speedup_verdict)
    assert "channels_last 1.05x, within noise" in text
    assert "no variant is measurably faster than the baseline" in text
    assert "fastest" not in text and "1.05x faster" not in text


def test_abstract_names_a_real_speedup_and_the_fastest_variant(tmp_path):
    inputs = inputs_with(tmp_path, [run("h200", "baseline", 2454.0, 2454.0, 2455.0),
                                    run("h200", "tf32", 472.0, 469.0, 478.0),
                                    run("h200", "frontier", 162.0, 160.0, 163.0)], sms=132)
    text = article_text.abstract(inputs, {}, speedup_verdict)
    assert "tf32 5.20x faster" in text
    assert "the fastest variant measured, frontier, 15.1x faster" in text
    assert article_text.title(inputs, speedup_verdict).endswith("TF32 trains 5.20x faster than FP32 on the NVIDIA H200")


def test_abstract_takes_the_verdict_function_it_is_given(tmp_path):
    inputs = inputs_with(tmp_path, [run("cpu", "baseline", 2000.0, 1990.0, 2010.0),
                                    run("cpu", "channels_last", 1000.0, 990.0, 1010.0)])

    def everything_within_noise(runs, phase):
        out = speedup_verdict(runs, phase)
        out.loc[out["verdict"] != "reference", "verdict"] = "within noise"
        return out

    assert "channels_last 2.00x faster" in article_text.abstract(inputs, {}, speedup_verdict)
    assert "channels_last 2.00x, within noise" in article_text.abstract(inputs, {}, everything_within_noise)


# -- references -----------------------------------------------------------------------------------------------------
def test_citations_resolve_to_numbers_and_an_unknown_key_is_refused():
    refs = references.load_references(REPO / references.REFERENCES)
    numbers = {ref["key"]: k + 1 for k, ref in enumerate(refs)}
    assert references.resolve_citations("as in [@study] and [@pytorch, @snakemake].", numbers) == \
        f"as in [1] and [{numbers['pytorch']}, {numbers['snakemake']}]."
    with pytest.raises(ValueError, match="nosuchpaper"):
        references.resolve_citations("[@nosuchpaper]", numbers)
    wanted = {"study", "medddpm", "pytorch", "ncu", "nsys", "snakemake", "torchmetrics", "scipy", "typst"}
    assert wanted <= set(numbers)


def test_tab08_of_only_not_comparable_rows_is_a_sentence(tmp_path):
    tables = tmp_path / "paper/tables"
    tables.mkdir(parents=True)
    pd.DataFrame([{"gpu": "cpu", "variant": None, "metric": "every metric", "verdict": "not comparable",
                   "reasons": "reference_results (h200) does not list cpu, so no reference set of cpu is read"}]) \
        .to_csv(tables / "tab08_conformance.csv", index=False)
    inputs = Inputs(tmp_path)
    assert not compose.shows_table(BY_ID["tab08_conformance"], inputs)
    said = tab08_conformance.describe(Context(inputs, speedup_verdict))
    assert said.startswith("Nothing here can be checked against a shipped reference: reference_results (h200) does not "
                           "list cpu")



def test_tab08_with_a_compared_row_is_shown_as_a_table(tmp_path):
    tables = tmp_path / "paper/tables"
    tables.mkdir(parents=True)
    pd.DataFrame([{"gpu": "h200", "variant": "baseline", "metric": "train ms per sample", "verdict": "within",
                   "reasons": ""},
                  {"gpu": "h200", "variant": "tf32", "metric": "train ms per sample", "verdict": "not comparable",
                   "reasons": "no tf32 run in the reference"}]).to_csv(tables / "tab08_conformance.csv", index=False)
    assert compose.shows_table(BY_ID["tab08_conformance"], Inputs(tmp_path))


# -- where each output sits, and how its table is shown ------------------------------------------------------------
def test_outputs_sit_in_the_subsections_their_registry_entries_name():
    subsections = [(title, [o.id for o in outputs]) for title, outputs in compose.results_subsections()]
    assert subsections == [
        ("End-to-end time and memory", ["fig08_end_to_end", "tab04_optimization"]),
        ("Where the time goes", ["fig01_runtime_breakdown", "fig02_top_kernels", "tab03_kernels"]),
        ("What the optimizations change in the counters",
         ["fig07_optimization_impact", "fig03_instruction_mix", "fig04_memory_system", "fig05_warp_states",
          "fig06_priority_scores", "fig10_roofline"]),
        ("Quality of the samples", ["fig09_quality", "tab06_quality"]),
        ("Beyond the paper: the optimization ladder", ["fig11_optimization_ladder", "tab07_frontier"]),
        ("Beyond the paper: fewer U-Net evaluations per volume", ["fig12_fast_sampling", "tab09_samplers"]),
        ("Conformance with the shipped reference", ["tab08_conformance"]),
    ]
    placed = {key: [o.id for o in outputs] for key, outputs in compose.method_outputs().items() if outputs}
    assert placed == {"hardware": ["tab01_hardware"], "workload": ["tab02_workload"]}


def test_a_results_group_that_does_not_exist_is_refused():
    with pytest.raises(ValueError, match="fig99_new: group 'costs' must be one of"):
        Output("fig99_new", "a new figure", group="costs")


def test_a_table_shows_the_columns_its_module_declares_and_a_claim_once():
    frame = pd.DataFrame({"claim": ["IPC up", "IPC up", "quality"], "published": ["+7 %", "+7 %", "unchanged"],
                          "published_on": ["a100"] * 3, "gpu": ["cpu", "h200", "cpu"],
                          "origin": ["measured here", "shipped reference", "measured here"],
                          "measured": ["1.01", "0.93", "within"], "verdict": ["x", "y", "z"], "rule": ["", "", ""]})
    shown, header = typesetting.article_frame(typesetting.TableView.of(BY_ID["tab05_claims"]), frame)
    # published_on and origin are not shown, nor the rule that no row names; a claim and its published value once.
    assert header == ["claim", "published (A100)", "label", "measured", "verdict"]
    assert shown["claim"].tolist() == ["IPC up", "", "quality"]
    assert shown["published"].tolist() == ["+7 %", "", "unchanged"]
    assert shown["gpu"].tolist() == ["cpu", "h200", "cpu"]


def test_a_share_is_shown_as_a_percentage_where_the_table_says_so():
    percent = typesetting.TableView.of(BY_ID["tab07_frontier"]).percent
    assert "train_fraction_of_bf16_rate" in percent
    assert typesetting.cell("0.4567", True) == "45.7"
    assert typesetting.cell("3.14159") == "3.14"  # elsewhere three significant digits


@pytest.mark.parametrize("values, shown, suffix", [
    # One format per column: decimals for three significant digits at the median, thousands separators, no exponent.
    (["9737", "10840.3", "586.1"], ["9,737", "10,840", "586"], ""),
    (["1.0", "0.9292", "30.62", "5.383"], ["1.00", "0.93", "30.62", "5.38"], ""),
    # Counts of a hundred thousand and more in a power of ten named after the header.
    (["586000000.0", "166000000.0", "1267000000.0"], ["586", "166", "1,267"], " (M)"),
    # Values over three decades or more: all in scientific notation.
    (["4.5e-07", "0.003062", "0.0005"], ["4.50e-7", "3.06e-3", "5.00e-4"], ""),
    (["22794", "412", ""], ["22,794", "412", ""], ""),  # whole numbers as counts; an empty cell stays empty
])
def test_a_column_of_numbers_is_written_one_way(values, shown, suffix):
    column = typesetting.ColumnFormat.of(values)
    assert [column(v) for v in values] == shown
    assert column.suffix == suffix


def test_each_label_of_a_table_gets_its_own_format_and_short_headers_do_not_break():
    frame = pd.DataFrame({"gpu": ["cpu", "cpu", "h200", "h200"], "tflops": ["0.0337", "0.0301", "93.2", "171.8"]})
    rows, suffixes = typesetting.formatted_rows(frame, [False, True], frozenset(), frame["gpu"])
    assert [row[1] for row in rows] == ["0.0337", "0.0301", "93", "172"] and suffixes == ["", ""]
    assert typesetting.glued("compile s") == "compile\u00a0s"
    assert typesetting.glued("vol/h best") == "vol/h best"

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
    positions = [text.find(f"{k + 1} {title}") for k, title in enumerate(compose.SECTION_TITLES)]
    assert all(p >= 0 for p in positions), dict(zip(compose.SECTION_TITLES, positions))
    assert positions == sorted(positions)
    for subsection in ("Differences from upstream Med-DDPM", "What cannot be measured here", "Measuring time"):
        assert subsection in text
    # Every reference listed with its number, and cited before the list.
    body, _, listed = text.rpartition(f"{len(compose.SECTION_TITLES)} References")
    refs = references.load_references(finished_run / references.REFERENCES)
    for k, ref in enumerate(refs, start=1):
        assert f"[{k}]" in listed and ref["text"].split(".")[0][:30] in squeezed(listed), ref["key"]
        assert re.search(rf"\[(\d+, )*{k}(, \d+)*\]", body), f"[{k}] ({ref['key']}) is never cited"
    # No near-empty page: each holds at least a few lines of text (a figure page its labels and caption).
    for number, page in enumerate(pages, start=1):
        lines = [line for line in page.splitlines() if line.strip()]
        assert len(lines) >= 6, f"page {number} holds {len(lines)} lines"


def printed_sizes(page) -> list[tuple[float, str]]:
    """(size in points, character) of every visible character of a page as printed: the font's size times the scale
    of the character's matrix (a figure set smaller than drawn scales its text down with it)."""
    import pypdfium2.raw as raw

    text = page.get_textpage()
    matrix = raw.FS_MATRIX()
    sizes = []
    for index in range(text.count_chars()):
        char = chr(raw.FPDFText_GetUnicode(text, index))
        if char.isspace() or char == "\u200b":
            continue
        raw.FPDFText_GetMatrix(text, index, matrix)
        scale = abs(matrix.a * matrix.d - matrix.b * matrix.c) ** 0.5
        sizes.append((raw.FPDFText_GetFontSize(text, index) * scale, char))
    return sizes


def filled_share(page, gap_pt: float = 30.0) -> float:
    """The share of a page's text area (A4, the layout's margins) that its content fills: every gap of more than
    `gap_pt` between the content's extents (text lines, figures, table rules), and above or below it, counts as
    empty."""
    width, height = page.get_size()
    low, high = 2.4 / 2.54 * 72, height - 2.2 / 2.54 * 72
    # The page's own objects: a figure counts whole (its white space is its own), not as what is drawn inside it.
    bounds = [obj.get_bounds() for obj in page.get_objects(max_depth=1)]
    spans = sorted((max(b, low), min(t, high)) for _, b, _, t in bounds if min(t, high) > max(b, low))
    empty, reached = 0.0, low
    for bottom, top in spans:
        if bottom - reached > gap_pt:
            empty += bottom - reached
        reached = max(reached, top)
    if high - reached > gap_pt:
        empty += high - reached
    return 1 - empty / (high - low)


def test_every_page_is_legible_at_print_size_and_filled(finished_run):
    """What a reader holds: no character of any page (figures scaled to their place included) smaller than 6 pt, and
    no page but the last (the references) less than about two thirds full."""
    import pypdfium2

    document = pypdfium2.PdfDocument(finished_run / "paper/article.pdf")
    pages = list(document)
    for number, page in enumerate(pages, start=1):
        smallest = min(printed_sizes(page))
        assert smallest[0] >= typesetting.SMALLEST_PRINTED_PT - 0.05, f"page {number}: {smallest}"
    shares = [round(filled_share(page), 2) for page in pages]
    assert all(share >= 0.65 for share in shares[:-1]), shares


def test_the_abstract_holds_tab04s_numbers(finished_run):
    """Every time and speed-up the abstract prints is tab04's (as rounded there): the baseline's time per training
    sample of each label, each variant's speed-up ("slower" as the inverse) and the paired interval where it has one;
    a changed cell of the table fails here."""
    abstract = squeezed(page_texts(finished_run / "paper/article.pdf")[0]).split(" 1 Introduction")[0]
    tab04 = pd.read_csv(finished_run / "paper/tables/tab04_optimization.csv")
    parts = re.split(r"Measured on (\w+) \(|; on (\w+) \(", abstract)
    by_label = {}
    for k in range(1, len(parts) - 1, 3):
        by_label[parts[k] or parts[k + 1]] = parts[k + 2]
    assert set(by_label) == set(tab04["gpu"]), list(by_label)
    checked = 0
    for gpu, text in by_label.items():
        rows = tab04[tab04["gpu"] == gpu].set_index("variant")
        baseline = re.search(r"baseline trains in ([\d,.]+) ms per sample", text).group(1)
        assert agrees(baseline, rows.loc["baseline", "train_ms_per_sample"]), (gpu, baseline)
        for match in re.finditer(r"(?:the fastest variant measured, )?(\w+),? ([\d.]+)x(?: (faster|slower)|, "
                                 r"[a-z ]*[a-z](?: \(interval ([\d.]+)-([\d.]+)\))?)", text):
            variant, x, direction, low, high = match.groups()
            row = rows.loc[variant]
            speedup = row["train_speedup_vs_baseline"]
            assert agrees(x, 1 / speedup if direction == "slower" else speedup), (gpu, variant, x, speedup)
            assert (direction or "") == ("" if row["train_verdict"] not in ("faster", "slower") else
                                         row["train_verdict"]), (gpu, variant, direction, row["train_verdict"])
            if low is not None:
                assert agrees(low, row["train_speedup_low"]) and agrees(high, row["train_speedup_high"])
            checked += 1
    assert checked >= 4, abstract


def test_the_limitations_describe_the_embedded_default_as_config_yaml_sets_it(tmp_path):
    """The sentence about the default configuration is prose: it has to follow config.yaml when its workload changes."""
    default = yaml.safe_load((REPO / "config.yaml").read_text())
    shape, width = default["dataset"]["shape"], default["model"]["base_width"]
    assert len(set(shape)) == 1, "the sentence says n^3: a cube"
    said = " ".join(article_text.limitations_text(inputs_with(tmp_path, [run("cpu", "baseline", 10, 9, 11)]), default))
    assert f"the default configuration runs a {shape[0]}^3, width-{width} network" in said
