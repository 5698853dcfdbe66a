"""Conformance of the runs measured here with the shipped reference set of the same hardware label (tab08).

As HPC benchmark suites check a run against per-system references (ReFrame's reference tuples: a value, a lower and
an upper bound, a unit): per metric, the reference value and a band around it (config ``conformance.bands``: bounds
relative to the reference value; kernel-class shares in percentage points). A measured value inside the band is
"within"; outside, the verdict says which way: "faster" or "slower" for times (SM cycles included), "lower" or
"higher" for memory, shares and instruction counts. A metric that cannot be compared is "not comparable", with the
reason: a run or a profile missing on one side, another workload, another kind of device, a variant defined
differently. Rows outside the band carry the likely reasons, read from the provenance of both sides (driver, CUDA,
cuDNN, torch, GPU model and memory, clocks where both recorded them).

A time measured under load is not judged: where other processes kept more than `max_other_load_cores` busy while
either side timed its steps (measurement.conditions), or where either side's steps spread wider than the band
(interquartile range over the median), a time reads "not measurable under this load", with the load or the spread,
never faster or slower; so does a CPU's peak memory under that load (LOADED_ON_CPU). So does a time whose job lies
further than the band from the same step in its run's paired rounds, and, on a CPU, a time whose job ran a fixed
single-core workload (measurement.conditions.speed_probe) further than the band from the reference's: the machine's
speed, not the code, would make the difference. Kernel-class shares outside their band read the same where a side's
profiled step ran under that load or while the machine changed, or, on a CPU, took an operator time outside the
phase's time band with the same software (profile_reason).

Conformance reports; it never fails a run (users measure on busy machines).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pandas as pd

from planning import layout

from .derived import cudnn_version
from .results import MEASURED, TOOL_PREFERENCE, Results, date_of, device_of, variant_order

WITHIN = "within"
FASTER = "faster"
SLOWER = "slower"
LOWER = "lower"
HIGHER = "higher"
NOT_COMPARABLE = "not comparable"
UNDER_LOAD = "not measurable under this load"
VERDICTS = (WITHIN, FASTER, SLOWER, LOWER, HIGHER, NOT_COMPARABLE, UNDER_LOAD)
# A value on a band's edge is within it (relative deviations are computed in floating point).
EDGE = 1e-9
COLUMNS = ["gpu", "variant", "metric", "unit", "reference", "measured", "deviation", "band", "verdict", "reasons"]
CLASS_COLUMNS = ["gpu", "variant", "phase", "tool", "kernel_class", "reference_pct", "measured_pct", "deviation_pt",
                 "verdict"]


@dataclass(frozen=True)
class Metric:
    band: str  # key in conformance.bands
    name: str
    unit: str
    timelike: bool  # outside the band: faster / slower (else lower / higher)
    relative: bool = True  # band relative to the reference value (else absolute, in the metric's unit)
    column: str = ""  # runs column (end-to-end metrics) or summaries column (Nsight Compute totals)
    scale: float = 1.0  # shown value = column value / scale


RUN_METRICS = (
    Metric("train_step", "training time per sample", "ms", True, column="train_ms_per_sample"),
    Metric("sample_step", "sampling step (one U-Net evaluation)", "ms", True, column="sample_step_median_ms"),
    Metric("peak_memory", "peak memory, training", "GiB", False, column="train_peak_memory_gib"),
)
# The phase whose conditions and step quartiles a time metric was measured under (runs' <phase>_* columns).
TIMED_PHASE = {"train_step": "train", "sample_step": "sample"}
# A time metric's column in the runs table, checked against the same step in its label's paired rounds.
TIMED_COLUMN = {"train_step": "train_ms_per_sample", "sample_step": "sample_step_median_ms"}
# Not a time, but moved by the load beside the job on a CPU, whose peak is the process's largest resident size:
# which thread allocates when decides how far glibc's arenas grow (the default's channels_last training job peaked at
# 0.81 to 1.01 GiB in five fresh quiet runs, 0.84 to 1.03 beside two busy loops). Judged only where the phase ran
# without more than max_other_load_cores beside it; a GPU's peak is its caching allocator's, which load does not move.
LOADED_ON_CPU = {"peak_memory": "train"}
SHARES = Metric("kernel_class_share", "kernel-class shares", "% of kernel time", False, relative=False)
NCU_METRICS = (
    Metric("ncu_totals", "Nsight Compute SM cycles", "M cycles", True, column="sm_cycles", scale=1e6),
    Metric("ncu_totals", "Nsight Compute warp instructions", "G instructions", False, column="warp_instructions",
           scale=1e9),
)
PHASES = ("train", "sample")


def judge(measured: float, reference: float, band: dict, relative: bool = True,
          timelike: bool = True) -> tuple[float, str]:
    """(deviation, verdict) of `measured` against `reference` and its band ({lower, upper}; relative: fractions of
    the reference, else absolute). Deviation: (measured - reference) / reference, or measured - reference."""
    if measured is None or reference is None or pd.isna(measured) or pd.isna(reference):
        return math.nan, NOT_COMPARABLE
    measured, reference = float(measured), float(reference)
    if relative:
        if reference <= 0:
            return math.nan, NOT_COMPARABLE
        deviation = (measured - reference) / reference
    else:
        deviation = measured - reference
    if in_band(deviation, band):
        return deviation, WITHIN
    if deviation < band["lower"]:
        return deviation, FASTER if timelike else LOWER
    return deviation, SLOWER if timelike else HIGHER


def in_band(deviation: float, band: dict) -> bool:
    """Whether a deviation lies inside the band, its edges included (EDGE: a value on an edge stays within)."""
    return band["lower"] - EDGE <= deviation <= band["upper"] + EDGE


def band_text(band: dict, relative: bool) -> str:
    unit = " %" if relative else " pt"
    scale = 100 if relative else 1

    def number(value: float) -> str:
        return f"{value * scale:+.3g}{unit}"

    if -band["lower"] == band["upper"]:
        return f"±{band['upper'] * scale:.3g}{unit}"
    return f"{number(band['lower'])} .. {number(band['upper'])}"


def deviation_text(deviation: float, relative: bool) -> str:
    if pd.isna(deviation):
        return ""
    return f"{deviation * 100:+.3g} %" if relative else f"{deviation:+.3g} pt"


# -- the likely reasons ---------------------------------------------------------------------------------------------
_SOFTWARE = (("device_name", "GPU"), ("memory_bytes", "memory"), ("multiprocessors", "SMs"), ("driver", "driver"),
             ("cuda", "CUDA"), ("cudnn", "cuDNN"), ("torch", "torch"))
_CLOCKS = (("sm_max_mhz", "maximum SM clock", "MHz"), ("sm_application_mhz", "application SM clock", "MHz"),
           ("power_limit_w", "power limit", "W"))


def _shown(key: str, value) -> str:
    if value is None or value == "":
        return "not recorded"
    if key == "memory_bytes" and isinstance(value, (int, float)):
        return f"{value / 2**30:.1f} GiB"
    if key == "cudnn":
        return cudnn_version(value)
    return str(value)


def provenance_differences(here: dict, reference: dict) -> list[str]:
    """What differs between two provenance records that can move a measurement: device (GPU model, memory, SMs),
    software (driver, CUDA, cuDNN, torch), clocks lower than the reference's (where both recorded them)."""
    reasons = []
    if bool(here.get("emulated_on_cpu")) != bool(reference.get("emulated_on_cpu")):
        reasons.append("emulated on the CPU here" if here.get("emulated_on_cpu") else "the reference was emulated")
    on_cpu = here.get("device_type") == "cpu"
    for key, name in _SOFTWARE:
        if key == "device_name" and on_cpu:
            continue  # a CPU label's device name is the host CPU's model, said once below
        mine, theirs = here.get(key), reference.get(key)
        if mine != theirs and not (mine is None and theirs is None):
            reasons.append(f"{name} {_shown(key, mine)} here, {_shown(key, theirs)} in the reference")
    if on_cpu and here.get("host_cpu") != reference.get("host_cpu"):
        reasons.append(f"CPU {here.get('host_cpu')} here, {reference.get('host_cpu')} in the reference")
    mine, theirs = here.get("clocks") or {}, reference.get("clocks") or {}
    if bool(mine) != bool(theirs):
        reasons.append(f"clocks recorded {'here' if mine else 'in the reference'} only")
    for key, name, unit in _CLOCKS:
        if isinstance(mine.get(key), (int, float)) and isinstance(theirs.get(key), (int, float)) \
                and mine[key] < theirs[key]:
            reasons.append(f"{name} {mine[key]:g} {unit} here, below the reference's {theirs[key]:g} {unit}")
    return reasons


