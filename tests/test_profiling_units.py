"""Units of the profilers' exports: every unit and prefix that Nsight Compute and Nsight Systems print, converted to
base units by factors written down here from the SI definitions; and the readers run over generated exports (random
units, random column orders, separators, missing values) whose numbers are known, with hypothesis.

The units that the real exports of this repository carry (tests/fixtures/profiling, data/reference/wholehead/h200, read with
--print-units base) are: "", %, inst, byte, Kbyte, Mbyte, block, cycle, byte/block, ns, us, warp, inst/cycle,
register/thread, pass, hz, cluster, SM, thread, %/register, %/byte. Without --print-units base, ncu scales each value
to a prefixed unit (usecond, Mbyte, Kcycle, Ginst, Gbyte/second, cycle/nsecond, Ghz, ...).
"""

from __future__ import annotations

import csv
import io
import math
import os
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiling import kernels, ncu, nsys, tables
from profiling.errors import ProfilingError
from profiling.units import scale_to_base

# Every property test runs the same examples on every machine (derandomize) and leaves no example database behind;
# HYPOTHESIS_EXAMPLES lowers their number (tests/mutation.py runs them once per mutant).
EXAMPLES = int(os.environ.get("HYPOTHESIS_EXAMPLES", "40"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

# (printed unit, factor to the base unit, base unit), from the definitions: 1 us = 1e3 ns, 1 Kbyte = 1e3 bytes, ...
TIME = [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9),
        ("nsecond", 1.0), ("usecond", 1e3), ("msecond", 1e6), ("second", 1e9)]
SI = [("", 1.0), ("K", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12)]
UNITS = (
    [(unit, factor, "nsecond") for unit, factor in TIME]
    + [(prefix + base, factor, base) for base in ("byte", "cycle", "inst", "warp", "block", "thread", "hz")
       for prefix, factor in SI]
    + [("%", 1.0, "%"), ("", 1.0, ""), ("ratio", 1.0, "ratio"), ("pass", 1.0, "pass"), ("cluster", 1.0, "cluster")]
    # rates: both sides in base units, so bytes per second become bytes per nanosecond
    + [("byte/second", 1e-9, "byte/nsecond"), ("Kbyte/second", 1e-6, "byte/nsecond"),
       ("Mbyte/second", 1e-3, "byte/nsecond"), ("Gbyte/second", 1.0, "byte/nsecond"),
       ("Tbyte/second", 1e3, "byte/nsecond"), ("byte/usecond", 1e-3, "byte/nsecond"),
       ("byte/ns", 1.0, "byte/nsecond"), ("Gbyte/s", 1.0, "byte/nsecond"), ("Mbyte/ms", 1.0, "byte/nsecond"),
       ("cycle/nsecond", 1.0, "cycle/nsecond"), ("cycle/usecond", 1e-3, "cycle/nsecond"),
       ("cycle/second", 1e-9, "cycle/nsecond"), ("Kcycle/second", 1e-6, "cycle/nsecond"),
       ("inst/cycle", 1.0, "inst/cycle"), ("Kinst/cycle", 1e3, "inst/cycle"), ("inst/Kcycle", 1e-3, "inst/cycle"),
       ("warp/cycle", 1.0, "warp/cycle"), ("byte/block", 1.0, "byte/block"), ("Kbyte/block", 1e3, "byte/block"),
       ("register/thread", 1.0, "register/thread"), ("%/register", 1.0, "%/register"), ("%/byte", 1.0, "%/byte"),
       ("inst/nsecond", 1.0, "inst/nsecond"), ("Ginst/second", 1.0, "inst/nsecond")]
)
# Units this reader does not understand: their values are kept as printed, with the printed unit (never scaled by a
# guessed factor). ncu prints decimal prefixes only; binary ones (KiB) and capitalised words (SM) are not converted.
NOT_UNDERSTOOD = ["KiB", "MiB", "GiB", "SM", "Xbyte", "byte/second/second", "byte/Second"]


@pytest.mark.parametrize(("unit", "factor", "base"), UNITS, ids=[u or "(none)" for u, _, _ in UNITS])
def test_every_printed_unit_converts_to_its_base_unit(unit, factor, base):
    got = scale_to_base(unit)
    assert got is not None
    assert got[0] == pytest.approx(factor, rel=1e-12) and got[1] == base
    assert scale_to_base(f" {unit} ") == got  # padding in the units row


@pytest.mark.parametrize("unit", NOT_UNDERSTOOD)
def test_units_not_understood_are_not_guessed(unit):
    assert scale_to_base(unit) is None


# --- generated ncu raw pages ------------------------------------------------------------------------------------

IDENTITY = ["Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size", "Grid Size",
            "Device"]
KERNEL_NAMES = [
    "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32",
    "void cudnn::ops::nchwToNhwcKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>"
    "(cudnn::ops::nchw2nhwc_params_t<float>, const float *, float *)",
    "void at::<unnamed>::RowwiseMomentsCUDAKernel<float>(long, T1, const T1 *, T1 *, T1 *)",
    'a kernel with "quotes", commas',
]
# Metric families with the units ncu may print them in.
METRIC_UNITS = {
    "gpu__time_duration.sum": [u for u, _ in TIME],
    "dram__bytes_read.sum": ["byte", "Kbyte", "Mbyte", "Gbyte"],
    "sm__cycles_elapsed.max": ["cycle", "Kcycle", "Mcycle", "Gcycle"],
    "smsp__inst_executed.sum": ["inst", "Kinst", "Minst", "Ginst"],
    "lts__t_sector_hit_rate.pct": ["%"],
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": ["", "ratio"],
    "dram__throughput.avg.per_second": ["byte/second", "Kbyte/second", "Mbyte/second", "Gbyte/second",
                                        "Tbyte/second"],
    "sm__inst_executed.avg.per_cycle_active": ["inst/cycle"],
    "gpc__cycles_elapsed.avg.per_second": ["hz", "Khz", "Mhz", "Ghz", "cycle/second", "cycle/usecond",
                                           "cycle/nsecond"],
}
FACTORS = {unit: (factor, base) for unit, factor, base in UNITS}


def printed_number(value: float, decimals: int) -> str:
    """A number as ncu prints it: thousands separators, a fixed number of decimals."""
    return f"{value:,.{decimals}f}"


@st.composite
def ncu_raw_pages(draw):
    """(CSV text, {metric: (unit, [value per kernel in ID order, NaN for n/a])}, names in ID order)."""
    # A random subset in a random order; the duration is always there (every time share is computed from it, and the
    # reader refuses an export without it: tests/test_errors.py).
    others = sorted(set(METRIC_UNITS) - {"gpu__time_duration.sum"})
    metrics = draw(st.permutations(["gpu__time_duration.sum", *draw(st.lists(st.sampled_from(others),
                                                                             max_size=len(others), unique=True))]))
    identity = draw(st.permutations(IDENTITY))
    count = draw(st.integers(1, 5))
    order = range(count)  # ncu writes the rows in launch order; a gap or a reordering is refused (test_errors)
    names = [draw(st.sampled_from(KERNEL_NAMES)) for _ in range(count)]
    expected, printed = {}, {}
    for metric in metrics:
        unit = draw(st.sampled_from(METRIC_UNITS[metric]))
        decimals = draw(st.integers(0, 3))
        values, texts = [], []
        for _ in range(count):
            number = round(draw(st.floats(0, 5e6, allow_nan=False)), decimals)
            texts.append(printed_number(number, decimals))
            values.append(float(texts[-1].replace(",", "")))
        expected[metric], printed[metric] = (unit, values), texts
    header = ["ID", *identity, "CC", *metrics]
    units = [""] * (len(identity) + 2) + [expected[m][0] for m in metrics]
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(header)
    writer.writerow(units)
    for kernel in order:
        cells = {"Kernel Name": names[kernel], "Process ID": "4711", "Process Name": "python3", "Device": "0",
                 "Host Name": "127.0.0.1", "Context": "1", "Stream": "7", "Block Size": "(256, 1, 1)",
                 "Grid Size": "(64, 1, 1)"}
        writer.writerow([str(kernel), *[cells[c] for c in identity], "9.0", *[printed[m][kernel] for m in metrics]])
    notice = draw(st.sampled_from(["", "==PROF== Disconnected from process 4711\n"]))
    return notice + out.getvalue(), expected, names


def identity_order(text: str) -> list[str]:
    """The launch columns of a generated page between ID and CC, in their order."""
    header = next(csv.reader(io.StringIO(text.split("\n", 1)[1] if text.startswith("==") else text)))
    return header[1:header.index("CC")]


@PROPERTY
@given(ncu_raw_pages())
def test_ncu_raw_reader_converts_generated_pages(page):
    text, expected, names = page
    raw = ncu.parse_raw(text)
    assert list(raw["id"]) == list(range(len(names)))
    assert list(raw["kernel_name"]) == names
    identity = ["id", *[c.lower().replace(" ", "_") for c in identity_order(text)], "cc"]
    assert list(raw.columns) == identity + list(expected)  # launch columns renamed, metrics as ncu names them
    for metric, (unit, values) in expected.items():
        factor, base = FACTORS[unit]
        want = np.array(values) * factor
        got = raw[metric].to_numpy(dtype=float)
        assert np.array_equal(np.isnan(got), np.isnan(want)), metric
        np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=1e-12, err_msg=metric)
        if not np.isnan(want).all():
            assert raw.attrs["units"][metric] == base
    if "gpu__time_duration.sum" in expected:
        tidy = tables.from_ncu(raw)
        unit, values = expected["gpu__time_duration.sum"]
        np.testing.assert_allclose(tidy["duration_ns"], np.array(values) * FACTORS[unit][0], rtol=1e-12)


