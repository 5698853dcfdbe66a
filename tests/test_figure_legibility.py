"""Every registered figure, rendered on what the default configuration draws (a run measured here on the CPU and the
shipped H200 set, from the tiny end-to-end run's collected tables), is legible: no two drawn texts overlap, no text
leaves the canvas, no legend lies over the data, and every variant has its one colour (reporting.palette) wherever it
is drawn. Each figure is rendered once."""

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
from reporting.palette import CLASS_COLORS, variant_color
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


def data_extents(ax, renderer) -> list:
    """Window extents of what an axes draws as data: its bars and other patches, its lines' points, its scatters'
    points."""
    boxes = [patch.get_window_extent(renderer) for patch in ax.patches if patch.get_visible()]
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


def marked_colours(fig) -> dict[str, set[str]]:
    """Colour of every artist a figure marked as drawing one variant (gid 'variant:<name>')."""
    colours: dict[str, set[str]] = {}
    for artist in fig.findobj(lambda a: str(a.get_gid() or "").startswith("variant:")):
        variant = artist.get_gid().removeprefix("variant:")
        if hasattr(artist, "get_facecolor") and not isinstance(artist, matplotlib.lines.Line2D):
            face = artist.get_facecolor()
            face = face[0] if np.ndim(face) == 2 else face
        else:
            face = artist.get_color()
        colours.setdefault(variant, set()).add(to_hex(face, keep_alpha=False))
    return colours


# The figures that colour marks by variant (the others colour by kernel class or instruction kind, or mark variants
# by their place on an axis or their marker).
BY_VARIANT = ("fig04_memory_system", "fig05_warp_states", "fig06_priority_scores", "fig07_optimization_impact",
              "fig08_end_to_end", "fig09_quality", "fig11_optimization_ladder")


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


def test_palette_is_stable_and_distinct():
    from reporting.palette import VARIANT_COLORS

    assert len(set(VARIANT_COLORS.values())) == len(VARIANT_COLORS)
    assert variant_color("a_variant_added_later") == variant_color("a_variant_added_later")
    assert variant_color("a_variant_added_later") not in VARIANT_COLORS.values()
    assert len(set(CLASS_COLORS.values())) == len(CLASS_COLORS)


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