def likely_reasons(here: dict, reference: dict, extra: list[str] = ()) -> str:
    reasons = provenance_differences(here, reference) + list(extra)
    if reasons:
        return "; ".join(reasons)
    clocks = "" if here.get("clocks") and reference.get("clocks") else ", clocks not recorded on both sides"
    return (f"same device, driver, CUDA, cuDNN and torch{clocks}: run-to-run variation or another load on the "
            f"machine")


# -- comparability --------------------------------------------------------------------------------------------------
def _switches(row: pd.Series) -> dict:
    value = row.get("switches")
    return json.loads(value) if isinstance(value, str) and value else {}


def incomparable_run(here: pd.Series, reference: pd.Series) -> str | None:
    """Why one variant's runs measure different things (another workload or another definition), or None."""
    workload = []
    for column, what in (("volume_shape", "volume"), ("parameters", "parameters"),
                         ("samples_per_step", "micro-batches per optimizer step")):
        mine, theirs = here.get(column), reference.get(column)
        if not (pd.isna(mine) or pd.isna(theirs) or mine == "" or theirs == "") and mine != theirs:
            shown = (lambda v: f"{int(v):,}") if column == "parameters" else str
            workload.append(f"{what} {shown(mine)} here, {shown(theirs)} in the reference")
    if workload:
        return "another workload: " + "; ".join(workload)
    mine, theirs = _switches(here), _switches(reference)
    differing = sorted(key for key in set(mine) & set(theirs) if mine[key] != theirs[key])
    if differing:
        return (f"{here['variant']} is defined differently: "
                + ", ".join(f"{key} {mine[key]} here, {theirs[key]} in the reference" for key in differing))
    return None