def test_a_short_row_is_named_by_its_line_number_counting_the_header_as_one():
    text = '"ID","Kernel Name","CC","gpu__time_duration.sum"\n"","","","ns"\n"0","k","9.0","1"\n"1","k","9.0"\n'
    assert ncu.check_raw_csv(text).startswith("ncu raw CSV is truncated: row 4 has 3 of 4 columns; fix:")
    summary = "Time (%),Total Time (ns),Instances,Name\n50.0,10,1,a\n50.0,10,1,b\n50.0,10\n"
    assert nsys.check_csv(summary).startswith("nsys kernel-summary CSV is truncated: row 4 has 2 of 4 columns;")


def test_ncu_raw_keeps_not_understood_units_as_printed():
    text = ('"ID","Kernel Name","CC","gpu__time_duration.sum","sm__count","l1tex__data_size"\n"","","","ns","SM","KiB"\n'
            '"0","k","9.0","2,000","132","1,024"\n')
    raw = ncu.parse_raw(text)
    assert raw.loc[0, "sm__count"] == 132.0 and raw.loc[0, "l1tex__data_size"] == 1024.0
    assert raw.attrs["units"] == {"gpu__time_duration.sum": "nsecond", "sm__count": "SM", "l1tex__data_size": "KiB"}


# --- generated ncu details pages --------------------------------------------------------------------------------

