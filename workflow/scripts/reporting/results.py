"""The one reader of results: the runs measured here and the shipped reference sets, into the tidy tables that every
figure and table draws on.

A result file belongs to a run by its path (planning.layout, the one home of the result layout):
``<root>/<workload>/<gpu>/<variant>/<file>`` and the rest, with ``<root>`` either ``results`` (measured here) or
``data/reference`` (shipped). A shipped label that is also measured here is left out of the tables the figures draw
(measured wins); it is read apart, as the reference that the run measured here is checked against (``reference_*``
tables, tab08).

`collect` reads every file once and writes the tables (the "bundle") as Parquet files; `Results` reads a bundle
back in a figure or table job. Every row of every table carries ``gpu``, ``variant``, ``origin``, ``device`` and
``date``; the hardware table names each label's ``workload``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from jobio.errors import ExpectedError
from planning.layout import REFERENCE, file_keys, parse
from planning.set_manifest import check_sets
from measurement.throughput import run_columns as throughput_columns
from medddpm import compile_cache

MEASURED = "measured here"
SHIPPED = "shipped reference"
# Preference among tools for one (gpu, variant, phase): the richest first.
TOOL_PREFERENCE = ("ncu", "nsys", "torch")
TAGS = ["gpu", "variant", "origin", "device", "date"]
# The bundle: one Parquet file per table.
TABLES = ("hardware", "runs", "quality", "losses", "summaries", "kernels", "ncu_kernels", "rules", "slices", "bench",
          "memory_floor", "comparisons", "samplers", "study_samplers",
          "reference_hardware", "reference_runs", "reference_summaries", "study", "study_losses")
# The kernels of every tool with the columns all tools share; Nsight Compute's kernels with every metric apart
# (a CPU run adds tens of thousands of operator rows that have none: reading them with 500 metric columns would
# cost each figure a second).
KERNEL_IDENTITY = ["phase", "tool", "launch", "name", "short_name", "kernel_class", "precision", "instances",
                   "duration_ns"]


def is_gpu(provenance: dict) -> bool:
    return provenance.get("device_type") == "cuda" and not provenance.get("emulated_on_cpu")


def device_of(provenance: dict) -> str:
    """Device name from a provenance dict ('NVIDIA H200', the host CPU, ...), marking emulation."""
    name = provenance.get("device_name")
    if not name:
        kind = provenance.get("device_type", "?")
        name = f"CPU ({provenance['host_cpu']})" if kind == "cpu" and provenance.get("host_cpu") else kind
    return name + (" (emulated on CPU)" if provenance.get("emulated_on_cpu") else "")


def date_of(provenance: dict) -> str:
    return (provenance.get("measured_at") or "")[:10]


def panel_label(gpu: str, device: str, origin: str, date: str, workload: str = "") -> str:
    """'<gpu> (<workload>): <device>, <origin>, <date>' (the title of every panel of a hardware label)."""
    head = f"{gpu} ({workload})" if workload else gpu
    return f"{head}: " + ", ".join(part for part in (device, origin, date) if part)


def variant_order(variants) -> list[str]:
    """The paper's variants in the paper's order, then the others alphabetically."""
    known = [v for v in VARIANT_ORDER if v in set(variants)]
    return known + sorted(set(variants) - set(known))


VARIANT_ORDER = ["baseline", "torch_defaults", "tf32", "channels_last", "tf32_channels_last"]


# -- collecting ---------------------------------------------------------------------------------------------------
def gather(measured: Iterable, shipped: Iterable = (), measured_labels: Iterable[str] = ()) -> pd.DataFrame:
    """One row per result file: path, gpu, variant, phase, tool, kind, origin. `measured_labels` are the labels this
    invocation measures: a shipped set of one of those is skipped (measured wins)."""
    rows = [{"path": Path(p), **file_keys(Path(p)), "origin": MEASURED} for p in measured]
    here = set(measured_labels) | {r["gpu"] for r in rows}
    rows += [{"path": Path(p), **file_keys(Path(p)), "origin": SHIPPED} for p in shipped
             if file_keys(Path(p))["gpu"] not in here]
    files = pd.DataFrame(rows, columns=["path", "workload", "gpu", "variant", "phase", "tool", "kind", "seed",
                                        "origin"])
    return files[files["kind"].notna()].drop_duplicates("path").reset_index(drop=True)


class ResultFileError(ExpectedError):
    """A result file (measured here, or of a shipped or imported set) that cannot be read: cut short, damaged or of
    another schema (a set's file unlike its manifest.sha256 is refused before: planning.set_manifest). The message
    names the file and the fix."""


def _shipped(path: Path) -> bool:
    return parse(path).root == REFERENCE


def _fix(path: Path) -> str:
    if _shipped(path):
        return (f"fix: restore the set from where it came from (git checkout -- {path} for a set committed here, or "
                "copy the exported set again; sha256sum -c manifest.sha256 in its folder lists the damaged files), "
                "or leave its label out of reference_results")
    return (f"fix: run the job that writes it again (your snakemake command with --forcerun {path} added before any "
            "--)")


@contextmanager
def _reading(path: Path, what: str) -> Iterator[None]:
    """One line naming `path` (a `what`) for what a damaged or foreign file raises while it is read."""
    try:
        yield
    except ExpectedError:
        raise
    except json.JSONDecodeError as error:
        raise ResultFileError(f"{path}: not a complete {what} (invalid JSON: {error.msg} at line {error.lineno}, "
                              f"column {error.colno}; cut short or damaged); {_fix(path)}") from None
    except KeyError as error:
        raise ResultFileError(f"{path}: has no {error.args[0]!r} entry, which every {what} of this workflow holds "
                              f"(written by another version, or another file); {_fix(path)}") from None
    except (TypeError, ValueError, IndexError, AttributeError, OSError, pd.errors.ParserError) as error:
        detail = " ".join(str(error).split())[:160] or type(error).__name__
        raise ResultFileError(f"{path}: not a readable {what} ({type(error).__name__}: {detail}); "
                              f"{_fix(path)}") from None


def load_csv(path: str | Path) -> pd.DataFrame:
    """A CSV table, refused where it is cut short (profiling.tables.load_csv)."""
    from profiling.tables import load_csv as load

    return load(path)


def load_train_steps(path: str | Path) -> pd.DataFrame:
    """A run's train_steps.csv, refused (ValueError) unless it holds every step its train.json (written by the same
    job) says was run: the warm-up and the timed optimizer steps. Cut at a row boundary, it parses."""
    steps = load_csv(path)
    settings = json.loads(Path(path).with_name("train.json").read_text())["settings"]
    expected = settings["warmup_steps"] + settings["measured_steps"]
    if len(steps) != expected:
        raise ValueError(f"holds {len(steps)} steps, but train.json beside it ran {settings['warmup_steps']} warm-up "
                         f"and {settings['measured_steps']} timed steps ({expected}): cut short or of another run")
    return steps


def _read_json(path: Path) -> dict:
    with _reading(path, Path(path).name):
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict):
            raise TypeError(f"holds a {type(data).__name__}, not an object")
        return data


def _labels(files: pd.DataFrame, measured_labels: Iterable[str]) -> list[str]:
    """Measured labels first (in the config's order), then shipped ones alphabetically."""
    measured = [g for g in measured_labels if g in set(files["gpu"])]
    measured += [g for g in dict.fromkeys(files.loc[files["origin"] == MEASURED, "gpu"]) if g not in measured]
    return measured + sorted(set(files.loc[files["origin"] == SHIPPED, "gpu"]) - set(measured))


def _provenances(files: pd.DataFrame) -> dict[tuple[str, str], dict]:
    provenance: dict[tuple[str, str], dict] = {}
    for kind in ("train.json", "sample.json", "quality.json", "study_run"):
        for row in files[files["kind"] == kind].itertuples():
            provenance.setdefault((row.gpu, row.variant), _read_json(row.path).get("provenance", {}))
    return provenance


def _hardware(files: pd.DataFrame, labels: list[str], provenance: dict) -> pd.DataFrame:
    """One row per label (in label order): where its runs came from and the provenance of its first variant."""
    rows = []
    for gpu in labels:
        origin = files.loc[files["gpu"] == gpu, "origin"].iloc[0]
        variants = variant_order([v for (g, v) in provenance if g == gpu])
        prov = provenance.get((gpu, variants[0]), {}) if variants else {}
        workload = files.loc[files["gpu"] == gpu, "workload"].iloc[0]
        rows.append({"gpu": gpu, "workload": workload, "origin": origin,
                     "device": device_of(prov) if prov else "unknown device", "date": date_of(prov),
                     "is_gpu": is_gpu(prov), "provenance": json.dumps(prov, sort_keys=True)})
    return pd.DataFrame(rows, columns=["gpu", "workload", "origin", "device", "date", "is_gpu", "provenance"])


def _runs(files: pd.DataFrame) -> pd.DataFrame:
    """One row per (gpu, variant): training time per sample, sampling step and volume, volumes per hour, peak memory,
    switches."""
    rows: dict[tuple[str, str], dict] = {}
    for row in files[files["kind"] == "train.json"].itertuples():
        with _reading(row.path, "train.json"):
            data = _read_json(row.path)
            prov = data["provenance"]
            rows[(row.gpu, row.variant)] = {
                "gpu": row.gpu, "variant": row.variant,
                "parameters": data["parameters"],
                "train_ms_per_sample": data["train_ms_per_sample"],
                "train_step_median_ms": data["step_time"]["median_ms"],
                "train_step_q1_ms": data["step_time"]["q1_ms"],
                "train_step_q3_ms": data["step_time"]["q3_ms"],
                "train_steps_measured": data["step_time"]["n"],
                "volume_shape": "x".join(str(side) for side in data.get("volume_shape", [])),
                "samples_per_step": data["settings"]["gradient_accumulation"],
                "train_peak_memory_gib": data["peak_memory_bytes"] / 2**30,
                "memory_kind": data["peak_memory_kind"],
                "switches": json.dumps(prov.get("switches", {}), sort_keys=True),
                "switches_effective": json.dumps(prov.get("switches_effective", {}), sort_keys=True),
                **_flop_columns(data.get("flops")),
                "train_compile_s": data.get("compile_seconds"),
                "train_compile_cache": compile_cache.state(data.get("compile_cache")),
                "bare_loop_ms_per_sample": data.get("bare_loop_ms_per_sample"),
                **_load_columns("train", data),
            }
    for row in files[files["kind"] == "sample.json"].itertuples():
        with _reading(row.path, "sample.json"):
            data = _read_json(row.path)
            rows.setdefault((row.gpu, row.variant), {"gpu": row.gpu, "variant": row.variant}).update(
                sample_step_median_ms=data["step_time"]["median_ms"],
                sample_step_q1_ms=data["step_time"]["q1_ms"],
                sample_step_q3_ms=data["step_time"]["q3_ms"],
                sample_volume_s=data["volume_seconds_estimate"],
                sample_timesteps=data["timesteps"],
                sample_chain_complete=data["chain_complete"],
                sample_peak_memory_gib=data["peak_memory_bytes"] / 2**30,
                sample_volume_shape="x".join(str(side) for side in data.get("volume_shape", [])),
                sample_compile_s=data.get("compile_seconds"),
                sample_compile_cache=compile_cache.state(data.get("compile_cache")),
                # Volumes per hour at batch 1 and at the best batch: None (not measured) in a sample.json written
                # before the throughput sweep.
                **throughput_columns(data),
                **_load_columns("sample", data),
            )
    return pd.DataFrame(list(rows.values()))


def _load_columns(phase: str, data: dict) -> dict:
    """The conditions a job was timed under (measurement.conditions): the cores other processes kept busy during its
    timed steps, the cores there were, what changed on the machine meanwhile and the speed probe's time; NaN / None
    for a job of before the conditions were recorded."""
    conditions = data.get("conditions") or {}
    cores = (conditions.get("before") or {}).get("cpu_count")
    changes = conditions.get("changes")
    probes = [(conditions.get(side) or {}).get("speed_probe_ms") for side in ("before", "after")]
    probes = [float(probe) for probe in probes if probe is not None]
    return {f"{phase}_other_load_cores": conditions.get("other_load_cores", math.nan),
            f"{phase}_cpu_count": math.nan if cores is None else cores,
            f"{phase}_condition_changes": "; ".join(changes) if changes else None,
            # The fixed single-core workload's time before and after the timed steps, averaged (NaN for a job of
            # before the probe).
            f"{phase}_speed_probe_ms": sum(probes) / len(probes) if probes else math.nan}


def _flop_columns(flops: dict | None) -> dict:
    """The FLOP counts a training job recorded (medddpm.flops.step_flops): the model's per training sample and per
    forward (no recomputation), the executed per training sample, and the volume they were counted at; NaN for a
    train.json of before the counts."""
    if not flops:
        return {"train_model_flop_per_sample": math.nan, "forward_model_flop": math.nan,
                "train_executed_flop_per_sample": math.nan, "flop_shape": ""}
    model = flops["model"]
    return {"train_model_flop_per_sample": float(model["train_micro_batch"]["total"]),
            "forward_model_flop": float(model["forward"]["total"]),
            "train_executed_flop_per_sample": float(flops["executed"]["train_micro_batch"]["total"]),
            "flop_shape": "x".join(str(side) for side in model["shape"])}


def _rates(files: pd.DataFrame) -> dict[str, dict]:
    """Each label's device_rates.json (its measured ceilings), by label."""
    return {row.gpu: _read_json(row.path) for row in files[files["kind"] == "device_rates"].itertuples()}


# The paired comparison's columns (comparison.json, measurement.verdicts) a runs row carries per phase and reference:
# <phase>_vs_<reference>_<key> (reporting.derived.speedup_verdict reads them).
PAIRED_KEYS = ("speedup", "low", "high", "verdict", "why", "rounds")


def _comparisons(files: pd.DataFrame) -> pd.DataFrame:
    """One row per paired comparison (gpu, phase, reference, variant): its ratio, interval, verdict and why, the
    rounds it took and why they stopped, and the median step of each side over the rounds (a comparison.json of
    before the groups has none)."""
    rows = []
    for row in files[files["kind"] == "comparison"].itertuples():
        data = _read_json(row.path)
        with _reading(row.path, "comparison.json"):
            for phase, record in data["phases"].items():
                medians = record.get("median_ms") or {}
                for compared in record["comparisons"]:
                    rows.append({"gpu": row.gpu, "phase": phase, **compared, "stopped": record["stopped"],
                                 "phase_seconds": record["seconds"], "unit": record["unit"],
                                 "variant_median_ms": medians.get(compared["variant"]),
                                 "reference_median_ms": medians.get(compared["reference"])})
    columns = ["gpu", "phase", "reference", "variant", "speedup", "low", "high", "coverage", "rounds", "verdict", "why",
               "stopped", "phase_seconds", "unit"]
    return pd.DataFrame(rows).reindex(columns=[*columns, *(c for c in (rows[0] if rows else {}) if c not in columns)])


def with_comparisons(runs: pd.DataFrame, comparisons: pd.DataFrame) -> pd.DataFrame:
    """The runs with each paired comparison's columns (PAIRED_KEYS) on the variant's row; the reference's own row
    says "reference" (a ratio of 1)."""
    if runs.empty or comparisons.empty:
        return runs
    runs = runs.copy()
    for (phase, reference), group in comparisons.groupby(["phase", "reference"], sort=False):
        prefix = f"{phase}_vs_{reference}_"
        keyed = group.set_index(["gpu", "variant"])
        index = pd.MultiIndex.from_frame(runs[["gpu", "variant"]])
        for key in PAIRED_KEYS:
            runs[prefix + key] = keyed[key].reindex(index).to_numpy()
        own = runs["variant"].eq(reference) & runs["gpu"].isin(set(group["gpu"]))
        runs.loc[own, [prefix + k for k in ("speedup", "low", "high")]] = 1.0
        runs.loc[own, prefix + "verdict"] = "reference"
    # Each variant's median step over its label's paired rounds, per phase (<phase>_rounds_median_ms): the same step
    # as its own job's, timed in the same run beside the others (reporting.conformance checks the two agree).
    if "variant_median_ms" in comparisons:
        sides = pd.concat([
            comparisons[["gpu", "phase", "variant", "variant_median_ms"]].rename(columns={"variant_median_ms": "ms"}),
            comparisons[["gpu", "phase", "reference", "reference_median_ms"]].rename(
                columns={"reference": "variant", "reference_median_ms": "ms"})]).dropna(subset=["ms"])
        medians = sides.drop_duplicates(["gpu", "phase", "variant"]).set_index(["gpu", "variant", "phase"])["ms"]
        index = pd.MultiIndex.from_frame(runs[["gpu", "variant"]])
        for phase in sorted(set(comparisons["phase"])):
            mine = medians.xs(phase, level="phase") if phase in medians.index.get_level_values("phase") else None
            runs[f"{phase}_rounds_median_ms"] = (mine.reindex(index).to_numpy(dtype=float) if mine is not None
                                                 else float("nan"))
    return runs


SAMPLER_COLUMNS = ["gpu", "variant", "sampler", "steps", "evaluations", "timesteps", "volume_shape",
                   "seconds_per_volume", "volumes_per_hour_b1", "best_batch", "volumes_per_hour_best", "peak_memory_gib",
                   "chain_speedup", "chain_speedup_low", "chain_speedup_high", "chain_speedup_verdict",
                   "chain_speedup_rounds"]
# samplers.json's `vs_chain` (the T-step chain's seconds over the sampler's, paired by round) -> SAMPLER_COLUMNS.
VS_CHAIN = {"chain_speedup": "speedup", "chain_speedup_low": "low", "chain_speedup_high": "high",
            "chain_speedup_verdict": "verdict", "chain_speedup_rounds": "rounds"}


def _samplers(files: pd.DataFrame) -> pd.DataFrame:
    """One row per (gpu, variant, sampler, steps) of the runs' samplers.json (medddpm.fast_sampling), the T-step chain
    (`ddpm`) among them: a whole chain's seconds per volume at batch 1, volumes per hour at batch 1 and at the best
    batch, peak memory at batch 1, and a fast sampler's speed-up over the chain, paired by round, with its interval
    and verdict."""
    rows = []
    for row in files[files["kind"] == "samplers.json"].itertuples():
        data = _read_json(row.path)
        with _reading(row.path, "samplers.json"):
            shape = "x".join(map(str, data["volume_shape"]))
            for record in data["samplers"]:
                one = next((b for b in record["batches"] if b["batch"] == 1 and b.get("fits")), {})
                rows.append({"gpu": row.gpu, "variant": row.variant, "sampler": record["sampler"],
                             "steps": record["steps"], "evaluations": record["evaluations"],
                             "timesteps": data["timesteps"], "volume_shape": shape,
                             "seconds_per_volume": record["seconds_per_volume"],
                             "volumes_per_hour_b1": record["volumes_per_hour_b1"], "best_batch": record["best_batch"],
                             "volumes_per_hour_best": record["volumes_per_hour_best"],
                             "peak_memory_gib": one["peak_memory_bytes"] / 2**30 if one else None,
                             **{column: (record.get("vs_chain") or {}).get(key) for column, key in VS_CHAIN.items()}})
    frame = pd.DataFrame(rows, columns=SAMPLER_COLUMNS)
    # Every sampler of a job evaluates the same U-Net through the same graphs: the peak at batch 1 is the job's, the
    # largest any of them recorded (a file of before the per-batch peak has each sampler's own chain's, and only the
    # first chains saw the graphs allocated).
    frame["peak_memory_gib"] = frame.groupby(["gpu", "variant"])["peak_memory_gib"].transform("max")
    return frame


def _study_samplers(files: pd.DataFrame) -> pd.DataFrame:
    """One row per study run and fast sampler at a step count (run.json's `samplers`): its samples against the real
    images; plus the run's own T-step chain as sampler `ddpm` at T steps, the reference each is judged against."""
    rows = []
    for row in files[files["kind"] == "study_run"].itertuples():
        data = _read_json(row.path)
        if "samplers" not in data:
            continue
        with _reading(row.path, "study run.json"):
            keys = {"gpu": row.gpu, "variant": row.variant, "seed": int(row.seed),
                    "volume_shape": "x".join(map(str, data["volume_shape"])), "timesteps": data["timesteps"]}
            rows.append({**keys, "sampler": "ddpm", "steps": data["timesteps"], "evaluations": data["timesteps"],
                         "seconds_per_volume": data["sampling"]["seconds_per_volume"],
                         **{column: data["vs_real"][key] for column, key in VS_REAL.items()}})
            for record in data["samplers"]:
                rows.append({**keys, "sampler": record["sampler"], "steps": record["steps"],
                             "evaluations": record["evaluations"], "seconds_per_volume": record["seconds_per_volume"],
                             **{column: record["vs_real"][key] for column, key in VS_REAL.items()}})
    columns = ["gpu", "variant", "seed", "volume_shape", "timesteps", "sampler", "steps", "evaluations",
               "seconds_per_volume", *VS_REAL]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["gpu", "variant", "sampler", "steps", "seed"], kind="stable", ignore_index=True) \
        if len(frame) else frame


