"""Every registered figure, rendered on what the default configuration draws (a run measured here on the CPU and the
shipped H200 set, from the tiny end-to-end run's collected tables), is legible: no two drawn texts overlap, no text
lies over a drawn line, nothing is cut at the canvas's edge, no legend lies over the data, no text is printed smaller
than 6 pt where the article sets the figure, every variant, kernel class, instruction kind and sampler has its one
colour (reporting.palette) wherever it is drawn, and every two colours a figure shows together lie far enough apart.
Each figure is rendered once."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import yaml
from matplotlib.colors import to_hex
from matplotlib.legend import Legend
from matplotlib.text import Text

from reporting import render
from reporting.article.typesetting import SMALLEST_PRINTED_PT, print_scale
from reporting.palette import (CLASS_COLORS, EXTRA_COLORS, MIN_DISTANCE, PALETTES, VARIANT_COLORS, closest_pair,
                               colour_distance, delta_e_2000, variant_color)
from reporting.registry import BUNDLE, OUTPUTS
from reporting.style import lay_out

REPO = Path(__file__).resolve().parents[1]
FIGURES = [output for output in OUTPUTS if output.kind == "figure"]
TOLERANCE = 1.0  # pixels: antialiasing, not a collision


def settings_of(run: Path) -> dict:
    """The config sections the figures read, as the tiny run had them (config.yaml under tests/tiny.yaml)."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config.update(yaml.safe_load((REPO / "tests" / "tiny.yaml").read_text()))
    return config


@pytest.fixture(scope="module")
def inputs(finished_run) -> tuple[dict, dict]:
    bundle = {name: finished_run / "results" / "wholehead" / "collected" / f"{name}.parquet"
              for name in ("hardware", *BUNDLE)}
    return bundle, settings_of(finished_run)


def draw(output, inputs) -> tuple[matplotlib.figure.Figure, list[tuple[Text, object]]]:
    """The figure drawn once at the saved resolution, and every text the draw put on the canvas with its extent."""
    bundle, config = inputs
    files = {name: REPO / path for name, path in output.files.items()}
    fig = render.build(output.id, {**bundle, **files}, {section: config[section] for section in output.config})
    lay_out(fig)  # as saving does: the layout solved at the PNG's resolution
    fig.set_dpi(plt.rcParams["savefig.dpi"])
    drawn: list[tuple[Text, object]] = []
    original = Text.draw

    def recording(self, renderer):
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append((self, self.get_window_extent(renderer)))

    Text.draw = recording
    try:
        fig.canvas.draw()
    finally:
        Text.draw = original
    return fig, drawn


_CACHE: dict[str, tuple] = {}


def drawn_figure(output, inputs):
    if output.id not in _CACHE:
        _CACHE[output.id] = draw(output, inputs)
    return _CACHE[output.id]


def overlap(a, b) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > TOLERANCE) and (min(a.y1, b.y1) - max(a.y0, b.y0) > TOLERANCE)


def describe(text: Text) -> str:
    return repr(text.get_text()[:60])


@pytest.mark.parametrize("output", FIGURES, ids=[o.id for o in FIGURES])
def test_no_text_overlaps_another_or_leaves_the_canvas(output, inputs):
    fig, drawn = drawn_figure(output, inputs)
    assert drawn, output.id
    canvas = fig.bbox
    outside = [describe(t) for t, box in drawn if box.x0 < canvas.x0 - TOLERANCE or box.y0 < canvas.y0 - TOLERANCE
               or box.x1 > canvas.x1 + TOLERANCE or box.y1 > canvas.y1 + TOLERANCE]
    assert not outside, f"{output.id}: texts beyond the canvas: {outside}"
    collisions = [f"{describe(a)} / {describe(b)}" for k, (a, box_a) in enumerate(drawn)
                  for b, box_b in drawn[k + 1:] if overlap(box_a, box_b)]
    assert not collisions, f"{output.id}: overlapping texts: {collisions[:8]}"