DETAILS_HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
                  "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value",
                  "Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup"]


@st.composite
def ncu_details_pages(draw):
    """(CSV text, rule rows as (kernel id, rule, speedup or NaN) in file order)."""
    rows, rules = [], []
    for kernel in range(draw(st.integers(1, 4))):
        prefix = [str(kernel), "1", "python3", "127.0.0.1", KERNEL_NAMES[kernel % 2], "1", "7", "(1, 1, 1)",
                  "(1, 1, 1)", "0", "9.0", "SpeedOfLight"]
        for _ in range(draw(st.integers(0, 3))):
            # Metric rows stop after an empty rule name, as ncu writes them.
            rows.append(prefix + ["Duration", "ns", "1,024", ""])
        for index in range(draw(st.integers(0, 3))):
            speedup = draw(st.one_of(st.none(), st.floats(0, 5000, allow_nan=False).map(lambda v: round(v, 2))))
            text = "" if speedup is None else printed_number(speedup, 2)
            rule = f"Rule{index}"
            rows.append(prefix + ["", "", "", rule, "OPT", "a description, with a comma", "local", text])
            rules.append((kernel, rule, math.nan if speedup is None else float(text.replace(",", ""))))
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(DETAILS_HEADER)
    writer.writerows(rows)
    return out.getvalue(), rules


@PROPERTY
@given(ncu_details_pages())
def test_ncu_details_reader_keeps_exactly_the_rule_rows(page):
    text, rules = page
    parsed = ncu.parse_details(text)
    assert list(parsed.columns) == ncu.RULE_COLUMNS
    assert list(zip(parsed["kernel_id"], parsed["rule"])) == [(k, r) for k, r, _ in rules]
    want = np.array([s for _, _, s in rules], dtype=float)
    got = parsed["estimated_speedup_pct"].to_numpy(dtype=float)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=1e-12)
    assert set(parsed["section"]) <= {"SpeedOfLight"} and set(parsed["speedup_type"]) <= {"local"}
    assert set(parsed["rule_type"]) <= {"OPT"}
    assert set(parsed["description"]) <= {"a description, with a comma"}


# --- generated nsys kernel summaries ----------------------------------------------------------------------------

