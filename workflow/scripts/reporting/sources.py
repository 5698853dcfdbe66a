"""Every run the paper's figures and tables draw on: labels measured here and shipped reference sets.

A file belongs to a run by its path: ``<root>/<gpu>/<variant>/<file>`` (``train.json``, ``sample.json``,
``quality.json``, ``train_steps.csv``) or ``<root>/<gpu>/<variant>/profile/<phase>/<file>`` (``<tool>_summary.csv``,
``<tool>_kernels.parquet``, ``ncu_rules.csv``, shipped gzipped as ``ncu_rules.csv.gz``), with ``<root>`` either ``results`` (measured here) or
``data/reference`` (shipped). A shipped label that is also measured here is left out: measured wins.
Every row of every frame carries ``gpu``, ``variant``, ``origin``, ``device`` and ``date``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import collect
from .collect import date_of, device_of

MEASURED = "measured here"
SHIPPED = "shipped reference"
RUN_FILES = ("train.json", "sample.json", "quality.json", "train_steps.csv")
# Name endings of the files the kernel figures and tables read from a shipped set (the rules may ship gzipped).
SHIPPED_NAMES = ("train.json", "sample.json", "quality.json", "_summary.csv", "_kernels.parquet", "ncu_rules.csv",
                 "ncu_rules.csv.gz")
# Preference among tools for one (gpu, variant, phase): the richest first.
TOOL_PREFERENCE = ("ncu", "nsys", "torch")
TAGS = ["gpu", "variant", "origin", "device", "date"]


def _keys(path: Path) -> dict:
    """gpu, variant (and phase, tool, kind) of a result file, from its path."""
    name = path.name
    if name in RUN_FILES:
        return {"gpu": path.parents[1].name, "variant": path.parent.name, "phase": None, "tool": None, "kind": name}
    if path.parent.parent.name == "profile":
        keys = {"gpu": path.parents[3].name, "variant": path.parents[2].name, "phase": path.parent.name}
        if name in ("ncu_rules.csv", "ncu_rules.csv.gz"):
            return {**keys, "tool": "ncu", "kind": "rules"}
        if name.endswith("_summary.csv"):
            return {**keys, "tool": name.removesuffix("_summary.csv"), "kind": "summary"}
        if name.endswith("_kernels.parquet"):
            return {**keys, "tool": name.removesuffix("_kernels.parquet"), "kind": "kernels"}
    return {"gpu": None, "variant": None, "phase": None, "tool": None, "kind": None}


def is_gpu(provenance: dict) -> bool:
    return provenance.get("device_type") == "cuda" and not provenance.get("emulated_on_cpu")


@dataclass
class Sources:
    """The files of every run, tagged with their origin."""

    files: pd.DataFrame  # path, gpu, variant, phase, tool, kind, origin
    provenance: dict = field(default_factory=dict)  # (gpu, variant) -> provenance dict

    @classmethod
    def gather(cls, measured: Iterable, shipped: Iterable = (), measured_labels: Iterable[str] = ()) -> "Sources":
        """measured: files produced here; shipped: files under data/reference/<label>/; measured_labels: the labels
        this invocation measures (a shipped set of one of those labels is skipped)."""
        rows = [{"path": Path(p), **_keys(Path(p)), "origin": MEASURED} for p in measured]
        here = set(measured_labels) | {r["gpu"] for r in rows}
        rows += [
            {"path": Path(p), **_keys(Path(p)), "origin": SHIPPED}
            for p in shipped
            if _keys(Path(p))["gpu"] not in here
        ]
        files = pd.DataFrame(rows, columns=["path", "gpu", "variant", "phase", "tool", "kind", "origin"])
        files = files[files["kind"].notna()].drop_duplicates("path").reset_index(drop=True)
        provenance = {}
        for kind in ("train.json", "sample.json", "quality.json"):
            for row in files[files["kind"] == kind].itertuples():
                key = (row.gpu, row.variant)
                if key not in provenance:
                    provenance[key] = json.loads(Path(row.path).read_text()).get("provenance", {})
        return cls(files, provenance)

    @classmethod
    def from_job(cls, job) -> "Sources":
        """From a Snakemake job: every named input except `shipped` is measured here; params.gpus are the labels."""
        measured = [f for name, files in job.input.items() if name != "shipped" for f in _as_list(files)]
        shipped = _as_list(job.input.get("shipped", []))
        return cls.gather(measured, shipped, getattr(job.params, "gpus", []))

    # -- run identity -------------------------------------------------------------------------------------------
    def labels(self) -> list[str]:
        """Hardware labels: measured here first (in path order), then shipped ones, alphabetically."""
        measured = list(dict.fromkeys(self.files.loc[self.files["origin"] == MEASURED, "gpu"]))
        shipped = sorted(set(self.files.loc[self.files["origin"] == SHIPPED, "gpu"]) - set(measured))
        return measured + shipped

    def origin(self, gpu: str) -> str:
        origins = self.files.loc[self.files["gpu"] == gpu, "origin"]
        return origins.iloc[0] if len(origins) else MEASURED

    def provenance_of(self, gpu: str, variant: str | None = None) -> dict:
        if variant is not None and (gpu, variant) in self.provenance:
            return self.provenance[(gpu, variant)]
        for (label, _), prov in sorted(self.provenance.items()):
            if label == gpu:
                return prov
        return {}

    def tags(self, gpu: str, variant: str | None = None) -> dict:
        prov = self.provenance_of(gpu, variant)
        return {"gpu": gpu, "variant": variant, "origin": self.origin(gpu),
                "device": device_of(prov) if prov else "unknown device", "date": date_of(prov)}

    def panel_label(self, gpu: str) -> str:
        tags = self.tags(gpu)
        return panel_label(gpu, tags["device"], tags["origin"], tags["date"])

    def gpu_device(self, gpu: str) -> bool:
        """True when the label's runs executed on a real GPU."""
        return is_gpu(self.provenance_of(gpu))

    def _tag(self, frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        # Once per run, not per row: kernel tables have tens of thousands of rows.
        runs = {run: self.tags(*run) for run in set(zip(frame["gpu"], frame["variant"]))}
        keys = list(zip(frame["gpu"], frame["variant"]))
        for key in ("origin", "device", "date"):
            frame[key] = [runs[run][key] for run in keys]
        rest = [c for c in frame.columns if c not in TAGS]
        return frame[TAGS + rest]

    def _paths(self, kind: str) -> pd.DataFrame:
        return self.files[self.files["kind"] == kind]

    # -- frames -------------------------------------------------------------------------------------------------
    def hardware(self) -> pd.DataFrame:
        """One row per label: the provenance of its first variant (in variant order)."""
        from .style import variant_order

        rows = []
        for gpu in self.labels():
            variants = variant_order([v for (g, v) in self.provenance if g == gpu])
            prov = self.provenance_of(gpu, variants[0] if variants else None)
            rows.append({"gpu": gpu, "origin": self.origin(gpu), "provenance": prov})
        return pd.DataFrame(rows, columns=["gpu", "origin", "provenance"])

    def end_to_end(self) -> pd.DataFrame:
        """collect.end_to_end over every run, tagged."""
        train = list(self._paths("train.json")["path"])
        sample = list(self._paths("sample.json")["path"])
        if not train and not sample:
            return pd.DataFrame(columns=TAGS)
        return self._tag(collect.end_to_end(train, sample))

    def quality(self) -> pd.DataFrame:
        paths = list(self._paths("quality.json")["path"])
        if not paths:
            return pd.DataFrame(columns=TAGS)
        return self._tag(collect.quality(paths))

    def summaries(self) -> pd.DataFrame:
        """Per-class summaries of every profile: one row per (gpu, variant, phase, tool, kernel class)."""
        frames = []
        for row in self._paths("summary").itertuples():
            frame = pd.read_csv(row.path).drop(columns="source", errors="ignore")
            frames.append(frame.assign(gpu=row.gpu, variant=row.variant, phase=row.phase, tool=row.tool))
        if not frames:
            return pd.DataFrame(columns=TAGS + ["phase", "tool", "kernel_class"])
        return self._order(self._tag(pd.concat(frames, ignore_index=True)))

    def kernel_tables(self, tools: Iterable[str] = TOOL_PREFERENCE) -> pd.DataFrame:
        """The tidy per-kernel tables (parquet) of the given tools, tagged with gpu, variant, phase, tool."""
        frames = []
        for row in self._paths("kernels").itertuples():
            if row.tool in set(tools):
                frame = pd.read_parquet(row.path).drop(columns="source", errors="ignore")
                frames.append(frame.assign(gpu=row.gpu, variant=row.variant, phase=row.phase, tool=row.tool))
        if not frames:
            return pd.DataFrame(columns=TAGS + ["phase", "tool", "kernel_class", "duration_ns"])
        return self._order(self._tag(pd.concat(frames, ignore_index=True)))

    def ncu_rules(self) -> pd.DataFrame:
        frames = []
        for row in self._paths("rules").itertuples():
            frame = pd.read_csv(row.path)
            frames.append(frame.assign(gpu=row.gpu, variant=row.variant, phase=row.phase))
        if not frames:
            return pd.DataFrame(columns=TAGS + ["phase", "kernel_id", "rule", "estimated_speedup_pct"])
        return self._order(self._tag(pd.concat(frames, ignore_index=True)))

    def tools(self, gpu: str, phase: str | None = None) -> list[str]:
        """Profilers with a summary for `gpu` (and `phase`), richest first."""
        files = self._paths("summary")
        files = files[files["gpu"] == gpu]
        if phase is not None:
            files = files[files["phase"] == phase]
        return [t for t in TOOL_PREFERENCE if t in set(files["tool"])] + sorted(set(files["tool"]) - set(TOOL_PREFERENCE))

    def _order(self, frame: pd.DataFrame) -> pd.DataFrame:
        return frame.reset_index(drop=True)


def _as_list(files) -> list:
    if isinstance(files, (str, Path)):
        return [files]
    return list(files)


def panel_label(gpu: str, device: str, origin: str, date: str) -> str:
    """'<gpu>: <device>, <origin>, <date>' (the title of every panel of a hardware label)."""
    return f"{gpu}: " + ", ".join(part for part in (device, origin, date) if part)


def preferred_tool(frame: pd.DataFrame, keys=("gpu", "variant", "phase")) -> pd.DataFrame:
    """Rows of the richest tool per run (ncu, else nsys, else torch)."""
    if frame.empty:
        return frame
    rank = {tool: k for k, tool in enumerate(TOOL_PREFERENCE)}
    best = frame.assign(_rank=frame["tool"].map(rank).fillna(len(rank)))
    best = best[best["_rank"] == best.groupby(list(keys))["_rank"].transform("min")]
    return best.drop(columns="_rank").reset_index(drop=True)