# -- the table ------------------------------------------------------------------------------------------------------
@dataclass
class Side:
    """One side of the comparison for one label: its runs, profile summaries and provenance."""

    runs: pd.DataFrame
    summaries: pd.DataFrame
    provenance: dict
    is_gpu: bool

    def run(self, variant: str) -> pd.Series | None:
        rows = self.runs[self.runs["variant"] == variant] if len(self.runs) else self.runs
        return rows.iloc[0] if len(rows) else None

    def profile(self, variant: str, phase: str, tool: str | None = None) -> pd.DataFrame:
        frame = self.summaries
        if frame.empty:
            return frame
        rows = frame[(frame["variant"] == variant) & (frame["phase"] == phase)]
        return rows[rows["tool"] == tool] if tool else rows

    def tools(self, variant: str, phase: str) -> list[str]:
        present = set(self.profile(variant, phase)["tool"]) if len(self.profile(variant, phase)) else set()
        return [tool for tool in TOOL_PREFERENCE if tool in present]


def _of(frame: pd.DataFrame, gpu: str) -> pd.DataFrame:
    return frame[frame["gpu"] == gpu] if len(frame) and "gpu" in frame else frame


def _row(gpu, variant, metric, unit, reference=math.nan, measured=math.nan, deviation="", band="",
         verdict=NOT_COMPARABLE, reasons="") -> dict:
    return {"gpu": gpu, "variant": variant, "metric": metric, "unit": unit, "reference": reference,
            "measured": measured, "deviation": deviation, "band": band, "verdict": verdict, "reasons": reasons}