def _quality(files: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for row in files[files["kind"] == "quality.json"].itertuples():
        with _reading(row.path, "quality.json"):
            data = _read_json(row.path)
            rows.append({
                "gpu": row.gpu, "variant": row.variant,
                "forward_rel_error": data["numeric"]["forward_relative_error"],
                "gradient_rel_error": data["numeric"]["gradient_relative_error"],
                "loss_abs_deviation_max": data["loss_curve"]["loss_abs_deviation_max"],
                "ssim_vs_real": data["vs_real"]["ssim_mean"],
                "psnr_vs_real_db": data["vs_real"]["psnr_db_mean"],
                "ssim_vs_baseline": data["vs_baseline"]["ssim_mean"],
                "psnr_vs_baseline_db": data["vs_baseline"]["psnr_db_mean"],
                "identical_to_baseline": data["vs_baseline"]["identical"],
            })
    return pd.DataFrame(rows)


def _keyed_frames(files: pd.DataFrame, kind: str, read) -> Iterator[pd.DataFrame]:
    """Each `kind` file's table with the keys of its path (gpu, variant, phase; the tool of a summary or kernels)."""
    for row in files[files["kind"] == kind].itertuples():
        with _reading(row.path, f"{Path(row.path).name} table"):
            frame = read(row.path).drop(columns="source", errors="ignore")
        keys = {"gpu": row.gpu} if pd.isna(row.variant) else {"gpu": row.gpu, "variant": row.variant}
        if pd.notna(row.phase):
            keys["phase"] = row.phase
        if kind in ("summary", "kernels"):
            keys["tool"] = row.tool
        yield frame.assign(**keys)


def _per_file(files: pd.DataFrame, kind: str, read) -> pd.DataFrame:
    frames = list(_keyed_frames(files, kind, read))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["gpu", "variant"])


