"""tab08: every label measured here against the shipped reference set of the same label, metric by metric, with a
verdict and, outside the band, the likely reasons (reporting.conformance); every kernel class's share beside it."""

from __future__ import annotations

from ..conformance import conformance_table
from ..prose import Context, Inputs, join_words, verdict_counts
from ..render import Table

CAPTION = ("Conformance with the shipped reference: per label measured here, variant and metric, the reference value, "
           "the measured value, the deviation, the band of config.yaml (conformance.bands), the verdict (within; "
           "faster or slower for times; lower or higher for memory, shares and counts; not comparable; not measurable "
           "under this load for a time measured while other processes kept more than "
           "conformance.max_other_load_cores busy, whose steps spread wider than its band, whose job lies further than "
           "the band from the same run's paired rounds or, on a CPU, whose two sides ran a fixed single-core workload "
           "further than the band apart, and for kernel-class shares whose profiled step ran while the machine "
           "changed or, on a CPU, under that load or, with the same software, in an operator time outside the phase's "
           "time band) and, outside the band, the likely reasons from the provenance of both sides. "
           "Reported, never failed")


def build(job) -> Table:
    settings = job.settings["conformance"]
    table, classes, notes = conformance_table(job.results, settings["bands"], job.settings["reference_results"],
                                              settings.get("max_other_load_cores"))
    return Table(table, CAPTION, notes=notes, extra={"classes": classes})


# The article's table shows these columns, with these headers (the CSV keeps them all).
ARTICLE_COLUMNS = [("gpu", "label"), ("variant", "variant"), ("metric", "metric"), ("unit", "unit"),
                   ("reference", "reference"), ("measured", "measured"), ("deviation", "deviation"),
                   ("band", "band"), ("verdict", "verdict"), ("reasons", "likely reasons")]
ARTICLE_FORMAT_BY = ("unit",)  # its rows mix units: the numbers of each unit written one way


def describe(context: Context) -> str:
    inputs = context.inputs
    table = inputs.table("tab08_conformance")
    if table.empty:
        return "No label was checked against a reference."
    compared = table[table["variant"].notna()]
    if compared.empty or bool((table["verdict"] == "not comparable").all()):  # the table is not shown: say why
        reasons = join_words(sorted({str(r) for r in table["reasons"].dropna()}))
        return (f"Nothing here can be checked against a shipped reference: {reasons}. A label measured here and "
                "listed in `reference_results` is compared metric by metric, within the configured bands.")
    said = [f"{gpu}: {verdict_counts(rows)}" for gpu, rows in compared.groupby("gpu", sort=False)]
    return ("Each label measured here against the shipped reference set of the same label, metric by metric, "
            "within the bands of `conformance.bands`: " + "; ".join(said) + ". A run outside a band is reported "
            "with the likely reasons from both sides' provenance, never failed.")


def shown_as_table(inputs: Inputs) -> bool:
    """Not where every row is 'not comparable' (or there is none): the paragraph says so in one sentence instead."""
    table = inputs.table("tab08_conformance")
    return not (table.empty or bool((table["verdict"] == "not comparable").all()))
