"""What the article's text is written from, and how it writes numbers: shared by the article's own text
(reporting.article) and each output's paragraph (`describe(context)` of reporting/outputs/<id>.py).

`Inputs` reads the registered tables (CSV, under the workflow's root) and the collected result tables (parquet, by
name); `Context` adds what a paragraph may also need: the function that calls a speed-up faster, slower or within
noise, and the devices' datasheet peaks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

PAPER_VARIANTS = ("tf32", "channels_last", "tf32_channels_last")
CLASS_WORDS = {"conv_fprop": "convolution forward", "conv_dgrad": "convolution data-gradient",
               "conv_wgrad": "convolution weight-gradient", "gemm": "GEMM", "layout_conversion": "layout conversion",
               "dtype_cast": "dtype cast", "normalization": "normalization", "elementwise": "element-wise",
               "optimizer": "optimizer", "reduction": "reduction", "other": "other"}


# -- numbers as words -----------------------------------------------------------------------------------------------
def shape_text(shape: str) -> str:
    """'128x128x128' -> '128³'; other shapes as they are."""
    sides = str(shape).split("x")
    return f"{sides[0]}\N{SUPERSCRIPT THREE}" if len(sides) == 3 and len(set(sides)) == 1 else str(shape)


def join_words(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'; 'none' for no word."""
    words = [w for w in words if w]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1] if words else "none"


def num(value: float, digits: int = 3) -> str:
    """A number with `digits` significant digits, never in exponent notation between 1e-3 and 1e7."""
    if value is None or not math.isfinite(float(value)):
        return "n/a"
    value = float(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e7):
        return f"{value:.{digits - 1}e}"
    text = f"{value:.{digits}g}"
    if "e" in text:  # .3g writes 1234 as 1.23e+03
        text = f"{value:.0f}"
    return text


def pct(share: float, digits: int = 1) -> str:
    return f"{100 * float(share):.{digits}f} %"