@pytest.mark.parametrize("panels", [3, 4])
@pytest.mark.parametrize("low", [0.00217, 0.0123, 0.29, 0.9, 3.1, 47.0, 180.0])
@pytest.mark.parametrize("decades", [0.05, 0.15, 0.4, 0.9, 1.3, 1.5, 2.2, 4.5])
def test_log_ticks_never_write_on_one_another_in_a_narrow_panel(low, decades, panels):
    """Whatever range a log axis spans (a sampler's seconds per volume cover a few percent or four decades, by run),
    its tick labels in a panel of a three- or four-panel row (fig12, fig11) lie apart and at least two are in view:
    fig11's CPU sampling panel, 0.00217 to 0.06 s, wrote 0.005 and 0.01 on one another."""
    from reporting.panels import log_ticks
    from reporting.style import PRINT_WIDTH_IN, apply_style

    apply_style()  # the figures' fonts and resolution, as rendering sets them
    fig, ax = plt.subplots(figsize=(PRINT_WIDTH_IN / (panels + 0.6), 2.0), dpi=plt.rcParams["savefig.dpi"])
    try:
        ax.plot([low, low * 10 ** decades], [0.0, 1.0])
        ax.set_xscale("log")
        ax.margins(x=0.1)
        log_ticks(ax)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        start, end = ax.get_xlim()
        shown = [t for t in ax.get_xticklabels() if start <= t.get_position()[0] <= end and t.get_text()]
        assert len(shown) >= 2, [t.get_text() for t in ax.get_xticklabels()]
        boxes = [t.get_window_extent(renderer) for t in shown]
        clashes = [(shown[k].get_text(), shown[k + 1].get_text()) for k in range(len(boxes) - 1)
                   if boxes[k + 1].x0 - boxes[k].x1 < 2.0]
        assert not clashes, clashes
    finally:
        plt.close(fig)


def opaque_box(text: Text) -> bool:
    """A text drawn on its own (nearly) opaque box: it stays legible over whatever line runs under it."""
    patch = text.get_bbox_patch()
    return patch is not None and patch.get_visible() and patch.get_facecolor()[3] >= 0.8


def drawn_lines(fig) -> list:
    """Every line drawn in an axes (reference lines, ceilings, floors, curves, whiskers, marks across bars) as a path in
    pixels, with what it is; gridlines and the axes' frame are not among them."""
    found = []
    for ax in fig.get_axes():
        artists = [line for line in ax.get_lines() if line.get_linestyle() not in ("None", "", " ")
                   and line.get_linewidth() > 0]
        artists += [c for c in ax.collections if isinstance(c, matplotlib.collections.LineCollection)]
        for artist in artists:
            if not artist.get_visible():
                continue
            transform = artist.get_transform()
            paths = artist.get_paths() if hasattr(artist, "get_paths") else [artist.get_path()]
            clip = ax.bbox
            for path in paths:
                pixels = transform.transform_path(path)
                if len(pixels.vertices) and np.isfinite(pixels.vertices).all():
                    found.append((pixels, clip, f"{type(artist).__name__} in {ax.get_title(loc='left')!r}"))
    return found


@pytest.mark.parametrize("output", FIGURES, ids=[o.id for o in FIGURES])
def test_no_text_lies_over_a_line(output, inputs):
    """A label over a line (a ceiling's name on its ceiling, a value across a reference line) is hard to read: every
    drawn text keeps clear of the lines drawn in the axes, or sits on an opaque box of its own."""
    fig, drawn = drawn_figure(output, inputs)
    lines = drawn_lines(fig)
    crossed = []
    for text, box in drawn:
        if opaque_box(text):
            continue
        inner = matplotlib.transforms.Bbox.from_extents(box.x0 + TOLERANCE, box.y0 + TOLERANCE, box.x1 - TOLERANCE,
                                                        box.y1 - TOLERANCE)
        for path, clip, what in lines:
            visible = matplotlib.transforms.Bbox.intersection(inner, clip)
            if visible is not None and visible.width > 0 and visible.height > 0 \
                    and path.intersects_bbox(visible, filled=False):
                crossed.append(f"{describe(text)} / {what}")
    assert not crossed, f"{output.id}: texts over lines: {crossed[:8]}"


def extents(fig, renderer) -> list:
    """What a figure draws, each with its extent in pixels: every axes with all it draws (its labels, title and
    legend), every figure legend with its handles, every text of the figure itself."""
    found = [(ax.get_tightbbox(renderer), f"axes {ax.get_title(loc='left')!r}") for ax in fig.get_axes()]
    legends = list(fig.legends) + [legend for sub in fig.subfigs for legend in sub.legends]
    found += [(legend.get_window_extent(renderer), f"legend {legend.get_title().get_text()!r}") for legend in legends]
    return [(box, what) for box, what in found if box is not None]


@pytest.mark.parametrize("output", FIGURES, ids=[o.id for o in FIGURES])
def test_nothing_is_cut_at_the_canvas_edge(output, inputs):
    fig, _ = drawn_figure(output, inputs)
    canvas = fig.bbox
    cut = [what for box, what in extents(fig, fig.canvas.get_renderer())
           if box.x0 < canvas.x0 - TOLERANCE or box.y0 < canvas.y0 - TOLERANCE or box.x1 > canvas.x1 + TOLERANCE
           or box.y1 > canvas.y1 + TOLERANCE]
    assert not cut, f"{output.id}: cut at the canvas edge: {cut}"


