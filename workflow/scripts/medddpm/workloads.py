"""The two workloads of Med-DDPM, each described once: its dataset sources (which are derived here, and by which
rule), its image and mask channels, how the preparation reads its raw cases, and the words that say what its data
are. Config key `workload`; the config checks, the targets, the rules (common.smk, data.smk), the preparation jobs
and the article read them here.

The Snakefile reads this module while it builds the DAG, so it imports nothing heavy at the top: the readers and
writers import their modules when they are called.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Source:
    """A value of `dataset.source`: a folder read from `dataset.root`, or raw cases derived here (synthetic)."""

    name: str
    # What the article says the data are; {root} stands for dataset.root.
    words: str
    # A synthetic source's writer, (root, cases, shape, seed) -> the one line its job logs; None: read from disk.
    derive: Callable[[Path, int, Sequence[int], int], str] | None = None
    # The rule that derives its raw cases, and what that rule's message says it derives.
    rule: str | None = None
    derives: str = ""
    # Preparation settings the source fixes (the raw cases a synthetic source writes come in one layout).
    fixed: dict = field(default_factory=dict)

    @property
    def synthetic(self) -> bool:
        return self.derive is not None


@dataclass(frozen=True)
class Workload:
    name: str
    image_channels: int
    mask_channels: int
    sources: tuple[Source, ...]
    # (raw folder, preparation settings, case list or None) -> (cases, the reader that prepares them).
    read: Callable[[Path, dict, Path | None], tuple[list, object]]
    # The `dataset` settings its preparation depends on besides the shape, the split and the seed.
    settings: tuple[str, ...]
    # Whether a source read from disk takes `dataset.case_list`.
    takes_case_list: bool = False
    # The overlay that selects it (None: the embedded default's workload).
    overlay: str | None = None

    def source(self, name: str) -> Source:
        return next(source for source in self.sources if source.name == name)

    @property
    def source_names(self) -> tuple[str, ...]:
        return tuple(source.name for source in self.sources)


def _read_wholehead(raw: Path, settings: dict, case_list: Path | None) -> tuple[list, object]:
    from .prepare import WholeHeadReader, read_wholehead_cases

    return read_wholehead_cases(raw), WholeHeadReader(settings["scaling"])


def _read_brats(raw: Path, settings: dict, case_list: Path | None) -> tuple[list, object]:
    from .brats import BratsReader, read_brats_cases

    layout, cases = read_brats_cases(raw, settings["layout"], case_list)
    return cases, BratsReader(layout)


def _derive_wholehead(root: Path, cases: int, shape: Sequence[int], seed: int) -> str:
    from .synthetic import write_synthetic_dataset

    files = write_synthetic_dataset(root, cases, tuple(shape), seed)
    return f"wrote {len(files)} files: {cases} cases of shape {list(shape)}, seed {seed}"


def _derive_brats(root: Path, cases: int, shape: Sequence[int], seed: int) -> str:
    from .synthetic_brats import raw_shape, write_synthetic_brats

    files = write_synthetic_brats(root, cases, tuple(shape), seed)
    return (f"wrote {len(files)} files: {cases} raw BraTS cases of shape {raw_shape(shape)} for the prepared "
            f"{list(shape)}, seed {seed}")


WORKLOADS = {
    # Whole-head: one image channel generated from a two-channel mask (brain/head, tumour), 128^3 in the paper.
    "wholehead": Workload(
        "wholehead", image_channels=1, mask_channels=2,
        sources=(
            Source("synthetic", "synthetic: derived from the MNI152 template and tissue maps shipped with nilearn "
                   "[@nilearn] by random smooth deformations, intensity changes and synthetic tumours (no download), "
                   "in Med-DDPM's whole-head layout", _derive_wholehead, "synthetic_dataset",
                   "synthetic whole-head cases from the MNI152 template and tissue maps"),
            Source("wholehead", "Med-DDPM's whole-head images and masks, read from `{root}`"),
        ),
        read=_read_wholehead, settings=("scaling",)),
    # BraTS: four modalities generated from a four-channel tumour mask, 192 x 192 x 144.
    "brats": Workload(
        "brats", image_channels=4, mask_channels=4,
        sources=(
            Source("brats", "BraTS 2021 cases read from `{root}`"),
            Source("synthetic_brats", "a synthetic stand-in for BraTS 2021 (no download)", _derive_brats,
                   "synthetic_brats_dataset", "synthetic raw BraTS 2021 cases from the MNI152 tissue maps",
                   fixed={"layout": "raw"}),
        ),
        read=_read_brats, settings=("layout",), takes_case_list=True, overlay="config/brats.yaml"),
}


def workload_of(source: str) -> Workload:
    """The workload a dataset source belongs to."""
    return next(workload for workload in WORKLOADS.values() if source in workload.source_names)


def source_of(name: str) -> Source:
    return workload_of(name).source(name)


def synthetic_sources() -> list[tuple[Workload, Source]]:
    """Every synthetic source with its workload (one rule each derives its raw cases)."""
    return [(workload, source) for workload in WORKLOADS.values() for source in workload.sources if source.synthetic]


def preparation_settings(workload: str, dataset: dict) -> dict:
    """What a workload's preparation depends on besides the shape, the split and the seed: the source and the
    settings of its own (so that a setting of the other workload never re-prepares this one)."""
    spec = WORKLOADS[workload]
    source = spec.source(dataset["source"])
    return {"source": source.name, **{key: dataset[key] for key in spec.settings}, **source.fixed}


def read_raw(raw: Path, settings: dict, case_list: Path | None = None) -> tuple[list, object]:
    """The cases of a raw dataset and the reader that prepares them, from the preparation settings
    (preparation_settings: the source and its own settings)."""
    return workload_of(settings["source"]).read(raw, settings, case_list)