def _kernel_tables(files: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kernels, ncu_kernels): every profiled kernel of every tool with its identity columns, and Nsight Compute's
    kernels with all their metrics. Concatenated apart: one table of every tool's rows carried the ncu exports' ~580
    metric columns, as NaN, on the ~100,000 rows of torch.profiler's kernels, and took most of the collecting job's
    time (its concatenation and tagging 7 of 10 s in the default run)."""
    from profiling.tables import load_frame

    identity = ["gpu", "variant", *KERNEL_IDENTITY]
    every, ncu = [], []
    columns: dict[str, None] = {}  # every table's columns in the order they first appear, as one concatenation has them
    for frame in _keyed_frames(files, "kernels", load_frame):
        columns.update(dict.fromkeys(frame.columns))
        every.append(frame.reindex(columns=identity))
        if (frame["tool"] == "ncu").all():
            ncu.append(frame)
    if not every:
        empty = pd.DataFrame(columns=["gpu", "variant"])
        return empty.reindex(columns=identity), empty
    kernels = pd.concat(every, ignore_index=True)
    if not ncu:
        return kernels, kernels.iloc[0:0]
    metrics = pd.concat(ncu, ignore_index=True)
    return kernels, metrics[[name for name in columns if name in metrics]]


def _study(files: pd.DataFrame) -> pd.DataFrame:
    """One row per run of the quality study (gpu, variant, seed): its budget and wall times, its samples against the
    real images, its float64 errors, its switches, the rerun of its seed where it carries one, and (comparison.json)
    its samples and loss curve against its reference (the baseline's run of the same seed; the baseline's own seeds
    against its first)."""
    rows: dict[tuple, dict] = {}
    for row in files[files["kind"] == "study_run"].itertuples():
        data = _read_json(row.path)
        with _reading(row.path, "study run.json"):
            rows[(row.gpu, row.variant, int(row.seed))] = _study_row(row, data)
    for row in files[files["kind"] == "study_comparison"].itertuples():
        data = _read_json(row.path)
        key = (row.gpu, row.variant, int(row.seed))
        if key not in rows:
            continue
        with _reading(row.path, "study comparison.json"):
            versus, curve = data["vs_baseline"], data["loss_curve"]
            rows[key].update(ssim_vs_baseline=versus["ssim_mean"], psnr_vs_baseline_db=versus["psnr_db_mean"],
                             max_abs_diff_vs_baseline=versus["max_abs_diff"],
                             identical_to_baseline=versus["identical"],
                             loss_deviation_vs_baseline=curve["mean_abs_deviation"])
    frame = pd.DataFrame(list(rows.values()))
    # Seeds in order whatever order the files came in (_tag then orders labels and variants, keeping this order).
    return frame.sort_values(["gpu", "variant", "seed"], kind="stable", ignore_index=True) if len(frame) else frame


def _study_row(row, data: dict) -> dict:
    """The row of one study run from its run.json."""
    prov, real, numeric = data["provenance"], data["vs_real"], data["numeric"]
    training, sampling = data["training"], data["sampling"]
    return {
        "gpu": row.gpu, "variant": row.variant, "seed": int(row.seed),
        # The study runs on its own day, not necessarily the label's timing runs' (the label's date elsewhere).
        "date": date_of(prov),
        "volume_shape": "x".join(map(str, data["volume_shape"])), "parameters": data["parameters"],
        "timesteps": data["timesteps"], "optimizer_steps": training["optimizer_steps"],
        "run_s": data.get("wall_seconds"), "train_s": training["seconds"],
        # The runs of a variant train together: each run's share of the job's time per optimizer step.
        "train_step_ms": training["ms_per_step"],
        "compile_s": training["compile_seconds"], "sample_s_per_volume": sampling["seconds_per_volume"],
        "final_loss": training["final_loss"],
        **{column: real[key] for column, key in VS_REAL.items()},
        "lesion_contrast": real["lesion_contrast_mean"], "lesion_contrast_real": real["lesion_contrast_real_mean"],
        "forward_rel_error": numeric["forward_relative_error"],
        "gradient_rel_error": numeric["gradient_relative_error"],
        "sampling_forward_rel_error": numeric["sampling_forward_relative_error"],
        "switches": json.dumps(prov.get("switches", {}), sort_keys=True),
        "switches_effective": json.dumps(prov.get("switches_effective", {}), sort_keys=True),
        **_rerun_columns(data.get("rerun")),
    }


# The study table's columns of a run's comparison with the real images (run.json's `vs_real`), by vs_real's keys.
VS_REAL = {"ssim_vs_real": "ssim_mean", "psnr_vs_real_db": "psnr_db_mean", "wasserstein_vs_real": "wasserstein_mean"}


def _rerun_columns(rerun: dict | None) -> dict:
    """The `rerun_*` columns of a study run: the same seed trained again in the same job (the baseline's first seed
    carries it, where the study has `rerun` set), empty for every other run so that every row has the columns."""
    if rerun is None:
        return {"rerun_seed": None, "rerun_weights_identical": None, "rerun_max_abs_weight_difference": None,
                **{f"rerun_{column}": None for column in VS_REAL}}
    return {"rerun_seed": int(rerun["seed"]), "rerun_weights_identical": bool(rerun["weights_identical"]),
            "rerun_max_abs_weight_difference": float(rerun["max_abs_weight_difference"]),
            **{f"rerun_{column}": rerun["vs_real"][key] for column, key in VS_REAL.items()}}


def _study_losses(files: pd.DataFrame) -> pd.DataFrame:
    frames = []
    for row in files[files["kind"] == "study_losses"].itertuples():
        with _reading(row.path, "study losses table"):
            losses = load_csv(row.path)
            steps = json.loads(Path(row.path).with_name("run.json").read_text())["training"]["optimizer_steps"]
            if len(losses) != steps:
                raise ValueError(f"holds {len(losses)} steps, but run.json beside it trained {steps}: cut short or "
                                 "of another run")
            frames.append(losses.assign(gpu=row.gpu, variant=row.variant, seed=int(row.seed)))
    if not frames:
        return pd.DataFrame(columns=["gpu", "variant", "seed"])
    return pd.concat(frames, ignore_index=True).sort_values(["gpu", "variant", "seed", "step"], kind="stable",
                                                            ignore_index=True)


def _slices(files: pd.DataFrame) -> pd.DataFrame:
    """The middle slices of every study run's first sample ("sample") and of the real image of its mask ("real")."""
    rows = []
    for row in files[files["kind"] == "study_slice"].sort_values(["gpu", "variant", "seed"]).itertuples():
        with _reading(row.path, "slice file"):
            planes = np.load(row.path)
        for name, image in zip(("sample", "real"), planes):
            rows.append({"gpu": row.gpu, "variant": row.variant, "seed": int(row.seed), "image": name,
                         "height": image.shape[0], "width": image.shape[1],
                         "values": np.asarray(image, dtype=np.float32).ravel().tolist()})
    return pd.DataFrame(rows, columns=["gpu", "variant", "seed", "image", "height", "width", "values"])