def _judged(gpu, variant, metric: Metric, name: str, measured, reference, bands, here: Side, ref: Side,
            extra_reasons=()) -> dict:
    band = bands[metric.band]
    deviation, verdict = judge(measured, reference, band, metric.relative, metric.timelike)
    reasons = "" if verdict in (WITHIN, NOT_COMPARABLE) else likely_reasons(here.provenance, ref.provenance,
                                                                             extra_reasons)
    if verdict == NOT_COMPARABLE:
        missing = (measured is None or pd.isna(measured), reference is None or pd.isna(reference))
        reasons = {(True, True): "measured on neither side", (True, False): "not measured here",
                   (False, True): "not in the reference"}.get(missing, "the reference value is zero")
    return _row(gpu, variant, name, metric.unit, reference, measured, deviation_text(deviation, metric.relative),
                band_text(band, metric.relative), verdict, reasons)


def load_reason(band_key: str, band: dict, mine: pd.Series, theirs: pd.Series,
                max_load: float | None, cpu: bool = False) -> str | None:
    """Why a time (or, on a CPU, a peak memory: LOADED_ON_CPU) cannot be judged against its band: other processes
    kept more than `max_load` cores busy while a side timed its steps, a side's steps spread (interquartile range
    over median) wider than the band, or a side's job lies further than the band from the same step in its label's
    paired rounds of the same run; None where it can be (or for a metric that load does not move)."""
    phase = TIMED_PHASE.get(band_key) or (LOADED_ON_CPU.get(band_key) if cpu else None)
    if phase is None:
        return None
    loads, spreads, moved = [], [], []
    differs = _probe_reason(phase, band, mine, theirs) if cpu and band_key in TIMED_PHASE else None
    for side, name in ((mine, "here"), (theirs, "in the reference")):
        load, cores = side.get(f"{phase}_other_load_cores"), side.get(f"{phase}_cpu_count")
        if max_load is not None and pd.notna(load) and float(load) > max_load:
            of = f" of {int(cores)}" if pd.notna(cores) else ""
            loads.append(f"{float(load):.2g}{of} {name}")
        median, q1, q3 = (side.get(f"{phase}_step_{key}_ms") for key in ("median", "q1", "q3"))
        if band_key in TIMED_PHASE and all(pd.notna(v) for v in (median, q1, q3)) and float(median) > 0:
            spread = (float(q3) - float(q1)) / float(median)
            if spread > band["upper"] - band["lower"]:
                spreads.append(f"{spread:.0%} of their median {name}")
        job, rounds = side.get(TIMED_COLUMN.get(band_key, "")), side.get(f"{phase}_rounds_median_ms")
        if band_key in TIMED_PHASE and pd.notna(job) and pd.notna(rounds) and float(rounds) > 0:
            apart = float(job) / float(rounds) - 1
            if not in_band(apart, band):
                moved.append(f"{float(job):.4g} ms in its job, {float(rounds):.4g} in the same run's paired rounds "
                             f"({apart:+.0%}) {name}")
    said = []
    if loads:
        done = "timed" if band_key in TIMED_PHASE else "measured"
        said.append(f"other processes kept cores busy while it was {done}: {' and '.join(loads)} (more than "
                    f"conformance.max_other_load_cores, {max_load:g})")
    if spreads:
        said.append(f"the steps' quartiles span more than the band: {' and '.join(spreads)}")
    if moved:
        # The rounds time the same step in the same run, interleaved with the other variants': a job apart from them
        # by more than the band was slowed (or sped) by something its load reading did not see (another virtual
        # machine on the host, the clock frequency), as one default run's channels_last training job was by 45 %.
        said.append(f"the machine's speed changed under the job: {' and '.join(moved)}")
    if differs:
        said.append(differs)
    return "; ".join(said) or None