def times(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio < 10 else f"{ratio:.1f}x"


def class_words(name: str) -> str:
    """A kernel class as the text names it ('conv_fprop': 'convolution forward')."""
    return CLASS_WORDS.get(name, str(name).replace("_", " "))


def present(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value == value


def verdict_counts(frame: pd.DataFrame) -> str:
    """'5 within, 2 faster': how many rows carry each verdict."""
    counts = frame["verdict"].value_counts()
    return ", ".join(f"{n} {verdict}" for verdict, n in counts.items())


def speedup_words(row) -> str:
    """A speed-up over baseline as a reader should take it (reporting.derived.speedup_verdict): a direction only
    where the paired rounds give one, with their interval; a speed-up of separately timed jobs says so."""
    ratio, said = float(row["speedup"]), row["verdict"]
    paired = bool(row.get("paired", False))
    interval = ""
    if paired and present(row.get("low")) and present(row.get("high")):
        interval = f" (interval {num(float(row['low']))}-{num(float(row['high']))})"
    how = interval if paired else " (unpaired: separate jobs)"
    if said == "faster":
        return f"{times(ratio)} faster{how}"
    if said == "slower":
        return f"{times(1 / ratio)} slower{how}"
    if said == "within noise":
        return (f"{times(ratio)}, within noise{interval or ''}" if paired
                else f"{times(ratio)}, within noise (its quartiles overlap the baseline's)")
    if said == "not measurable under this load":
        return f"{times(ratio)}, not measurable under this load{interval}"
    if said == "at the band's edge":  # a narrow interval across the band's edge: measured, about the band's size
        return f"{times(ratio)}, at the band's edge{interval}"
    if said == "not measurable here":
        return f"{times(ratio)}, not measurable here (its switches have no effect on this device)"
    if said == "no spread measured":
        return f"{times(ratio)} (no spread measured, so no direction is claimed)"
    return "not measured"


def chain_speedup_words(row, chain_steps: int | None = None) -> str:
    """A fast sampler's speed-up over the chain as its paired rounds give it: a direction only where the interval
    gives one ('25.5x [25.2-25.8] faster than the 250-step chain')."""
    chain = f"the {chain_steps}-step chain" if chain_steps else "the chain"
    if not present(row.get("chain_speedup")):
        return f"its speed-up over {chain} not measured"
    ratio, verdict = float(row["chain_speedup"]), row["chain_speedup_verdict"]
    interval = (f"[{num(float(row['chain_speedup_low']))}-{num(float(row['chain_speedup_high']))}]"
                if present(row.get("chain_speedup_low")) else "(no interval)")
    if verdict == "faster":
        return f"{times(ratio)} {interval} faster than {chain}"
    if verdict == "slower":
        return f"{times(1 / ratio)} {interval} slower than {chain}"
    if verdict == "within noise":
        return f"within noise of {chain} ({times(ratio)} {interval})"
    if verdict == "at the band's edge":
        return f"{times(ratio)} {interval} {chain}'s speed, at the band's edge"
    return f"{times(ratio)} {interval} {chain}'s speed, not measurable under this load"


# -- reading the outputs --------------------------------------------------------------------------------------------
class Inputs:
    """The registered tables (CSV, under `root`) and the collected result tables (parquet, by name)."""

    def __init__(self, root: Path, collected: dict[str, str | Path] | None = None):
        self.root = root
        self.collected = {name: Path(path) for name, path in (collected or {}).items()}
        self._cache: dict[str, pd.DataFrame] = {}

    def table(self, name: str) -> pd.DataFrame:
        """paper/tables/<name>.csv (empty when the file is empty)."""
        if name not in self._cache:
            path = self.root / f"paper/tables/{name}.csv"
            try:
                self._cache[name] = pd.read_csv(path)
            except pd.errors.EmptyDataError:
                self._cache[name] = pd.DataFrame()
        return self._cache[name]

    def result(self, name: str) -> pd.DataFrame:
        """A collected result table; empty when the article was not given it."""
        key = "collected:" + name
        if key not in self._cache:
            path = self.collected.get(name)
            self._cache[key] = pd.read_parquet(path) if path is not None and path.exists() else pd.DataFrame()
        return self._cache[key]

    def labels(self) -> pd.DataFrame:
        return self.table("tab01_hardware")

    def device(self, gpu: str) -> str:
        rows = self.labels()
        rows = rows[rows["label"] == gpu] if len(rows) else rows
        return str(rows["device"].iloc[0]) if len(rows) else gpu

    def origin(self, gpu: str) -> str:
        rows = self.labels()
        rows = rows[rows["label"] == gpu] if len(rows) else rows
        return str(rows["origin"].iloc[0]) if len(rows) else ""

    def is_gpu(self, gpu: str) -> bool:
        """A label whose device reports streaming multiprocessors (tab01's SMs) is a GPU."""
        rows = self.labels()
        rows = rows[rows["label"] == gpu] if len(rows) else rows
        return bool(len(rows)) and "sms" in rows and bool(rows["sms"].notna().any())

    def named(self, gpu: str) -> str:
        """'h200 (NVIDIA H200, shipped reference)'."""
        return f"{gpu} ({self.device(gpu)}, {self.origin(gpu)})"

    def workload(self, gpu: str) -> str:
        """'128x128x128 volumes, 40,226,433 parameters, T = 250' from the runs of `gpu`."""
        runs = self.result("runs")
        if runs.empty or "gpu" not in runs:
            return ""
        rows = runs[runs["gpu"] == gpu]
        if rows.empty:
            return ""
        row = rows.iloc[0]
        parts = []
        if present(row.get("volume_shape")):
            parts.append(f"{row['volume_shape']} volumes")
        if present(row.get("parameters")):
            parts.append(f"{int(row['parameters']):,} parameters")
        if present(row.get("sample_timesteps")):
            parts.append(f"T = {int(row['sample_timesteps'])}")
        return ", ".join(parts)

    def class_rows(self, phase: str = "train") -> pd.DataFrame:
        """tab03's class rows of `phase`, one tool per (gpu, variant): Nsight Compute where present."""
        classes = self.table("tab03_kernels_by_class")
        if classes.empty:
            return classes
        rows = classes[classes["phase"] == phase]
        rank = rows["tool"].map({"ncu": 0, "torch": 1, "nsys": 2}).fillna(3)
        best = rows.assign(_rank=rank).groupby(["gpu", "variant"])["_rank"].transform("min")
        return rows[rank == best]


def table_notes(md: Path) -> list[str]:
    """The numbered notes under a table (write_table puts them after the Markdown table)."""
    if not md.exists():
        return []
    return [match.group(1) for match in re.finditer(r"^\[\d+\] (.*?)\s*$", md.read_text(), re.M)]


@dataclass(frozen=True)
class Context:
    """What an output's paragraph is written from: the article's inputs, `verdict(runs, phase)` calling each speed-up
    faster, slower or within noise (reporting.derived.speedup_verdict), and the datasheet peaks by label
    (data/gpu_peaks.yaml)."""

    inputs: Inputs
    verdict: Callable
    peaks: dict = field(default_factory=dict)

    def verdicts(self, phase: str = "train") -> pd.DataFrame:
        return verdicts(self.inputs, self.verdict, phase)


def verdicts(inputs: Inputs, verdict: Callable, phase: str = "train") -> pd.DataFrame:
    """Each run's speed-up over its label's baseline, with its verdict (none without runs)."""
    runs = inputs.result("runs")
    if runs.empty:
        return pd.DataFrame(columns=["gpu", "variant", "speedup", "low", "high", "within_noise", "verdict"])
    return verdict(runs, phase)