def _tag(frame: pd.DataFrame, hardware: pd.DataFrame, labels: list[str], by_phase: bool = False) -> pd.DataFrame:
    """Tags first (origin, device, date of the label), rows in label then variant order; `by_phase`: label, phase
    (train, sample, any other), then variant, so that each panel row's kernels are one slice (Results.ncu_rows)."""
    if frame.empty:
        return pd.DataFrame(columns=TAGS + [c for c in frame.columns if c not in TAGS])
    info = hardware.set_index("gpu")
    order = {g: k for k, g in enumerate(labels)}
    variants = {v: k for k, v in enumerate(variant_order(frame["variant"].dropna().unique()))}
    # Rows by label, then variant (stable; an unranked row last), taken once: sorting a copy with rank columns added
    # and dropped copied the Nsight Compute kernels' ~580 columns four times (2.3 s of the collecting job).
    keys = [frame["variant"].map(variants).to_numpy(dtype=float, na_value=np.inf)]
    if by_phase:
        keys.append(frame["phase"].map({"train": 0, "sample": 1}).to_numpy(dtype=float, na_value=np.inf))
    rows = np.lexsort((*keys, frame["gpu"].map(order).to_numpy(dtype=float, na_value=np.inf)))
    frame = frame.take(rows).reset_index(drop=True)
    for key in ("origin", "device", "date"):
        if key not in frame:  # rows that carry their own (the quality study's runs their date) keep it
            frame[key] = frame["gpu"].map(info[key])
    return frame[TAGS + [c for c in frame.columns if c not in TAGS]]