def _probe_reason(phase: str, band: dict, mine: pd.Series, theirs: pd.Series) -> str | None:
    """On a CPU, where both sides ran the fixed single-core workload (measurement.conditions.speed_probe) and its
    times lie further apart than the band: the machine ran at another speed than the reference's (another CPU, a
    lower clock, a busy host), which moves the job's time without the code changing. Not on a GPU, whose timed
    steps the host's speed moves only for launch-bound steps."""
    here, there = mine.get(f"{phase}_speed_probe_ms"), theirs.get(f"{phase}_speed_probe_ms")
    if pd.isna(here) or pd.isna(there) or float(there) <= 0:
        return None
    apart = float(here) / float(there) - 1
    if in_band(apart, band):
        return None
    return (f"the machine's speed differs from the reference's: a fixed single-core workload took "
            f"{float(here):.3g} ms here, {float(there):.3g} in the reference ({apart:+.0%})")


def _steps_reason(mine: pd.Series, theirs: pd.Series) -> list[str]:
    a, b = mine.get("train_steps_measured"), theirs.get("train_steps_measured")
    if pd.notna(a) and pd.notna(b) and a != b:
        return [f"{int(a)} timed optimizer steps here, {int(b)} in the reference"]
    return []


def _share_rows(gpu, variant, phase, here: Side, ref: Side, bands,
                max_load: float | None = None) -> tuple[dict | None, list[dict]]:
    """The kernel-class share row of one phase (the class that differs most) and every class's comparison; an
    outside verdict of a profile made under load is "not measurable under this load" (profile_reason)."""
    mine_tools, their_tools = here.tools(variant, phase), ref.tools(variant, phase)
    if not mine_tools and not their_tools:
        return None, []
    name = f"{SHARES.name}, {phase} step"
    if not mine_tools or not their_tools:
        where = "here" if not mine_tools else "in the reference"
        return _row(gpu, variant, name, SHARES.unit, reasons=f"no profile of the {phase} step {where}"), []
    common = [tool for tool in mine_tools if tool in their_tools]
    if not common:
        return _row(gpu, variant, name, SHARES.unit, reasons=f"no profiler in common ({', '.join(mine_tools)} here, "
                    f"{', '.join(their_tools)} in the reference)"), []
    tool = common[0]

    def shares(rows: pd.DataFrame) -> pd.Series:
        rows = rows[rows["kernel_class"] != "all"]
        return rows.groupby("kernel_class")["time_share"].sum().astype(float) * 100

    mine_rows, their_rows = here.profile(variant, phase, tool), ref.profile(variant, phase, tool)
    mine, theirs = shares(mine_rows), shares(their_rows)
    classes = sorted(set(mine.index) | set(theirs.index))
    mine, theirs = mine.reindex(classes, fill_value=0.0), theirs.reindex(classes, fill_value=0.0)
    band = bands[SHARES.band]
    loaded = profile_reason(phase, _total_row(mine_rows), _total_row(their_rows), bands, max_load,
                            cpu=not here.is_gpu,
                            same_software=not provenance_differences(here.provenance, ref.provenance))
    by_class = []
    for kernel_class in classes:
        deviation, verdict = judge(mine[kernel_class], theirs[kernel_class], band, relative=False, timelike=False)
        if loaded and verdict not in (WITHIN, NOT_COMPARABLE):
            verdict = UNDER_LOAD
        by_class.append({"gpu": gpu, "variant": variant, "phase": phase, "tool": tool, "kernel_class": kernel_class,
                         "reference_pct": theirs[kernel_class], "measured_pct": mine[kernel_class],
                         "deviation_pt": deviation, "verdict": verdict})
    # The class that differs most (on a tie, the larger one in the reference).
    worst = max(classes, key=lambda c: (round(abs(mine[c] - theirs[c]), 9), theirs[c], c))
    row = _judged(gpu, variant, SHARES, f"{name} ({tool}), largest difference: {worst}", mine[worst], theirs[worst],
                  bands, here, ref)
    if loaded and row["verdict"] not in (WITHIN, NOT_COMPARABLE):
        row |= {"verdict": UNDER_LOAD, "reasons": loaded}
    return row, by_class


