"""tab08: every label measured here against the shipped reference set of the same label, metric by metric, with a
verdict and, outside the band, the likely reasons (reporting.conformance); every kernel class's share beside it."""

from __future__ import annotations

from ..conformance import conformance_table
from ..render import Table

CAPTION = ("Conformance with the shipped reference: per label measured here, variant and metric, the reference value, "
           "the measured value, the deviation, the band of config.yaml (conformance.bands), the verdict (within; "
           "faster or slower for times; lower or higher for memory, shares and counts; not comparable) and, outside "
           "the band, the likely reasons from the provenance of both sides. Reported, never failed")


def build(job) -> Table:
    table, classes, notes = conformance_table(job.results, job.settings["conformance"]["bands"])
    return Table(table, CAPTION, notes=notes, extra={"classes": classes})