@pytest.mark.parametrize("output", FIGURES, ids=[o.id for o in FIGURES])
def test_no_text_is_printed_smaller_than_6pt(output, inputs):
    """The article sets each figure at the text width, or smaller where it would not fit the page beside its caption
    (reporting.article.typesetting.print_scale): its smallest text times that scale is what the reader gets."""
    fig, drawn = drawn_figure(output, inputs)
    scale = print_scale(output, REPO, fig.get_figwidth(), fig.get_figheight())
    smallest = min(text.get_fontsize() for text, _ in drawn)
    assert smallest * scale >= SMALLEST_PRINTED_PT, (
        f"{output.id}: {smallest:g} pt at {scale:.2f} of its size prints at {smallest * scale:.2f} pt")


def data_extents(ax, renderer) -> list:
    """Window extents of what an axes draws as data: its bars and other patches, its lines' points, its scatters'
    points. A patch drawn at zorder 0 or below is background (a band such as fig12's chain +- margin, under the
    grid), which a legend's frame may lie on."""
    boxes = [patch.get_window_extent(renderer) for patch in ax.patches if patch.get_visible() and patch.get_zorder() > 0]
    for line in ax.get_lines():
        points = ax.transData.transform(np.column_stack(line.get_data()).astype(float))
        boxes += [matplotlib.transforms.Bbox([p, p]) for p in points if np.isfinite(p).all()]
    for collection in ax.collections:
        offsets = collection.get_offsets()
        if len(offsets) and collection.get_offset_transform() is ax.transData:
            points = ax.transData.transform(np.asarray(offsets, dtype=float))
            boxes += [matplotlib.transforms.Bbox([p, p]) for p in points if np.isfinite(p).all()]
    return boxes


@pytest.mark.parametrize("output", FIGURES, ids=[o.id for o in FIGURES])
def test_legends_lie_outside_the_data(output, inputs):
    fig, _ = drawn_figure(output, inputs)
    renderer = fig.canvas.get_renderer()
    for ax in fig.get_axes():
        legend = ax.get_legend()
        if legend is None or not legend.get_visible():
            continue
        box = legend.get_window_extent(renderer)
        covered = [b for b in data_extents(ax, renderer) if b.width * b.height > 0 and overlap(box, b)
                   or b.width * b.height == 0 and box.contains(b.x0, b.y0)]
        assert not covered, f"{output.id}: the legend of {ax.get_title(loc='left')!r} covers {len(covered)} marks"
    assert all(isinstance(legend, Legend) for legend in fig.legends)


def marked_colours(fig, meaning: str = "variant") -> dict[str, set[str]]:
    """Colour of every artist a figure marked as drawing one name of a palette's meaning (gid '<meaning>:<name>')."""
    colours: dict[str, set[str]] = {}
    for artist in fig.findobj(lambda a: str(a.get_gid() or "").startswith(f"{meaning}:")):
        name = artist.get_gid().removeprefix(f"{meaning}:")
        if hasattr(artist, "get_facecolor") and not isinstance(artist, matplotlib.lines.Line2D):
            face = artist.get_facecolor()
            face = face[0] if np.ndim(face) == 2 else face
        else:
            face = artist.get_color()
        colours.setdefault(name, set()).add(to_hex(face, keep_alpha=False))
    return colours


# The figures that colour marks by variant (the others colour by kernel class, instruction kind or sampler, or mark
# variants by their place on an axis or their marker).
BY_VARIANT = ("fig04_memory_system", "fig05_warp_states", "fig06_priority_scores", "fig07_optimization_impact",
              "fig08_end_to_end", "fig09_quality")
BY_CLASS = ("fig01_runtime_breakdown", "fig02_top_kernels", "fig10_roofline", "fig11_optimization_ladder")
MEANINGS = ("variant", "class", "kind", "sampler", "neutral")


def test_every_variant_has_one_colour_in_every_figure_and_panel(inputs):
    seen: dict[str, set[str]] = {}
    for output in FIGURES:
        fig, _ = drawn_figure(output, inputs)
        colours = marked_colours(fig)
        if output.id in BY_VARIANT:
            assert colours, f"{output.id} marks no artist with its variant"
        for variant, found in colours.items():
            assert found == {variant_color(variant)}, (output.id, variant, found)
            seen.setdefault(variant, set()).update(found)
    assert {"baseline", "channels_last", "tf32"} <= set(seen)
    assert all(len(found) == 1 for found in seen.values())


