"""The article's composition: its blocks (headings, paragraphs, figures and tables, references) in their order, as
the layout (workflow/report/article.typ) shows them. Each registered output sits in the section and subsection its
registry entry names (`section`, `group`), with the paragraph its module writes (`describe`); the rest of the text is
the article's own (reporting.article.text).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

from .. import derived
from ..prose import Context, Inputs
from ..registry import OUTPUTS, RESULTS_GROUPS, Output
from .references import REFERENCES, load_references, numbered, resolve_citations
from .text import METHOD, abstract, claims_text, introduction, limitations_text, reproducing_text, title
from .typesetting import item, pieces

# Section titles, in the order they appear (the tests check the order).
SECTION_TITLES = ("Introduction", "Method", "Results", "The paper's claims, one by one", "Limitations",
                  "Reproducing this article", "References")
# The registry's sections shown as the results' last subsections, with their titles.
SECTIONS_IN_RESULTS = (("frontier", "Beyond the paper: the optimization ladder"),
                       ("sampling", "Beyond the paper: fewer U-Net evaluations per volume"),
                       ("conformance", "Conformance with the shipped reference"))


class Blocks:
    """The article as a flat list of blocks; paragraphs keep their [@key] citations until all are kn"""

    def __init__(self):
        self.blocks: list[dict] = []

    def heading(self, text: str, level: int = 1, flush: bool | None = None) -> None:
        """`flush`: the floats pending place before it (every level-1 heading does)."""
        self.blocks.append({"kind": "heading", "level": level, "text": text,
                            "flush": level == 1 if flush is None else flush})

    def par(self, text: str) -> None:
        if text:
            self.blocks.append({"kind": "par", "text": text})

    def add(self, block: dict) -> None:
        self.blocks.append(block)


def default_verdict() -> Callable:
    return derived.speedup_verdict


def shows_table(output: Output, inputs: Inputs) -> bool:
    """Whether the article shows the output itself (its module's `shown_as_table`), or only its paragraph."""
    decides = getattr(importlib.import_module(output.module), "shown_as_table", None)
    return decides is None or decides(inputs)


def output_block(blocks: Blocks, output: Output, context: Context) -> None:
    """The output with its caption and its module's paragraph; the paragraph alone where the output says so."""
    describe = getattr(importlib.import_module(output.module), "describe", None)
    text = describe(context) if describe is not None else ""
    if not shows_table(output, context.inputs):
        blocks.par(text)
        return
    block = item(output, context.inputs.root)
    block["text"] = text
    blocks.add(block)


def method_outputs() -> dict[str | None, list[Output]]:
    """The methods outputs by the subsection of the method they follow (their `group`); None: after the last."""
    keys = [key for key, _, _ in METHOD]
    placed: dict[str | None, list[Output]] = {key: [] for key in [*keys, None]}
    for output in [o for o in OUTPUTS if o.section == "methods"]:
        if output.group and output.group not in keys:
            raise ValueError(f"{output.id}: group {output.group!r} must be one of the method's subsections {keys}")
        placed[output.group or None].append(output)
    return placed


def results_subsections() -> list[tuple[str, list[Output]]]:
    """The results' subsections and their outputs: the registry's groups in order, an output of no group under its
    own title, then the registry's sections shown in the results (SECTIONS_IN_RESULTS)."""
    results = [o for o in OUTPUTS if o.section == "results"]
    groups = [(heading, [o for o in results if o.group == key]) for key, heading in RESULTS_GROUPS.items()]
    groups += [(o.title, [o]) for o in results if not o.group]
    groups += [(heading, [o for o in OUTPUTS if o.section == section]) for section, heading in SECTIONS_IN_RESULTS]
    return groups


def article_data(root: str | Path, settings: dict, collected: dict[str, str | Path] | None = None,
                 verdict: Callable | None = None, peaks: dict | None = None,
                 references: str | Path | None = None) -> dict:
    """Everything the layout (workflow/report/article.typ) shows, from the outputs under `root` and the collected
    result tables. `verdict(runs, phase)` calls each speed-up faster, slower or within noise
    (reporting.derived.speedup_verdict); `peaks` are the datasheet ceilings by label (data/gpu_peaks.yaml)."""
    root = Path(root)
    inputs = Inputs(root, collected)
    verdict = verdict or default_verdict()
    context = Context(inputs, verdict, peaks or {})
    refs = load_references(references or root / REFERENCES)
    blocks = Blocks()
    intro, method, results, claims, limits, repro, refs_title = SECTION_TITLES

    blocks.heading(intro)
    for text in introduction(inputs, settings):
        blocks.par(text)

    blocks.heading(method)
    placed = method_outputs()
    for key, heading, written in METHOD:
        blocks.heading(heading, 2)
        blocks.par(written(inputs, settings))
        for output in placed[key]:
            output_block(blocks, output, context)
    for output in placed[None]:
        output_block(blocks, output, context)

    blocks.heading(results)
    for heading, outputs in results_subsections():
        # A subsection's heading lets the figures of the one before float on (every section's heading places them):
        # placed before it, they left pages half empty wherever a subsection's text is shorter than its figures.
        blocks.heading(heading, 2)
        for output in outputs:
            output_block(blocks, output, context)

    blocks.heading(claims)
    texts = claims_text(inputs)
    blocks.par(texts[0])
    for output in [o for o in OUTPUTS if o.section == "claims"]:
        output_block(blocks, output, context)
    for text in texts[1:]:
        blocks.par(text)

    blocks.heading(limits)
    for text in limitations_text(inputs, settings):
        blocks.par(text)

    blocks.heading(repro)
    blocks.par(reproducing_text())

    the_abstract = abstract(inputs, settings, verdict)
    texts = [the_abstract] + [b.get("text", "") for b in blocks.blocks if b["kind"] in ("par", "figure", "table")]
    numbers = numbered(refs, texts)
    for block in blocks.blocks:
        if block["kind"] == "par":
            block["pieces"] = pieces(resolve_citations(block.pop("text"), numbers))
        elif block["kind"] in ("figure", "table"):
            block["text"] = [pieces(resolve_citations(t, numbers)) for t in [block.pop("text", "")] if t]
    blocks.heading(refs_title)
    blocks.add({"kind": "references", "entries": [ref["text"] for ref in refs]})
    labels = ", ".join(inputs.labels()["label"])
    return {
        "title": title(inputs, verdict),
        "subtitle": f"A reproduction of the performance study of arXiv 2606.19365, measured on: {labels}",
        "author": "the Med-DDPM performance-study workflow",
        "abstract": [pieces(resolve_citations(the_abstract, numbers))],
        "blocks": blocks.blocks,
    }