NSYS_TIME = [("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)]
# Column words of both releases: current ("Avg (ns)") and older ("Average"; no unit in the header means ns).
NSYS_WORDS = {"total_ns": ["Total Time"], "avg_ns": ["Avg", "Average"], "med_ns": ["Med", "Median"],
              "min_ns": ["Min", "Minimum"], "max_ns": ["Max", "Maximum"], "stddev_ns": ["StdDev", "Std Dev"]}


@st.composite
def nsys_summaries(draw):
    """(CSV text, {column: values in ns}, instances, names)."""
    columns = ["total_ns", *draw(st.lists(st.sampled_from(sorted(set(NSYS_WORDS) - {"total_ns"})), unique=True))]
    count = draw(st.integers(1, 4))
    names = [f"kernel_{k}" for k in range(count)]
    instances = [draw(st.integers(1, 5000)) for _ in range(count)]
    header, cells, expected = [], [], {}
    for column in columns:
        word = draw(st.sampled_from(NSYS_WORDS[column]))
        unit, factor = draw(st.sampled_from([*NSYS_TIME, ("", 1.0)]))
        numbers = [round(draw(st.floats(0, 1e7, allow_nan=False)), 1) for _ in range(count)]
        header.append(f"{word} ({unit})" if unit else word)
        cells.append([printed_number(n, 1) for n in numbers])
        expected[column] = [n * factor for n in numbers]
    # nsys's Time (%): each kernel's share of the summary's whole time, printed to one decimal (the reader checks
    # the rows against it).
    whole = sum(expected["total_ns"])
    shares = [f"{100 * t / whole:.1f}" if whole > 0 else "0.0" for t in expected["total_ns"]]
    header += ["Time (%)", "Instances", "Name"]
    cells += [shares, [str(i) for i in instances], names]
    for extra in draw(st.lists(st.sampled_from(["Category", "Operation", "GridXYZ"]), unique=True)):
        header.append(extra)  # columns of other releases, ignored wherever they stand
        cells.append(["x"] * count)
    order = draw(st.permutations(range(len(header))))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([header[i] for i in order])
    for row in range(count):
        writer.writerow([cells[i][row] for i in order])
    notice = draw(st.sampled_from(["", "Processing [report.sqlite] with [cuda_gpu_kern_sum.py]...\n\n"]))
    return notice + out.getvalue(), expected, instances, names


@PROPERTY
@given(nsys_summaries())
def test_nsys_reader_converts_generated_summaries(tmp_path_factory, summary):
    text, expected, instances, names = summary
    path = tmp_path_factory.mktemp("nsys") / "kern_sum.csv"
    path.write_text(text)
    table = nsys.parse_kern_sum(path)
    assert list(table.columns) == nsys.KERN_SUM_COLUMNS
    assert list(table["name"]) == names and list(table["instances"]) == instances
    for column, values in expected.items():
        np.testing.assert_allclose(table[column].to_numpy(dtype=float), values, rtol=1e-12, err_msg=column)
    for column in set(NSYS_WORDS) - set(expected):
        assert table[column].isna().all()
    assert table["instances"].dtype.kind == "i"
    tidy = tables.from_nsys(table)
    np.testing.assert_allclose(tidy["duration_ns"], expected["total_ns"], rtol=1e-12)
    assert list(tidy["instances"]) == instances


def test_nsys_summary_starts_at_its_header_and_names_what_it_lacks(tmp_path):
    path = tmp_path / "kern_sum.csv"
    # A notice with a "Name" cell and one with an "Instances" cell come before the table: neither is its header.
    path.write_text("Report,Name\nInstances (all),x\nTime (%),Total Time (ns),Instances,Med (ns),Weird (col,Name\n"
                    "100.0,\"1,500\",3,,y,kernel\n")
    table = nsys.parse_kern_sum(path)
    assert table.loc[0, "total_ns"] == 1500.0 and table.loc[0, "instances"] == 3 and table.loc[0, "name"] == "kernel"
    assert math.isnan(table.loc[0, "med_ns"])  # an empty cell is a missing value
    path.write_text("Time (%),Instances,Name\n100.0,3,kernel\n")
    with pytest.raises(ProfilingError) as caught:
        nsys.parse_kern_sum(path)
    assert str(caught.value) == f"{path}: nsys kernel-summary CSV lacks ['total_ns']; fix: export cuda_gpu_kern_sum"
    assert nsys.check_csv("") == (
        "nsys kernel-summary CSV is empty or has no header: the report name is unknown to this nsys or no kernels "
        "were captured (the cudaProfilerApi capture range never opened); fix: run nsys stats again (try the report "
        "names cuda_gpu_kern_sum, then gpukernsum)")


@pytest.mark.parametrize("column, value", [("Total Time (ns)", "n/a"), ("Instances", "")])
def test_nsys_value_that_is_not_a_number_is_refused_naming_kernel_value_and_column(tmp_path, column, value):
    """The second kernel's cell is the bad one: the message names that kernel (not the first), the cell as printed
    and the column as headed. A bad cell in a column the summary does not sum (Med) stays a missing value."""
    path = tmp_path / "kern_sum.csv"
    cells = {"Total Time (ns)": "2000", "Instances": "4"} | {column: value}
    path.write_text("Time (%),Total Time (ns),Instances,Med (ns),Name\n"
                    "60.0,\"3,000\",6,n/a,first_kernel\n"
                    f"40.0,\"{cells['Total Time (ns)']}\",{cells['Instances']},500,second_kernel\n")
    with pytest.raises(ProfilingError) as caught:
        nsys.parse_kern_sum(path)
    assert str(caught.value) == (
        f"{path}: kernel 'second_kernel' has {value!r} in column {column!r}, not a number; a summary over it would "
        "be NaN; fix: export the kernel summary again with nsys stats")


def test_nsys_long_kernel_names_are_cut_at_80_characters_in_the_message(tmp_path):
    path = tmp_path / "kern_sum.csv"
    name = "k" * 79 + "XY"
    path.write_text(f"Time (%),Total Time (ns),Instances,Name\n100.0,-,1,{name}\n")
    with pytest.raises(ProfilingError) as caught:
        nsys.parse_kern_sum(path)
    assert f"kernel {name[:80]!r} has '-'" in str(caught.value) and "XY" not in str(caught.value)


def test_torch_rows_in_microseconds_become_nanoseconds():
    rows = pd.DataFrame({"name": ["sm80_xmma_fprop_k", "aten::add_"], "device": ["gpu", "cpu"],
                         "start_us": [3.0, 1.0], "duration_us": [2.5, 0.125]})
    tidy = tables.from_torch(rows)
    assert list(tidy["name"]) == ["aten::add_", "sm80_xmma_fprop_k"]  # in start order
    assert list(tidy["duration_ns"]) == [125.0, 2500.0]
    assert list(tidy["kernel_class"]) == ["elementwise", "conv_fprop"]  # CPU operator, GPU kernel


# --- time-weighted means and sums over generated runs -----------------------------------------------------------

CLASSES = ["conv_fprop", "conv_wgrad", "layout_conversion", "dtype_cast", "elementwise", "other"]


@st.composite
def runs(draw):
    count = draw(st.integers(1, 8))
    positive = st.floats(0.5, 1e6, allow_nan=False)
    column = lambda values: [draw(values) for _ in range(count)]  # noqa: E731
    return pd.DataFrame({
        "source": "ncu",
        "kernel_class": column(st.sampled_from(CLASSES)),
        "instances": column(st.integers(1, 3)),
        "duration_ns": column(positive),
        "sm_cycles": column(positive),
        "warp_instructions": column(positive),
        "thread_instructions": column(positive),
        "ipc": column(st.floats(0, 4, allow_nan=False)),
        "tensor_pipe_pct": column(st.floats(0, 100, allow_nan=False)),
        "dram_read_bytes": column(positive),
        "dram_write_bytes": column(positive),
        "tensor_flop": column(positive),
        "fp32_flop": column(positive),
    })


@PROPERTY
@given(runs())
def test_summary_sums_and_time_weighted_means_of_generated_runs(run):
    summary = tables.summarise(run).set_index("kernel_class")
    assert list(summary.index) == [c for c in kernels.CLASS_NAMES if c in set(run["kernel_class"])] + ["all"]
    total = math.fsum(run["duration_ns"])
    groups = {c: run[run["kernel_class"] == c] for c in set(run["kernel_class"])} | {"all": run}
    for name, group in groups.items():
        row = summary.loc[name]
        time = math.fsum(group["duration_ns"])
        assert row["kernels"] == sum(group["instances"])
        assert row["time_ns"] == pytest.approx(time, rel=1e-12)
        assert row["time_share"] == pytest.approx(time / total, rel=1e-12)
        for column in ("sm_cycles", "warp_instructions", "thread_instructions", "tensor_flop", "fp32_flop"):
            assert row[column] == pytest.approx(math.fsum(group[column]), rel=1e-12), column
        assert row["dram_bytes"] == pytest.approx(math.fsum(group["dram_read_bytes"]) +
                                                  math.fsum(group["dram_write_bytes"]), rel=1e-12)
        for column in ("ipc", "tensor_pipe_pct"):  # each kernel counts for its share of the time
            weighted = math.fsum(v * d for v, d in zip(group[column], group["duration_ns"])) / time
            assert row[column] == pytest.approx(weighted, rel=1e-9, abs=1e-12), column
    for name, column in (("layout_conversion", "layout_conversion_share"), ("dtype_cast", "dtype_cast_share")):
        share = math.fsum(run.loc[run["kernel_class"] == name, "duration_ns"]) / total
        assert summary.loc["all", column] == pytest.approx(share, rel=1e-12, abs=0.0)
        assert summary.drop(index="all")[column].isna().all()


# --- the .ncu-rep reader through a stand-in for NVIDIA's ncu_report module -------------------------------------


class _Metric:
    def __init__(self, value):
        self.value = value

    def kind(self):
        return "string" if isinstance(self.value, str) else "double"

    def as_double(self):
        return float(self.value)


class _Action:
    def __init__(self, name, metrics, rules):
        self._name, self.metrics, self.rules = name, metrics, rules

    def name(self, base):
        assert base == "demangled"
        return self._name

    def metric_names(self):
        return list(self.metrics)

    def metric_by_name(self, name):
        return _Metric(self.metrics[name]) if name in self.metrics else None

    def rule_results_as_dicts(self):
        return self.rules


class _Range:
    def __init__(self, actions):
        self.actions = actions

    def num_actions(self):
        return len(self.actions)

    def action_by_idx(self, index):
        return self.actions[index]


def fake_ncu_report(ranges):
    """A module with the parts of ncu_report's interface that read_report uses."""
    enum = lambda **values: type("Enum", (), values)  # noqa: E731
    context = type("Context", (), {"num_ranges": lambda self: len(ranges),
                                   "range_by_idx": lambda self, i: _Range(ranges[i])})()
    return type("ncu_report", (), {
        "load_report": staticmethod(lambda path: context if path == "run.ncu-rep" else pytest.fail(f"path {path!r}")),
        "IAction": enum(NameBase_DEMANGLED="demangled"), "IMetric": enum(ValueKind_STRING="string"),
        "MsgType": enum(INFO=1, OPTIMIZATION=2, WARNING=3), "SpeedupType": enum(LOCAL=1, GLOBAL=2),
    })


def test_ncu_report_reader_numbers_kernels_across_ranges_and_reads_rules(monkeypatch):
    rule = {"section_identifier": "SpeedOfLight", "rule_identifier": "SOLBottleneck",
            "rule_message": {"type": 2, "message": "memory bound"}, "speedup_estimation": {"type": 1, "speedup": 12.5}}
    as_text = {"section_identifier": "Occupancy", "rule_identifier": "AchievedOccupancy",
               "rule_message": "{'type': 3, 'message': 'low'}", "speedup_estimation": "{'type': 2, 'speedup': None}"}
    broken = {"rule_message": "not a dict {", "speedup_estimation": 7}
    unknown = {"rule_identifier": "X", "rule_message": {"message": "no type"}, "speedup_estimation": {"type": 9,
                                                                                                   "speedup": 3}}
    ranges = [[_Action("k0", {"device__attribute_display_name": "NVIDIA H200", "gpu__time_duration.sum": 100,
                              "sm__cycles_elapsed.max": 7}, [rule])],
              [_Action("k1", {"gpu__time_duration.sum": 300.5}, [as_text, broken, unknown]),
               _Action("k2", {}, [])]]
    monkeypatch.setattr(ncu, "import_ncu_report", lambda: fake_ncu_report(ranges))
    kernels, rules = ncu.read_report("run.ncu-rep")
    assert list(kernels["id"]) == [0, 1, 2] and list(kernels["kernel_name"]) == ["k0", "k1", "k2"]
    assert list(kernels["gpu__time_duration.sum"])[:2] == [100.0, 300.5]
    assert "device__attribute_display_name" not in kernels  # text metrics are left out
    assert kernels.loc[0, "sm__cycles_elapsed.max"] == 7.0 and kernels["sm__cycles_elapsed.max"].iloc[1:].isna().all()
    assert list(rules.columns) == ncu.RULE_COLUMNS
    assert rules.loc[0].tolist() == [0, "k0", "SpeedOfLight", "SOLBottleneck", "OPTIMIZATION", "memory bound", "local",
                                     12.5]
    assert rules.loc[1, ["kernel_id", "rule_type", "description", "speedup_type"]].tolist() == [1, "WARNING", "low",
                                                                                                 "global"]
    assert math.isnan(rules.loc[1, "estimated_speedup_pct"]) and math.isnan(rules.loc[2, "estimated_speedup_pct"])
    assert rules.loc[2, ["section", "rule", "rule_type", "description", "speedup_type"]].tolist() == [""] * 5
    # A message without a type and a speedup of a type the module does not name.
    assert rules.loc[3, ["rule", "rule_type", "description", "speedup_type", "estimated_speedup_pct"]].tolist() == [
        "X", "", "no type", "", 3.0]
    # An explicit metric list: only those, in that order; a metric a kernel lacks is NaN.
    kernels, _ = ncu.read_report("run.ncu-rep", metrics=["no_such.metric", "gpu__time_duration.sum"])
    assert list(kernels.columns) == ["id", "kernel_name", "no_such.metric", "gpu__time_duration.sum"]
    assert kernels["no_such.metric"].isna().all()
    assert kernels["gpu__time_duration.sum"].tolist()[:2] == [100.0, 300.5] and math.isnan(kernels.iloc[2, 3])
    assert "sm__cycles_elapsed.max" not in kernels
    # A report without rule results: the rules table still has its columns.
    monkeypatch.setattr(ncu, "import_ncu_report", lambda: fake_ncu_report([[_Action("k", {}, [])]]))
    assert list(ncu.read_report("run.ncu-rep")[1].columns) == ncu.RULE_COLUMNS


def test_ncu_is_found_on_path_or_as_the_newest_install(monkeypatch, tmp_path):
    monkeypatch.setattr(ncu, "NCU_INSTALL_ROOT", tmp_path)
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    assert ncu.locate_ncu() is None
    for version in ("2024.1.0", "2025.3.1", "2025.10.0", "2023.9.9"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "ncu").write_text("")
    assert ncu.locate_ncu() == str(tmp_path / "2025.10.0" / "ncu")  # versions compared as numbers
    monkeypatch.setattr(ncu.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert ncu.locate_ncu() == "/usr/bin/ncu"


def test_ncu_report_module_is_imported_from_the_newest_install(monkeypatch, tmp_path):
    monkeypatch.setattr(ncu, "NCU_INSTALL_ROOT", tmp_path)
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.delitem(sys.modules, "ncu_report", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if "nsight" not in p])
    assert ncu.import_ncu_report() is None
    for version, marker in (("2024.1.0", "old"), ("2025.3.1", "new")):
        folder = tmp_path / version / "extras" / "python"
        folder.mkdir(parents=True)
        (folder / "ncu_report.py").write_text(f"VERSION = {marker!r}\n")
    module = ncu.import_ncu_report()
    assert module.VERSION == "new" and sys.path[0] == str(tmp_path / "2025.3.1" / "extras" / "python")
    monkeypatch.delitem(sys.modules, "ncu_report")


# --- older and smaller pages, and the exact one-line messages ---------------------------------------------------


def test_ncu_raw_page_without_a_cc_column_or_without_kernels():
    # Releases without the CC column: the launch columns are known by name, the rest are metrics.
    text = ('"ID","Kernel Name","Odd Launch Column (x)","Device","dram__bytes_read.sum","gpu__time_duration.sum"\n'
            '"","","","","Kbyte","ns"\n"0","a","p","0","1,000","5"\n"1","b","q","0","2","6"\n')
    raw = ncu.parse_raw(text)
    assert list(raw.columns) == ["id", "kernel_name", "Odd Launch Column (x)", "device", "dram__bytes_read.sum",
                                 "gpu__time_duration.sum"]
    assert list(raw["kernel_name"]) == ["a", "b"] and list(raw["dram__bytes_read.sum"]) == [1e6, 2e3]
    assert raw["id"].dtype.kind == "i" and list(raw.index) == [0, 1]
    # A launch column ncu adds before CC that this reader does not know is kept under a snake-case name.
    text = ('"ID","Kernel Name","Odd Launch Column (x)","CC","gpu__time_duration.sum"\n"","","","","ns"\n'
            '"0","a","p","9.0","3"\n')
    raw = ncu.parse_raw(text)
    assert list(raw.columns) == ["id", "kernel_name", "odd_launch_column_x", "cc", "gpu__time_duration.sum"]
    # A profile that matched no kernel: a header, a units row and nothing else is an empty table, not an error.
    empty = '"ID","Kernel Name","CC","gpu__time_duration.sum"\n"","","","ns"\n'
    assert ncu.check_raw_csv(empty) is None and len(ncu.parse_raw(empty)) == 0


def test_ncu_details_page_of_an_older_release_without_the_optional_rule_columns():
    text = ('"ID","Kernel Name","Section Name","Metric Name","Rule Name"\n"0","k","SOL","Duration",""\n'
            '"0","k","SOL","Memory"\n'  # a metric row that stops before the rule columns
            '"0","k","SOL","","SOLBottleneck"\n')
    rules = ncu.parse_details(text)
    assert len(rules) == 1 and rules.loc[0].tolist()[:7] == [0, "k", "SOL", "SOLBottleneck", "", "", ""]
    assert math.isnan(rules.loc[0, "estimated_speedup_pct"]) and rules["kernel_id"].dtype.kind == "i"
    no_rules = ncu.parse_details('"ID","Kernel Name","Section Name"\n"0","k","SOL"\n')
    assert no_rules.empty and list(no_rules.columns) == ncu.RULE_COLUMNS


FIX_RAW = "fix: export again with ncu -i REPORT --csv --page raw and keep the whole output"


@pytest.mark.parametrize(("text", "message"), [
    ("", f"ncu raw CSV has no header row (empty or failed export); {FIX_RAW}"),
    ('"ID","Kernel Name"\n"0","k"\n', f"ncu raw CSV has no units row after the header (truncated or not a --page raw "
                                      f"export); {FIX_RAW}"),
    ('"ID","Kernel Name"\n', f"ncu raw CSV has no units row after the header (truncated or not a --page raw "
                             f"export); {FIX_RAW}"),
    ('"ID","Kernel Name"\n"","\n', "ncu raw CSV is truncated or malformed (unexpected end of data); " + FIX_RAW),
], ids=["empty", "no units row", "header only", "cut in a quote"])
def test_ncu_raw_page_problems_are_named_in_one_line(text, message):
    assert ncu.check_raw_csv(text) == message
    with pytest.raises(ProfilingError) as caught:
        ncu.parse_raw(text)
    assert str(caught.value) == message


# A page of three kernels: a metric the summary sums (sm__cycles_elapsed.max), a text metric without a unit
# (launch__device_name: kept as text), a metric the summary does not read (l1tex__hit_rate.pct: n/a stays NaN).
VALUES_PAGE = ('"ID","Kernel Name","CC","launch__device_name","l1tex__hit_rate.pct","sm__cycles_elapsed.max",'
               '"gpu__time_duration.sum"\n"","","","","%","cycle","usecond"\n'
               '"0","k0","9.0","H200","n/a","1,000","{d0}"\n"1","k1","9.0","H200","50","{c1}","{d1}"\n'
               '"2","k2","9.0","H200","60","3000","{d2}"\n')


def values_page(d0="1", d1="2", d2="3", c1="2000") -> str:
    return VALUES_PAGE.format(d0=d0, d1=d1, d2=d2, c1=c1)


def test_ncu_raw_page_keeps_text_metrics_and_not_applicable_values():
    raw = ncu.parse_raw(values_page(), "p.csv")
    assert list(raw["launch__device_name"]) == ["H200"] * 3
    assert math.isnan(raw.loc[0, "l1tex__hit_rate.pct"]) and list(raw["l1tex__hit_rate.pct"])[1:] == [50.0, 60.0]
    assert list(raw["gpu__time_duration.sum"]) == [1e3, 2e3, 3e3] and list(raw["sm__cycles_elapsed.max"]) == [
        1000.0, 2000.0, 3000.0]


@pytest.mark.parametrize(("page", "message"), [
    (values_page(c1="lots"), "p.csv: kernel 1 (k1) has 'lots' in column sm__cycles_elapsed.max, which is not a "
     "number; fix: export the raw page again from the report (ncu -i REPORT --csv --page raw), an edited or damaged "
     "export cannot be summarised"),
    (values_page(d1="n/a", d2=""), "p.csv: kernel 1 (k1) has no value ('n/a') in column gpu__time_duration.sum, and "
     "2 of 3 kernels lack it; a summary over them would be NaN; fix: profile the step again, or leave the metric out "
     "of profiling.ncu.metrics where this GPU cannot collect it"),
    (values_page(c1=" n/a "), "p.csv: kernel 1 (k1) has no value ('n/a') in column sm__cycles_elapsed.max, and 1 of "
     "3 kernels lack it; a summary over them would be NaN; fix: profile the step again, or leave the metric out of "
     "profiling.ncu.metrics where this GPU cannot collect it"),
    (values_page().replace("gpu__time_duration.sum", "gpu__time_active.sum"), "p.csv has no gpu__time_duration.sum "
     "column, which every time share is computed from; fix: keep it in the metric set (profiling.ncu.metrics) and "
     "profile again"),
    (values_page().replace('"1","k1"', '"2","k1"'), "p.csv is incomplete: kernel IDs must run 0, 1, 2, ...; line 4 "
     "holds '2' after kernel 0; fix: export again with ncu -i REPORT --csv --page raw and keep the whole output"),
    (values_page().replace('"H200","50"', '"H200","half"'), "p.csv: kernel 1 (k1) has 'half' in column "
     "l1tex__hit_rate.pct, which is not a number; fix: export the raw page again from the report (ncu -i REPORT --csv "
     "--page raw), an edited or damaged export cannot be summarised"),
], ids=["not a number", "missing duration", "missing summed metric", "no duration column", "id gap",
        "not a number where a unit is printed"])
def test_ncu_raw_values_that_would_give_a_wrong_summary_are_refused_in_one_line(page, message):
    with pytest.raises(ProfilingError) as caught:
        ncu.parse_raw(page, "p.csv")
    assert str(caught.value) == message


@pytest.mark.parametrize(("text", "message"), [
    ("", "ncu details CSV has no header row (empty or failed export); fix: export again with ncu -i REPORT --csv "
         "--page details"),
    ('"ID","Kernel Name","Metric Name"\n', "ncu details CSV lacks the 'Section Name' column; fix: export with --page "
                                           "details"),
    ('"ID","Kernel Name","Section Name","Rule Name"\n"0","k","S","R","extra"\n',
     "ncu details CSV has rows longer than its header; fix: export it again"),
    ('"ID","Kernel Name","Section Name","Rule Name"\n"0","k","S","R\n',
     "ncu details CSV is truncated or malformed (unexpected end of data); fix: export it again with ncu -i REPORT "
     "--csv --page details"),
], ids=["empty", "no section column", "long row", "cut in a quote"])
def test_ncu_details_page_problems_are_named_in_one_line(text, message):
    with pytest.raises(ProfilingError) as caught:
        ncu.parse_details(text)
    assert str(caught.value) == message


def test_missing_kernels_and_metrics_are_named_in_one_line(monkeypatch):
    with pytest.raises(ProfilingError) as caught:
        ncu.validate_kernels(pd.DataFrame({"kernel_name": ["sm80_xmma_fprop_k", "sm80_xmma_wgrad_k"]}))
    assert str(caught.value) == (
        "backward pass missing: no dgrad kernel among 2 profiled kernels; an NVTX push/pop range is thread-local and "
        "autograd runs backward on its own thread; fix: use torch.cuda.nvtx.range_start/range_end and "
        "--nvtx-include NAME without a trailing slash")
    page = '"ID","Kernel Name","CC","gpu__time_duration.sum"\n"","","","ns"\n"0","k","9.0","1"\n'
    assert ncu.diagnose("", 0, page, ["gpu__time_duration.sum", "a.sum", "b.max"]) == (
        "ncu did not collect a.sum, b.max: unknown to this GPU/ncu; fix: correct the names or override them for this "
        "architecture in the config (check with ncu --query-metrics-mode suffix --metrics NAME --chip gh100)")
    monkeypatch.setattr(ncu, "import_ncu_report", lambda: None)
    with pytest.raises(ProfilingError) as caught:
        ncu.read_report("run.ncu-rep")
    assert str(caught.value) == (
        "ncu_report Python module not found; fix: run where Nsight Compute is installed "
        f"({ncu.NCU_INSTALL_ROOT}/<version>/extras/python) or export CSV with ncu -i ... --csv instead")


def test_a_profiled_program_that_dies_of_a_signal_leaves_its_python_stack_and_is_named_in_one_line(tmp_path):
    # The program is the profiled one as a profiler would start it (run_tool's argv); it reads a null pointer.
    from profiling.runner import run_tool

    log = tmp_path / "tool.log"
    crash = "import ctypes\ndef read_null():\n    ctypes.string_at(0)\nread_null()\n"
    with pytest.raises(ProfilingError) as error:
        run_tool([sys.executable, "-c", crash], tmp_path, 60, log, lambda text, code: None, "ncu")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("ncu run failed with exit code -11: the profiled program died (Fatal Python error: "
                              "Segmentation fault)")
    assert "in read_null" in log.read_text()  # the stack, down to the function that faulted
