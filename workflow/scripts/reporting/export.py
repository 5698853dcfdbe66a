"""A hardware label's results as a reference set, ``data/reference/<workload>/<label>/``, that another checkout imports by
listing the label in ``reference_results`` (the one reader, reporting.results, reads it like the shipped H200 set).

The set mirrors ``results/<workload>/<label>/``: per variant the small result files (``train.json``, ``sample.json``,
``quality.json``, the per-step CSVs), per profile the tidy tables the figures read (``<tool>_summary.csv``,
``<tool>_kernels.parquet``) and the raw exports they were extracted from (``ncu_raw.csv``, ``ncu_details.csv``,
``ncu_rules.csv``, ``torch_trace.json``, ``nsys_kern_sum.csv``, compressed as ``gzip -n`` does: no name, no time), the
bench (``bench.csv``, ``bench.md``, ``device_rates.json``), the quality study's runs (``study/<variant>/seed<k>/``:
``run.json``, ``comparison.json``, ``losses.csv``, ``slice.npy``, what fig09, tab05 and tab06 draw; medddpm.study),
the complete configuration the jobs used (``config.yaml``), a README written from the provenance, and
``manifest.sha256`` (every file with its sha256). Checkpoints, sampled volumes and the binary profiler reports stay
behind.

Equal results give byte-identical sets; the set replaces an older one of the label only once it is complete.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import yaml

from planning import layout
from measurement.throughput import run_columns as throughput_columns, single_size_sweep

from .derived import cudnn_version
from .results import variant_order
from planning.set_manifest import MANIFEST, manifest_text

# Written gzip-compressed (name + ".gz"); everything else from results/<workload>/<label>/ is copied as it is.
COMPRESSED = ("ncu_raw.csv", "ncu_details.csv", "ncu_rules.csv", "torch_trace.json", "nsys_kern_sum.csv")


def gzip_bytes(data: bytes) -> bytes:
    """`gzip -n -9`: no file name and no modification time in the header, so equal data give equal bytes."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as stream:
        stream.write(data)
    return out.getvalue()


def destination(relative: Path) -> Path:
    """Where a file of results/<workload>/<label>/ goes in the set."""
    if relative.name in COMPRESSED:
        return relative.with_name(relative.name + ".gz")
    return relative


def _content(source: Path, relative: Path) -> bytes:
    if relative.name in COMPRESSED:
        return gzip_bytes(source.read_bytes())
    return source.read_bytes()


