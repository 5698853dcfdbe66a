"""One figure style for every output, and byte-deterministic saving (no timestamps, no random ids)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

VARIANT_ORDER = ["baseline", "torch_defaults", "tf32", "channels_last", "tf32_channels_last"]


def apply_style() -> None:
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.15)
    plt.rcParams.update(
        {
            "figure.dpi": 100,
            "savefig.dpi": 150,
            "svg.hashsalt": "medddpm",
            "pdf.fonttype": 42,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
        }
    )


def variant_order(variants) -> list[str]:
    known = [v for v in VARIANT_ORDER if v in set(variants)]
    return known + sorted(set(variants) - set(known))


def save(fig, pdf: str | Path, png: str | Path) -> None:
    """PDF and PNG without creation dates or software stamps, so equal inputs give equal bytes."""
    fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None})
    fig.savefig(png, metadata={"Software": None})
    plt.close(fig)


def note(ax, text: str) -> None:
    """A statement on an empty panel (missing data is said, never left blank)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes, fontsize=10)
    ax.set_xticks([])
    ax.set_yticks([])
