"""The HTML report (`snakemake --report`) as a landing page: the study's description, every output once in its
category with a title, tables as HTML, the article linked; and the HTML tables themselves."""

import json
import re
import zipfile

import pandas as pd
import pytest

from conftest import TINY, snakemake
from reporting.registry import CATEGORIES, OUTPUTS
from reporting.tables import html_table


def report_data(html: str, name: str):
    """A `var <name> = {...}` object of the report's page (its categories and results)."""
    for match in re.finditer(rf"var {name} = ", html):
        try:
            return json.JSONDecoder().raw_decode(html, match.end())[0]
        except json.JSONDecodeError:
            continue  # the same name in the report's bundled libraries
    raise AssertionError(f"no {name} object in the report")


@pytest.mark.workflow
def test_report_lists_every_output_once_in_its_category_with_a_title(finished_run, tmp_path):
    archive = tmp_path / "report.zip"
    done = snakemake(finished_run, "--report", str(archive), *TINY, "paper/figures/all")
    assert done.returncode == 0, done.stderr[-2000:]
    with zipfile.ZipFile(archive) as zipped:
        page = zipped.read(next(n for n in zipped.namelist() if n.endswith("/report.html"))).decode()
    categories = report_data(page, "categories")
    assert set(categories) == set(CATEGORIES) | {"Article"}
    listed = {category: [path for paths in sub.values() for path in paths] for category, sub in categories.items()}
    assert listed["Article"] == ["paper/article.pdf"]
    results = report_data(page, "results")
    for output in OUTPUTS:
        files = output.files_out()
        shown, download = (files["png"], files["pdf"]) if output.kind == "figure" else (files["html"], files["csv"])
        assert {shown, download} <= set(listed[output.category]), output.id
        # One entry per output: the same first label on both files, the format label telling them apart.
        labels = results[shown]["labels"], results[download]["labels"]
        assert labels[0]["output"] == labels[1]["output"] and labels[0]["output"].startswith(output.id[:5] + " · ")
        assert (labels[0]["format"], labels[1]["format"]) == ("image / table", "pdf / csv")
    assert sum(len(paths) for paths in listed.values()) == 2 * len(OUTPUTS) + 1  # nothing else, nothing twice
    # The landing page: the description of the study, with this run's configuration and links into the report.
    assert "Med-DDPM on your GPUs: a performance study" in page
    assert "javascript:app.showResultInfo('paper/article.pdf')" in page
    for category in CATEGORIES:
        assert f"javascript:app.showCategory('{category}')" in page


def test_html_table_escapes_and_aligns_numbers_and_keeps_the_notes():
    frame = pd.DataFrame({"variant": ["<tf32>", "baseline"], "ms": ["1.5", ""], "note": ["x" * 50, "short"]})
    page = html_table(frame, "Caption & more", ["first note", "second <note>"])
    assert "<title>Caption &amp; more</title>" in page and '<p class="caption">Caption &amp; more</p>' in page
    assert "<td>&lt;tf32&gt;</td>" in page and '<td class="num">1.5</td>' in page and '<td class="num"></td>' in page
    assert f'<td class="long">{"x" * 50}</td>' in page  # long text wraps, the rest stays on one line
    assert '<ol class="notes">\n<li>first note</li>\n<li>second &lt;note&gt;</li>\n</ol>' in page
    assert "<script" not in page and "http" not in page  # self-contained: the report shows it in a frame