def export_set(label: str, files: list[str | Path], results_root: str | Path, out: str | Path, config: dict,
               command: str) -> list[Path]:
    """Write the reference set of `label` from `files` (paths under results_root/<workload>/<label>/, the workload
    the config names) to `out`, replacing what was there once everything is written; returns the set's files
    (relative, sorted)."""
    source_root = Path(layout.label_dir(config["workload"], label, str(results_root)))
    out = Path(out)
    staging = out.parent / f".{out.name}.export"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        written: dict[Path, bytes] = {}
        for path in sorted(map(Path, files)):
            relative = path.relative_to(source_root)
            written[destination(relative)] = _content(path, relative)
        written[Path("config.yaml")] = config_yaml(config, label).encode()
        written[Path("README.md")] = readme(label, written, config, command).encode()
        written[Path(MANIFEST)] = manifest_text(written).encode()
        for relative, data in written.items():
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            (staging / relative).write_bytes(data)
        retired = out.parent / f".{out.name}.retired"
        shutil.rmtree(retired, ignore_errors=True)
        if out.exists():
            out.rename(retired)
        staging.rename(out)
        shutil.rmtree(retired, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return sorted(written)


def config_yaml(config: dict, label: str) -> str:
    """The configuration of the jobs that measured the set, set up to measure `label` again and check it against the
    set: `gpus` is the label alone and `reference_results` lists it (neither changes what a job computes)."""
    again = json.loads(json.dumps(config))
    again["gpus"] = [label]
    again["reference_results"] = [*[r for r in config.get("reference_results", []) if r != label], label]
    head = ("# The complete configuration of the workflow that measured this set (every key; see README.md), with\n"
            f"# gpus: [{label}] and {label} in reference_results, so that it measures {label} again and checks\n"
            "# the run against this set (tab08): snakemake --cores 1 --configfile <this file> -- paper/figures/all\n")
    return head + yaml.safe_dump(again, sort_keys=False, width=120)


# -- the README -----------------------------------------------------------------------------------------------------
def _places(written: dict[Path, bytes], workload: str, label: str) -> dict[Path, layout.Place]:
    """Where each file of the set lies in the layout (the set mirrors results/<workload>/<label>/)."""
    folder = Path(layout.reference_dir(workload, label))
    return {path: layout.parse(folder / path) for path in written}


def _records(written: dict[Path, bytes], places: dict[Path, layout.Place]) -> dict[str, dict[str, dict]]:
    """variant -> {train, sample, quality} JSON of the set."""
    records: dict[str, dict[str, dict]] = {}
    for path, data in written.items():
        if places[path].kind in ("train.json", "sample.json", "quality.json"):
            records.setdefault(places[path].variant, {})[path.stem] = json.loads(data)
    return records


def _values(provenances: list[dict], key: str, shown=str) -> str:
    values = list(dict.fromkeys(shown(p.get(key)) for p in provenances if p.get(key) is not None))
    return " / ".join(values) if values else "not recorded"


def _clocks(provenances: list[dict]) -> str:
    names = (("sm_max_mhz", "maximum SM {:g} MHz"), ("sm_application_mhz", "application SM {:g} MHz"),
             ("power_limit_w", "power limit {:g} W"))
    shown = []
    for provenance in provenances:
        clocks = provenance.get("clocks") or {}
        text = ", ".join(fmt.format(clocks[key]) for key, fmt in names if isinstance(clocks.get(key), (int, float)))
        shown.append(text or "not recorded")
    return " / ".join(dict.fromkeys(shown)) if shown else "not recorded"


def _number(value, fmt: str = "{:.1f}") -> str:
    return fmt.format(value) if isinstance(value, (int, float)) else "-"


def readme(label: str, written: dict[Path, bytes], config: dict, command: str) -> str:
    """The set's README: device, software, dates and the command, from the provenance of its result files."""
    workload = config["workload"]
    places = _places(written, workload, label)
    records = _records(written, places)
    variants = variant_order(records)
    provenances = [record["provenance"] for variant in variants for record in records[variant].values()
                   if "provenance" in record]
    dates = sorted(p["measured_at"] for p in provenances if p.get("measured_at"))
    first = provenances[0] if provenances else {}
    device = _values(provenances, "device_name")
    memory = _values(provenances, "memory_bytes", lambda v: f"{v / 2**30:.1f} GiB")
    sms = _values(provenances, "multiprocessors")
    when = f"{dates[0][:10]}" if dates and dates[0][:10] == dates[-1][:10] else \
        (f"{dates[0][:10]} to {dates[-1][:10]}" if dates else "date not recorded")
    lines = [
        f"# Reference set `{label}` of the {workload} workload: {device} (measured {when})",
        "",
        f"Measured by this workflow's own rules and exported with its `export` target. To draw it next to your own "
        f"runs of the {workload} workload, list `{label}` in `reference_results`; if you measure `{label}` yourself "
        f"too, your runs are checked against this set in `tab08_conformance`. The files mirror "
        f"`{layout.label_dir(workload, label)}/` (provenance inside each JSON); `manifest.sha256` lists every file "
        "with its sha256.",
        "",
        "## Device and software",
        "",
        "| | |",
        "|---|---|",
        f"| device | {device}" + (f" ({sms} SMs, {memory})" if first.get("device_type") == "cuda" else "") + " |",
    ]
    if any(p.get("emulated_on_cpu") for p in provenances):
        lines.append("| emulated | a GPU label measured on the CPU (test mode: `emulate_gpus_on_cpu`) |")
    if first.get("device_type") == "cuda":
        lines += [f"| clocks | {_clocks(provenances)} |",
                  f"| driver | {_values(provenances, 'driver')} |",
                  f"| CUDA | {_values(provenances, 'cuda')} |",
                  f"| cuDNN | {_values(provenances, 'cudnn', cudnn_version)} |"]
    lines += [
        f"| torch | {_values(provenances, 'torch')} |",
        f"| Python | {_values(provenances, 'python')} |",
        f"| host CPU | {_values(provenances, 'host_cpu')} (torch threads: {_values(provenances, 'cpu_threads')}) |",
        f"| measured | {dates[0] if dates else 'not recorded'} to {dates[-1] if dates else 'not recorded'} |",
        f"| workflow commit | {_values(provenances, 'workflow_commit')} |",
        "",
        "## Command",
        "",
        "Exported with the command below, which measures whatever is missing first (on a fresh checkout it measures "
        "the whole set):",
        "",
        "```bash",
        command,
        "```",
        "",
        f"`config.yaml` beside this file is the complete configuration those jobs used, measuring `{label}` alone "
        f"and listing this set in `reference_results`. On another machine of this label, this measures the same and "
        "checks it against this set (tab08):",
        "",
        "```bash",
        f"snakemake --cores 1 --configfile {layout.reference_dir(workload, label)}/config.yaml -- paper/figures/all",
        "```",
        "",
    ]
    lines += _workload(records, variants, config) + _measurements(records, variants) + _files(places)
    return "\n".join(lines) + "\n"


def _workload(records, variants, config) -> list[str]:
    train = records[variants[0]].get("train", {}) if variants else {}
    shape = "x".join(str(side) for side in train.get("volume_shape", config["dataset"]["shape"]))
    settings = train.get("settings", {})
    parameters = train.get("parameters")
    return [
        "## Workload",
        "",
        f"Volumes {shape}, batch 1, {parameters:,} parameters, T = {config['diffusion']['timesteps']} diffusion steps; "
        f"training: {settings.get('warmup_steps', '?')} warm-up and {settings.get('measured_steps', '?')} timed "
        f"optimizer steps of {settings.get('gradient_accumulation', '?')} micro-batches; sampling: "
        f"{config['sample']['masks']} held-out mask(s), "
        + ("every step of the chain" if config["sample"]["max_steps"] is None
           else f"the first {config['sample']['max_steps']} steps of each chain") + ".",
        "",
    ] if parameters else []


def _measurements(records, variants) -> list[str]:
    lines = ["## Measurements (medians)", "",
             "| variant | training per sample (ms) | optimizer step IQR (ms) | sampling step (ms) | volume (s) | "
             "volumes per hour, batch 1 / best batch | peak memory, training (GiB) |",
             "|---|---|---|---|---|---|---|"]
    for variant in variants:
        train, sample = records[variant].get("train", {}), records[variant].get("sample", {})
        step = train.get("step_time", {})
        iqr = f"{_number(step.get('q1_ms'))}-{_number(step.get('q3_ms'))}" if step else "-"
        memory = train.get("peak_memory_bytes")
        rates = throughput_columns(sample)
        best = rates["sample_volumes_per_hour_best"]
        one = rates["sample_volumes_per_hour_b1"]
        rate = ("-" if not sample else f"{one:.0f} / batch 1 only" if single_size_sweep(one, best)
                else "not measured" if best is None else
                f"{_number(one, '{:.0f}')} / {best:.0f} (batch {rates['sample_best_batch']})")
        lines.append(f"| {variant} | {_number(train.get('train_ms_per_sample'))} | {iqr} | "
                     f"{_number(sample.get('step_time', {}).get('median_ms'))} | "
                     f"{_number(sample.get('volume_seconds_estimate'))} | {rate} | "
                     f"{_number(memory / 2**30 if memory else None, '{:.2f}')} |")
    return lines + [""]


def _files(places: dict[Path, layout.Place]) -> list[str]:
    profile_files = {path: place for path, place in places.items() if place.phase is not None}
    phases = sorted({place.phase for place in profile_files.values()})
    tools = sorted({place.tool for place in profile_files.values() if place.kind == "summary"})
    raw = sorted({f"`{path.name}`" for path in profile_files if path.name.endswith(".gz")})
    return [
        "## Files",
        "",
        "- `<variant>/train.json`, `sample.json`, `quality.json`, `train_steps.csv`, `sample_steps.csv`: the runs;",
        "- `study/<variant>/seed<k>/` (the quality study, where this label ran it): `run.json`, `comparison.json`, "
        "`losses.csv` and `slice.npy` of every run (what fig09, tab05 and tab06 draw);",
        f"- `<variant>/profile/<phase>/` (phases: {', '.join(phases) or 'none'}; profilers: {', '.join(tools) or 'none'}): "
        "`<tool>_summary.csv` and `<tool>_kernels.parquet` (the tidy tables the figures read) and the raw exports "
        f"they were extracted from, compressed with `gzip -n` ({', '.join(raw) or 'none'});",
        "- `bench.csv`, `bench.md`, `device_rates.json`: the bench and the device's measured ceilings;",
        "- `config.yaml`: the configuration; `manifest.sha256`: every file with its sha256.",
    ]
