"""Numbers derived from the bundle's tables, computed in one place: ratios to a reference variant, speed-ups,
time-weighted means and the Nsight Compute headline of a step."""

from __future__ import annotations

import json
import math

import pandas as pd

CONV_CLASSES = ("conv_fprop", "conv_dgrad", "conv_wgrad")
NCU_HEADLINE = ("sm_cycles", "warp_instructions", "tensor_pipe_pct", "ipc")


def relative_to(frame: pd.DataFrame, columns, reference: str = "baseline") -> pd.DataFrame:
    """frame (gpu, variant, columns...) with each column divided by the same gpu's `reference` variant's value;
    NaN where the reference (or the value) is missing or the reference is zero."""
    out = frame.copy()
    for column in columns:
        base = frame[frame["variant"] == reference].set_index("gpu")[column]
        ref = frame["gpu"].map(base).astype(float)
        out[column] = (frame[column].astype(float) / ref.where(ref != 0)).astype(float)
    return out


def speedup(runs: pd.DataFrame, column: str = "train_ms_per_sample", reference: str = "baseline") -> pd.Series:
    """reference time / variant time per row (> 1: faster than the reference); NaN without the reference."""
    return 1 / relative_to(runs[["gpu", "variant", column]], [column], reference)[column]


# speedup_verdict's phases: the time column a speed-up is computed from, and the step-time median and quartiles
# whose spread decides the unpaired fallback (a training step covers `samples_per_step` samples).
VERDICT_PHASES = {
    "train": ("train_ms_per_sample", "train_step_median_ms", "train_step_q1_ms", "train_step_q3_ms"),
    "sample": ("sample_step_median_ms", "sample_step_median_ms", "sample_step_q1_ms", "sample_step_q3_ms"),
}
VERDICT_COLUMNS = ["gpu", "variant", "speedup", "low", "high", "within_noise", "verdict", "paired", "why"]


def speedup_verdict(runs: pd.DataFrame, phase: str = "train", reference: str = "baseline") -> pd.DataFrame:
    """Per (gpu, variant): the speed-up over the same gpu's `reference` and whether its direction is real.

    Paired (paired True): from the label's paired comparison (comparison.json, measurement.verdicts; the runs table's
    <phase>_vs_<reference>_* columns): speedup = the median of the rounds' ratios reference / variant (> 1: faster),
    low/high its interval, verdict "faster" / "slower" (the whole interval beyond the comparison's band), "within
    noise" (wholly inside), "at the band's edge" (a narrow interval across the band's edge: a difference of about
    the band's size), "not measurable under this load" (undecided, or the rounds or the machine's conditions
    disagreed: `why` says which) or "not measurable here" (the switches that set the variant apart have no effect on
    the device).

    Unpaired (paired False), for runs with no paired comparison (a shipped set of before them): the ratio of the two
    jobs' medians, low/high the same ratio between their step-time quartiles taken the way that makes it smallest and
    largest; "faster"/"slower" where that range lies wholly above/below 1, "within noise" where the two interquartile
    ranges overlap, "no spread measured" without quartiles (no direction is claimed). The tables and the text mark
    these as unpaired: two jobs timed at different moments, which a change of load could have made. Either way "reference" for the reference's own row and "not measured" without a time.
    Text that names a fastest variant or calls one slower takes it from here."""
    if phase not in VERDICT_PHASES:
        raise ValueError(f"phase {phase!r}: one of {sorted(VERDICT_PHASES)}")
    column, median, q1, q3 = VERDICT_PHASES[phase]
    if runs.empty or column not in runs:
        return pd.DataFrame(columns=VERDICT_COLUMNS)
    out = _unpaired(runs, column, median, q1, q3, reference)
    prefix = f"{phase}_vs_{reference}_"
    if prefix + "verdict" in runs:
        paired = runs[prefix + "verdict"].notna().to_numpy()
        for key in ("speedup", "low", "high", "verdict", "why"):
            out.loc[paired, key] = runs.loc[paired, prefix + key].to_numpy()
        out.loc[paired, "paired"] = True
    out["within_noise"] = out["verdict"].isin(["within noise", "no spread measured"]).astype(bool)
    return out.reset_index(drop=True)[VERDICT_COLUMNS]


def load_notes(runs: pd.DataFrame, phases=("train", "sample"), load_difference_cores: float = 0.5) -> list[str]:
    """One line per label and phase whose variants' jobs were timed under different conditions: other processes kept
    numbers of cores busy more than `load_difference_cores` apart (the config's comparison.load_difference_cores,
    the same limit as for the paired rounds' two sides), or the machine changed while one ran (a GPU's throttling,
    another process on it). Their times are then not comparable with each other; the speed-ups come from the paired
    rounds."""
    notes = []
    for phase in phases:
        load, changed = f"{phase}_other_load_cores", f"{phase}_condition_changes"
        if load not in runs:
            continue
        for gpu, rows in runs.groupby("gpu", sort=False):
            cores = rows.set_index("variant")[load].dropna().astype(float)
            if len(cores) > 1 and cores.max() - cores.min() > load_difference_cores:
                notes.append(f"{gpu}: the {phase} jobs ran under different load (other processes kept "
                             f"{cores.min():.1f} cores busy during {cores.idxmin()}'s, {cores.max():.1f} during "
                             f"{cores.idxmax()}'s): their times are not comparable with each other.")
            for row in rows[rows[changed].notna()].itertuples() if changed in rows else []:
                notes.append(f"{gpu} {row.variant}: the machine changed during its {phase} job "
                             f"({getattr(row, changed)}).")
    return notes