def _references(references: Iterable) -> dict[str, pd.DataFrame]:
    """The shipped sets of labels measured here, read like any shipped set: the reference side of tab08."""
    from profiling.tables import load_summary

    files = gather((), references)
    labels = _labels(files, ())
    hardware = _hardware(files, labels, _provenances(files))
    tables = {"reference_runs": with_comparisons(_runs(files), _comparisons(files)),
              "reference_summaries": _per_file(files, "summary", load_summary)}
    return {"reference_hardware": hardware, **{name: _tag(frame, hardware, labels) for name, frame in tables.items()}}


def collect(measured: Iterable, shipped: Iterable = (), measured_labels: Iterable[str] = (),
            references: Iterable = ()) -> dict[str, pd.DataFrame]:
    """Every table of the bundle from the result files (see the module docstring). `references`: files of shipped
    sets whose labels are measured here too (read apart: tab08 checks the measured run against them)."""
    from profiling.tables import load_summary

    check_sets([*shipped, *references])  # every shipped or imported set: each file as its manifest.sha256 lists it
    files = gather(measured, shipped, measured_labels)
    labels = _labels(files, measured_labels)
    hardware = _hardware(files, labels, _provenances(files))

    def read_rules(path: Path) -> pd.DataFrame:
        print(f"{path}: ncu's rule results carry no total, so this table cannot be checked against one (the details "
              "page it was extracted from was checked against the raw page of the same report)")
        return load_csv(path)

    comparisons = _comparisons(files)
    tables = {
        "runs": with_comparisons(_runs(files), comparisons),
        "comparisons": comparisons,
        "quality": _quality(files),
        "losses": _per_file(files, "train_steps.csv", load_train_steps),
        "summaries": _per_file(files, "summary", load_summary),
        "rules": _per_file(files, "rules", read_rules),
        "slices": _slices(files),
        "study": _study(files),
        "study_losses": _study_losses(files),
        "samplers": _samplers(files),
        "study_samplers": _study_samplers(files),
    }
    # The bench from the runs just read and each label's measured ceilings, with the memory floors of the steps
    # Nsight Compute profiled (reporting.bench), once for every output.
    from .bench import bench_rows, memory_floor_rows, with_memory_floors

    rates = _rates(files)
    tables["kernels"], tables["ncu_kernels"] = _kernel_tables(files)
    tables["memory_floor"] = memory_floor_rows(tables["ncu_kernels"], rates)
    tables["bench"] = with_memory_floors(bench_rows(tables["runs"], rates, refuse_uncounted=False),
                                         tables["memory_floor"], tables["runs"])
    tagged = {name: _tag(frame, hardware, labels, by_phase=name == "ncu_kernels") for name, frame in tables.items()}
    return {"hardware": hardware, **tagged, **_references(references)}