def _total_row(rows: pd.DataFrame) -> pd.Series:
    total = rows[rows["kernel_class"] == "all"]
    return total.iloc[0] if len(total) else pd.Series(dtype=object)


def profile_reason(phase: str, mine: pd.Series, theirs: pd.Series, bands: dict, max_load: float | None, cpu: bool,
                   same_software: bool) -> str | None:
    """Why the kernel-class shares of two profiles of a step (their summaries' "all" rows) cannot be judged: the
    machine changed while a side was profiled (another process on the GPU, a throttled GPU), or, on a CPU, other
    processes kept more than `max_load` cores busy meanwhile or, with the same software on both sides, the profiled
    step's operators took longer or shorter than the phase's time band allows. A GPU's shares are of its kernels'
    device time, which the host's load does not move (and a GPU host's other jobs run beside a profile). A CPU's
    operators share its cores and memory with whatever else the host runs, and one profiled step slowed by it shifts
    the mix (a default run's training-step profile took 2.7 times the reference's operator time on a machine that
    showed no load, and its convolutions' share rose by 20 points). None where they can be judged; an outside verdict
    otherwise stands."""
    said, loads = [], []
    for side, name in ((mine, "here"), (theirs, "in the reference")):
        load = side.get("other_load_cores")
        if cpu and max_load is not None and pd.notna(load) and float(load) > max_load:
            loads.append(f"{float(load):.2g} {name}")
        changed = side.get("condition_changes")
        if isinstance(changed, str) and changed:
            said.append(f"the machine changed while the step was profiled {name}: {changed}")
    if loads:
        said.insert(0, f"other processes kept cores busy while the step was profiled: {' and '.join(loads)} (more "
                       f"than conformance.max_other_load_cores, {max_load:g})")
    here_ns, there_ns = mine.get("time_ns"), theirs.get("time_ns")
    if cpu and same_software and pd.notna(here_ns) and pd.notna(there_ns) and float(there_ns) > 0:
        apart = float(here_ns) / float(there_ns) - 1
        if not in_band(apart, bands[f"{phase}_step"]):
            said.append(f"the profiled {phase} step's operators took {float(here_ns) / 1e6:.4g} ms here, "
                        f"{float(there_ns) / 1e6:.4g} in the reference ({apart:+.0%}) with the same software: the "
                        "machine ran at another speed")
    return "; ".join(said) or None


def _ncu_rows(gpu, variant, phase, here: Side, ref: Side, bands) -> list[dict]:
    mine, theirs = here.profile(variant, phase, "ncu"), ref.profile(variant, phase, "ncu")
    if mine.empty and theirs.empty:
        return []
    rows = []
    for metric in NCU_METRICS:
        name = f"{metric.name}, {phase} step"
        if mine.empty or theirs.empty:
            where = "here" if mine.empty else "in the reference"
            rows.append(_row(gpu, variant, name, metric.unit,
                             reasons=f"no Nsight Compute profile of the {phase} step {where}"))
            continue

        def total(side: pd.DataFrame) -> float:
            rows_all = side[side["kernel_class"] == "all"]
            value = rows_all[metric.column].astype(float).sum() if len(rows_all) else math.nan
            return value / metric.scale

        rows.append(_judged(gpu, variant, metric, name, total(mine), total(theirs), bands, here, ref))
    return rows


def unlisted(gpu: str, workload: str, listed) -> str:
    """Why a label measured here has no reference: the setting that lists reference sets, what it lists, the fix."""
    where = layout.reference_dir(workload or "<workload>", gpu)
    return (f"reference_results ({', '.join(listed) if listed else 'empty'}) does not list {gpu}, so no reference "
            f"set of {gpu} is read; list {gpu} there (a set in {where}/) to check this run against it")