@pytest.mark.parametrize("output", FIGURES, ids=[o.id for o in FIGURES])
def test_the_colours_a_figure_shows_together_lie_apart(output, inputs):
    """One palette per meaning: every name a figure colours has one colour, and every two of the colours it shows
    (of variants, kernel classes, instruction kinds, samplers, and the neutral colour of bars told apart by their
    names) differ by at least MIN_DISTANCE (CIEDE2000), whatever palette each comes from."""
    fig, _ = drawn_figure(output, inputs)
    shown = {}
    for meaning in MEANINGS:
        for name, found in marked_colours(fig, meaning).items():
            assert len(found) == 1, (output.id, meaning, name, found)
            shown[f"{meaning} {name}"] = found.pop()
    if output.id in BY_CLASS:
        assert any(key.startswith("class ") for key in shown), f"{output.id} marks no artist with its kernel class"
    close = [(round(colour_distance(shown[a], shown[b]), 1), a, b) for k, a in enumerate(shown)
             for b in list(shown)[k + 1:] if colour_distance(shown[a], shown[b]) < MIN_DISTANCE]
    assert not close, f"{output.id}: colours too close together: {close}"


def test_every_palette_keeps_its_colours_apart():
    for meaning, palette in PALETTES.items():
        distance, a, b = closest_pair(palette)
        assert distance >= MIN_DISTANCE, (meaning, a, b, distance)
    assert variant_color("a_variant_added_later") == variant_color("a_variant_added_later")
    assert variant_color("a_variant_added_later") in EXTRA_COLORS
    assert not set(EXTRA_COLORS) & set(VARIANT_COLORS.values())
    assert len(set(CLASS_COLORS.values())) == len(CLASS_COLORS)


@pytest.mark.parametrize("lab1, lab2, expected", [
    # Sharma, Wu and Dalal (2005), "The CIEDE2000 color-difference formula", Table 1: pairs 1, 7, 13, 17-20, 25, 34
    # (blue hues, an achromatic one, hue angles across 0/360, large differences, a green and a dark blue).
    ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
    ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
    ((50.0, 2.49, -0.001), (50.0, -2.49, 0.0009), 7.1792),
    ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
    ((50.0, 2.5, 0.0), (61.0, -5.0, 29.0), 22.8977),
    ((50.0, 2.5, 0.0), (56.0, -27.0, -3.0), 31.9030),
    ((50.0, 2.5, 0.0), (58.0, 24.0, 15.0), 19.4535),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ((22.7233, 20.0904, -46.6940), (23.0331, 14.9730, -42.5619), 2.0373),
])
def test_colour_distance_is_ciede2000(lab1, lab2, expected):
    assert delta_e_2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)
    assert delta_e_2000(lab2, lab1) == pytest.approx(expected, abs=1e-4)


def test_colour_distance_reads_srgb_through_cielab():
    # sRGB red is CIELAB (53.24, 80.09, 67.20) under D65 (e.g. Bruce Lindbloom's calculator); white and black are
    # L = 100 and 0, whose difference is 100 in CIEDE2000.
    assert colour_distance("#ff0000", "#ff0000") == 0
    assert colour_distance("#ffffff", "#000000") == pytest.approx(100.0, abs=1e-3)
    from reporting.palette import _lab

    assert _lab("#ff0000") == pytest.approx((53.24, 80.09, 67.20), abs=0.02)


def caption(output_id: str) -> str:
    return " ".join((REPO / "workflow" / "report" / f"{output_id}.rst").read_text().split())


def test_captions_state_the_unit_kinds_and_order_the_code_draws():
    """Where a caption names a unit, the kinds drawn or an order, it is the one of the code's constants."""
    from profiling.instructions import CATEGORIES, UNIT
    from reporting.outputs import fig10_roofline, fig11_optimization_ladder
    from reporting.panels import TOOL_NAMES

    text = caption("fig03_instruction_mix")
    assert UNIT in text and "warp instructions per variant" not in text
    for name, label in CATEGORIES:
        assert label.split(" (")[0].split(",")[0].lower() in text.lower(), name
    text = caption("fig10_roofline")
    assert all(f"{label} peak" in text for _, label, _ in fig10_roofline.CEILINGS)
    assert "tensor-core work is not counted" not in text
    assert fig11_optimization_ladder.ORDER in caption("fig11_optimization_ladder")
    assert all(name in caption("fig01_runtime_breakdown") for name in TOOL_NAMES.values())


def teardown_module() -> None:
    _CACHE.clear()
    plt.close("all")