def write_bundle(tables: dict[str, pd.DataFrame], paths: dict[str, str | Path]) -> None:
    for name, path in paths.items():
        tables[name].to_parquet(path, index=False)


# -- reading a bundle ---------------------------------------------------------------------------------------------
def rows_at(frame: pd.DataFrame, positions: np.ndarray) -> pd.DataFrame:
    """The rows at ascending `positions` (a groupby's `indices`): a slice, which copies nothing, where they are
    contiguous (a bundle collected by_phase holds each label and phase, and within it each variant, as one run of
    rows), else taken. Taking copies every column: the Nsight Compute kernels' ~600 of them."""
    if len(positions) and positions[-1] - positions[0] == len(positions) - 1:
        return frame.iloc[positions[0]:positions[-1] + 1]
    return frame.take(positions)


@dataclass
class Results:
    """The bundle's tables of one figure or table job; a table the job did not declare is empty."""

    hardware: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    _ncu_positions: dict | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, paths: dict[str, str | Path]) -> "Results":
        """`paths`: bundle table name -> Parquet file (the job's declared inputs); `hardware` is always there."""
        frames = {name: pd.read_parquet(path) for name, path in paths.items() if name in TABLES}
        return cls(frames.pop("hardware"), frames)

    @classmethod
    def from_tables(cls, tables: dict[str, pd.DataFrame]) -> "Results":
        """In memory, straight from `collect` (tests and interactive use)."""
        tables = dict(tables)
        return cls(tables.pop("hardware"), tables)

    def table(self, name: str) -> pd.DataFrame:
        if name not in self.tables:
            raise KeyError(f"bundle table {name!r} was not declared as an input of this output")
        return self.tables[name]

    # -- run identity ---------------------------------------------------------------------------------------------
    def labels(self) -> list[str]:
        return list(self.hardware["gpu"])

    def _info(self, gpu: str) -> pd.Series:
        return self.hardware.set_index("gpu").loc[gpu]

    def origin(self, gpu: str) -> str:
        return self._info(gpu)["origin"]

    def gpu_device(self, gpu: str) -> bool:
        """True when the label's runs executed on a real GPU."""
        return bool(self._info(gpu)["is_gpu"])

    def provenance(self, gpu: str) -> dict:
        return json.loads(self._info(gpu)["provenance"])

    def panel_label(self, gpu: str) -> str:
        info = self._info(gpu)
        return panel_label(gpu, info["device"], info["origin"], info["date"], info.get("workload", ""))

    def workload(self, gpu: str) -> str:
        """The label's workload ('' for a bundle collected before the workload was recorded: a migration shim, to
        remove once no results/ tree holds a bundle collected before 2026-12-01, which the next collection rewrites)."""
        return self._info(gpu).get("workload", "") or ""

    def workloads(self) -> list[str]:
        """The workloads of the labels drawn (one per invocation: the config's)."""
        return list(dict.fromkeys(self.hardware["workload"])) if "workload" in self.hardware else []

    def tools(self, gpu: str, phase: str | None = None) -> list[str]:
        """Profilers with a summary for `gpu` (and `phase`), richest first."""
        summaries = self.tables.get("summaries", pd.DataFrame(columns=["gpu", "phase", "tool"]))
        rows = summaries[summaries["gpu"] == gpu]
        if phase is not None:
            rows = rows[rows["phase"] == phase]
        present = set(rows["tool"])
        return [t for t in TOOL_PREFERENCE if t in present] + sorted(present - set(TOOL_PREFERENCE))

    def phases(self) -> list[str]:
        """Profiled phases present (train, sample first), or both when nothing was profiled."""
        present = set()
        for name in ("summaries", "kernels", "ncu_kernels", "rules"):
            if name in self.tables and "phase" in self.tables[name]:
                present |= set(self.tables[name]["phase"].dropna())
        return [p for p in ("train", "sample") if p in present or not present] + sorted(present - {"train", "sample"})

    def ncu_rows(self, gpu: str, phase: str) -> pd.DataFrame:
        """Nsight Compute's kernels of one label and phase, every metric column kept, in the bundle's order: a slice
        of the collected table (rows_at), its rows' positions found once per job. A boolean mask per call copied the
        table's ~600 metric columns each time (about a second of every ncu figure's rendering)."""
        kernels = self.table("ncu_kernels")
        if self._ncu_positions is None:
            self._ncu_positions = kernels.groupby(["gpu", "phase"], sort=False).indices if len(kernels) else {}
        return rows_at(kernels, self._ncu_positions.get((gpu, phase), np.array([], dtype=int)))

    def kernels(self, tools: Iterable[str] = TOOL_PREFERENCE) -> pd.DataFrame:
        """Kernels of `tools`: Nsight Compute's with every metric (`ncu_kernels`) when only ncu is asked for, else
        the shared columns of every tool (`kernels`)."""
        if list(tools) == ["ncu"]:
            return self.table("ncu_kernels")
        frame = self.table("kernels")
        return frame[frame["tool"].isin(set(tools))] if "tool" in frame else frame

    def slice_of(self, gpu: str, variant: str, seed: int, image: str = "sample") -> np.ndarray | None:
        """The middle slice of a study run's first sample (`image` "sample") or of the real image of its mask
        ("real"); None when not collected."""
        slices = self.table("slices")
        row = slices[(slices["gpu"] == gpu) & (slices["variant"] == variant) & (slices["seed"] == seed)
                     & (slices["image"] == image)]
        if row.empty:
            return None
        first = row.iloc[0]
        return np.asarray(first["values"], dtype=np.float32).reshape(int(first["height"]), int(first["width"]))


def preferred_tool(frame: pd.DataFrame, keys=("gpu", "variant", "phase")) -> pd.DataFrame:
    """Rows of the richest tool per run (ncu, else nsys, else torch)."""
    if frame.empty:
        return frame
    rank = {tool: k for k, tool in enumerate(TOOL_PREFERENCE)}
    best = frame.assign(_rank=frame["tool"].map(rank).fillna(len(rank)))
    best = best[best["_rank"] == best.groupby(list(keys))["_rank"].transform("min")]
    return best.drop(columns="_rank").reset_index(drop=True)
