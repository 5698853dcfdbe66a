"""One figure style for every output, and byte-deterministic saving (no timestamps, no random ids)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

# Every figure is drawn for print: PRINT_WIDTH_IN wide at most, which the article sets at its text width (17 cm, about
# 0.8 of it), and no text smaller than MIN_FONT_PT, so that none is printed smaller than about 6 pt.
PRINT_WIDTH_IN = 8.4
MIN_FONT_PT = 8.0


def apply_style() -> None:
    # seaborn's "whitegrid" theme as matplotlib ships it: the figures that draw with seaborn (the statistical ones,
    # fig09) import it themselves; the others keep its look without its import (about a second of each figure job's
    # start-up).
    plt.style.use(["seaborn-v0_8-whitegrid", "seaborn-v0_8-paper"])
    plt.rcParams.update(
        {
            "figure.dpi": 100,
            "savefig.dpi": 150,
            "svg.hashsalt": "medddpm",
            "pdf.fonttype": 42,
            "font.size": 9,
            "axes.titlesize": 9,
            "axes.labelsize": 8.5,
            "xtick.labelsize": MIN_FONT_PT,
            "ytick.labelsize": MIN_FONT_PT,
            "legend.fontsize": MIN_FONT_PT,
            "legend.title_fontsize": MIN_FONT_PT,
        }
    )


def lay_out(fig) -> None:
    """Solve the figure's layout once, on the PNG's renderer at the PNG's resolution, and keep it: text measured by
    the PDF renderer is a little narrower than Agg's hinted text, so a layout solved for the PDF cut the PNG's
    longest labels at the edge. The layout is in figure coordinates: the PDF keeps it too (its text then has a few
    points to spare)."""
    if fig.get_layout_engine() is None:
        return
    fig.set_dpi(plt.rcParams["savefig.dpi"])
    # What Figure.draw does first, without rasterising every artist: the engine measures text on the Agg renderer.
    fig.get_layout_engine().execute(fig)
    fig.set_layout_engine("none")
    # The solver's last bits differ from one solve to the next; rounded, equal inputs give equal files.
    for ax in fig.get_axes():
        box = ax.get_position(original=False)
        ax.set_position([round(v, 6) for v in box.bounds], which="both")


def save(fig, pdf: str | Path, png: str | Path) -> None:
    """PDF and PNG without creation dates or software stamps, so equal inputs give equal bytes."""
    lay_out(fig)
    fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None})
    fig.savefig(png, metadata={"Software": None})
    plt.close(fig)


def note(ax, text: str) -> None:
    """A statement on an empty panel (missing data is said, never left blank)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