def verdict_notes(runs: pd.DataFrame, phases=("train", "sample"), reference: str = "baseline",
                  load_difference_cores: float = 0.5) -> list[str]:
    """The notes a table of speed-ups carries: per label whose speed-ups are unpaired, that they are; per comparison
    that is not measurable, why; per label whose variants' jobs ran under different conditions, that they did."""
    notes = load_notes(runs, phases, load_difference_cores)
    for phase in phases:
        if VERDICT_PHASES[phase][0] not in runs:
            continue
        verdicts = speedup_verdict(runs, phase, reference)
        measured = verdicts[verdicts["verdict"] != "not measured"]
        for gpu, rows in measured.groupby("gpu", sort=False):
            if not rows["paired"].any() and len(rows) > 1 and phase == phases[0]:
                notes.append(f"{gpu}: unpaired speed-ups (no paired comparison in its set): each variant timed in its "
                             "own job, at its own moment, so a change of load between the jobs could have made a "
                             "difference; the range is that of the two jobs' step-time quartiles.")
        for row in verdicts[verdicts["why"].notna()].itertuples():
            notes.append(f"{row.gpu} {row.variant}, {phase}: {row.verdict} ({row.why}).")
    return notes


def _unpaired(runs: pd.DataFrame, column: str, median: str, q1: str, q3: str, reference: str) -> pd.DataFrame:
    frame = runs.reindex(columns=list(dict.fromkeys(["gpu", "variant", column, median, q1, q3]))).copy()
    time = frame[column].astype(float)
    scale = time / frame[median].astype(float)  # step time -> the time the speed-up is computed from
    frame["_q1"], frame["_q3"], frame["_t"] = frame[q1].astype(float) * scale, frame[q3].astype(float) * scale, time
    base = frame[frame["variant"] == reference].drop_duplicates("gpu").set_index("gpu")
    ref_t, ref_q1, ref_q3 = (frame["gpu"].map(base[key]).astype(float) for key in ("_t", "_q1", "_q3"))
    out = frame[["gpu", "variant"]].copy()
    out["speedup"] = (ref_t / time.where(time > 0)).to_numpy()
    out["low"] = (ref_q1 / frame["_q3"].where(frame["_q3"] > 0)).to_numpy()
    out["high"] = (ref_q3 / frame["_q1"].where(frame["_q1"] > 0)).to_numpy()
    known = out["low"].notna() & out["high"].notna()
    verdict = pd.Series("not measured", index=out.index, dtype=object)
    measured = out["speedup"].notna()
    verdict[measured & known & (out["low"] > 1)] = "faster"
    verdict[measured & known & (out["high"] < 1)] = "slower"
    verdict[measured & known & (out["low"] <= 1) & (out["high"] >= 1)] = "within noise"
    verdict[measured & ~known] = "no spread measured"  # no quartiles: no direction can be claimed
    is_reference = frame["variant"] == reference
    verdict[is_reference & measured] = "reference"
    out.loc[is_reference & measured, ["low", "high"]] = 1.0
    out["verdict"] = verdict.to_numpy()
    out["paired"] = False
    out["why"] = None
    out["why"] = out["why"].astype(object)
    return out


def weighted_mean(frame: pd.DataFrame, column: str, weight: str = "duration_ns") -> float:
    """Mean of `column` weighted by `weight` over the rows that have both (NaN when none)."""
    if column not in frame or weight not in frame:
        return math.nan
    data = frame[[column, weight]].dropna()
    if data.empty or data[weight].sum() <= 0:
        return math.nan
    return float((data[column] * data[weight]).sum() / data[weight].sum())


def ncu_headline(summaries: pd.DataFrame, phase: str = "train") -> pd.DataFrame:
    """One row per (gpu, variant) with an Nsight Compute profile of `phase`: the whole step's SM cycles, warp
    instructions, IPC and tensor-pipe utilisation (the summary's 'all' row)."""
    columns = ["gpu", "variant", *NCU_HEADLINE]
    if summaries.empty:
        return pd.DataFrame(columns=columns)
    rows = summaries[(summaries["tool"] == "ncu") & (summaries["phase"] == phase)
                     & (summaries["kernel_class"] == "all")]
    return rows.reindex(columns=columns).reset_index(drop=True)


def class_totals(summaries: pd.DataFrame, metric: str, classes=CONV_CLASSES) -> pd.DataFrame:
    """kernel class x variant table of `metric` summed over the given classes' rows."""
    rows = summaries[summaries["kernel_class"].isin(classes)]
    return rows.pivot_table(index="kernel_class", columns="variant", values=metric, aggfunc="sum")


def differing_switches(runs: pd.DataFrame, gpu: str, variant: str, reference: str = "baseline") -> dict[str, bool]:
    """The switches in which `variant` differs from `reference` on `gpu`, each with whether it had an effect on the
    device (from the runs' provenance). Empty when either run is missing."""
    rows = runs[runs["gpu"] == gpu].set_index("variant")
    if variant not in rows.index or reference not in rows.index:
        return {}
    mine, theirs = json.loads(rows.loc[variant, "switches"]), json.loads(rows.loc[reference, "switches"])
    effective = json.loads(rows.loc[variant, "switches_effective"])
    return {name: bool(effective.get(name, True)) for name, value in mine.items() if theirs.get(name) != value}


def exercised(runs: pd.DataFrame, gpu: str, variant: str, reference: str = "baseline") -> bool:
    """True when every switch that sets `variant` apart from `reference` had an effect on the device: only then
    does comparing the two measure the optimization (TF32 on a CPU changes nothing)."""
    differing = differing_switches(runs, gpu, variant, reference)
    return bool(differing) and all(differing.values())


def cudnn_version(value) -> str:
    """torch reports cuDNN 9.19.0 as 91900."""
    if isinstance(value, int) and value >= 10000:
        return f"{value // 10000}.{value // 100 % 100}.{value % 100}"
    return "" if value is None else str(value)