def conformance_table(results: Results, bands: dict, listed=(),
                      max_load: float | None = None) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """tab08: one row per (label measured here, variant, metric); every kernel class's share compared (second
    frame); notes naming both sides of each compared label. `listed`: the config's reference_results, named in the
    row of a label without a reference; `max_load`: the cores other processes may keep busy while a time is measured
    for it to be judged (load_reason)."""
    rows, classes, notes = [], [], []
    runs, summaries = results.table("runs"), results.table("summaries")
    ref_hardware = results.table("reference_hardware")
    ref_runs, ref_summaries = results.table("reference_runs"), results.table("reference_summaries")
    measured = [gpu for gpu in results.labels() if results.origin(gpu) == MEASURED]
    referenced = set(ref_hardware["gpu"]) if len(ref_hardware) else set()
    for gpu in measured:
        if gpu not in referenced:
            rows.append(_row(gpu, "", "every metric", "", reasons=unlisted(gpu, results.workload(gpu), listed)))
            continue
        info = ref_hardware.set_index("gpu").loc[gpu]
        here = Side(_of(runs, gpu), _of(summaries, gpu), results.provenance(gpu), results.gpu_device(gpu))
        ref = Side(_of(ref_runs, gpu), _of(ref_summaries, gpu), json.loads(info["provenance"]), bool(info["is_gpu"]))
        notes.append(f"{gpu}: here {_describe(here.provenance)}; reference {_describe(ref.provenance)}")
        if here.is_gpu != ref.is_gpu:
            kinds = (device_of(here.provenance), device_of(ref.provenance))
            rows.append(_row(gpu, "", "every metric", "", reasons=f"another kind of device: {kinds[0]} here, "
                             f"{kinds[1]} in the reference"))
            continue
        for variant in variant_order(here.runs["variant"]) if len(here.runs) else []:
            mine, theirs = here.run(variant), ref.run(variant)
            if theirs is None:
                rows.append(_row(gpu, variant, "every metric", "", reasons=f"the reference set has no {variant} run"))
                continue
            why = incomparable_run(mine, theirs)
            if why:
                rows.append(_row(gpu, variant, "every metric", "", reasons=why))
                continue
            for metric in RUN_METRICS:
                extra = _steps_reason(mine, theirs) if metric.band == "train_step" else []
                row = _judged(gpu, variant, metric, metric.name, mine.get(metric.column), theirs.get(metric.column),
                              bands, here, ref, extra)
                loaded = load_reason(metric.band, bands[metric.band], mine, theirs, max_load, cpu=not here.is_gpu)
                if loaded and row["verdict"] != NOT_COMPARABLE:
                    row |= {"verdict": UNDER_LOAD, "reasons": loaded}
                rows.append(row)
            for phase in PHASES:
                share, by_class = _share_rows(gpu, variant, phase, here, ref, bands, max_load)
                if share:
                    rows.append(share)
                classes += by_class
                rows += _ncu_rows(gpu, variant, phase, here, ref, bands)
    table = pd.DataFrame(rows, columns=COLUMNS).astype({"reference": float, "measured": float})
    return table, pd.DataFrame(classes, columns=CLASS_COLUMNS), notes


def _describe(provenance: dict) -> str:
    parts = [device_of(provenance)]
    for key, name in _SOFTWARE[3:]:
        if provenance.get(key) is not None:
            parts.append(f"{name} {_shown(key, provenance.get(key))}")
    clocks = provenance.get("clocks") or {}
    if clocks.get("sm_max_mhz"):
        parts.append(f"max SM clock {clocks['sm_max_mhz']:g} MHz")
    if date_of(provenance):
        parts.append(f"measured {date_of(provenance)}")
    return ", ".join(parts)
