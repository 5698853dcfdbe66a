"""The study's article, ``paper/article.pdf``: a short paper typeset from the workflow's outputs. Title and abstract
from the numbers; an introduction (the study, Med-DDPM, the question); the method (hardware and software from the
runs' provenance, the workload, the variants, how time and kernels were measured, what cannot be measured here, every
difference from upstream Med-DDPM); the results, each registered figure and table with a paragraph written from its
numbers; the paper's claims one by one with their verdict and its evidence; limitations; numbered references
(``workflow/report/references.yaml``, cited in the text as ``[@key]``).

Typesetting is Typst's, from the `typst` wheel on PyPI (no TeX installation; the compiler and its fonts inside the
wheel); the layout lives in ``workflow/report/article.typ``, which this module feeds with blocks (headings,
paragraphs, figures, tables) as JSON. Only fonts that ship inside Typst are used and the document carries no date, so
equal outputs give a byte-identical PDF on any machine.

Inputs: the registered tables' CSVs and figures' PDFs under `root`, and the collected result tables (`collected`:
name -> parquet path; `runs` gives each run's step-time quartiles, from which a speed-up is called faster, slower or
within noise by one function, `reporting.derived.speedup_verdict`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import yaml
from medddpm.workloads import source_of

from . import derived
from .registry import BY_ID, OUTPUTS, Output

TEXT_WIDTH_CM = 17.0  # A4 less 2 cm margins
PORTRAIT_PT = TEXT_WIDTH_CM / 2.54 * 72
LANDSCAPE_PT = (29.7 - 4) / 2.54 * 72
FIGURE_HEIGHT_CM = 19.0  # the tallest figure that leaves room for its caption and some text on a page
REFERENCES = "workflow/report/references.yaml"
PAPER_VARIANTS = ("tf32", "channels_last", "tf32_channels_last")
# Section titles, in the order they appear (the tests check the order).
SECTION_TITLES = ("Introduction", "Method", "Results", "The paper's claims, one by one", "Limitations",
                  "Reproducing this article", "References")
# The results' subsections and the registered outputs each presents: cost first, then where the time goes, then the
# counters, then quality. An output of the results section missing here gets a subsection of its own.
RESULTS_GROUPS = (
    ("End-to-end time and memory", ("fig08_end_to_end", "tab04_optimization")),
    ("Where the time goes", ("fig01_runtime_breakdown", "fig02_top_kernels", "tab03_kernels")),
    ("What the optimizations change in the counters",
     ("fig07_optimization_impact", "fig03_instruction_mix", "fig04_memory_system", "fig05_warp_states",
      "fig06_priority_scores", "fig10_roofline")),
    ("Quality of the samples", ("fig09_quality", "tab06_quality")),
)
# Columns of each table as the article shows it (the CSV keeps them all): (column, header). A column missing from the
# CSV is skipped; a table not listed shows every column except the row tags.
ARTICLE_COLUMNS = {
    "tab01_hardware": [("label", "label"), ("device", "device"), ("origin", "origin"), ("date", "measured"),
                       ("sms", "SMs"), ("memory_gib", "memory GiB"), ("driver", "driver"), ("cuda", "CUDA"),
                       ("cudnn", "cuDNN"), ("torch", "torch")],
    "tab03_kernels": [("gpu", "label"), ("variant", "variant"), ("phase", "phase"), ("tool", "tool"),
                      ("kernels", "kernels"), ("kernel_time_ms", "kernel ms"), ("conv_share", "conv %"),
                      ("layout_conversion_share", "layout %"), ("sm_cycles", "SM cycles"),
                      ("warp_instructions", "warp instr."), ("ipc", "IPC"), ("tensor_pipe_pct", "tensor %")],
    "tab04_optimization": [("gpu", "label"), ("variant", "variant"), ("train_ms_per_sample", "train ms/sample"),
                           ("train_speedup_vs_baseline", "speed-up"), ("sample_step_median_ms", "sample step ms"),
                           ("train_peak_memory_gib", "peak GiB"), ("sm_cycles_rel", "SM cycles rel."),
                           ("warp_instructions_rel", "instr. rel."), ("ipc_rel", "IPC rel."),
                           ("tensor_pipe_pct", "tensor %")],
    "tab05_claims": [("claim", "claim"), ("published", "published (A100)"), ("gpu", "label"),
                     ("measured", "measured"), ("verdict", "verdict"), ("rule", "rule")],
    "tab06_quality": [("gpu", "label"), ("variant", "variant"), ("seeds", "seeds"),
                      ("wasserstein_vs_real_mean", "W1 real"), ("wasserstein_vs_real_sd", "W1 SD"),
                      ("ssim_vs_real_mean", "SSIM real"), ("mean_difference", "diff. vs base"),
                      ("interval_low", "90 % low"), ("interval_high", "90 % high"), ("margin", "margin"),
                      ("outcome", "outcome"), ("forward_rel_error_max", "fwd rel. err")],
    "tab07_frontier": [("gpu", "label"), ("variant", "variant"), ("train_ms_per_sample", "train ms/sample"),
                       ("train_model_tflops", "TFLOP/s"), ("train_fraction_of_bf16_rate", "of bf16 rate"),
                       ("sample_step_ms", "sample step ms"), ("sample_volume_s", "s/volume"),
                       ("sample_volumes_per_hour_b1", "vol/h batch 1"), ("sample_volumes_per_hour_best", "vol/h best"),
                       ("sample_best_batch", "best batch"), ("train_peak_gib", "peak GiB"),
                       ("train_compile_s", "compile s"), ("train_speedup_vs_baseline", "speed-up")],
    "tab08_conformance": [("gpu", "label"), ("variant", "variant"), ("metric", "metric"), ("unit", "unit"),
                          ("reference", "reference"), ("measured", "measured"), ("deviation", "deviation"),
                          ("band", "band"), ("verdict", "verdict"), ("reasons", "likely reasons")],
}
# Columns the article shows as percentages (fractions in the CSV).
PERCENT_COLUMNS = {"conv_share", "layout_conversion_share", "train_fraction_of_bf16_rate"}
TAGS = ("origin", "device", "date")
CLASS_WORDS = {"conv_fprop": "convolution forward", "conv_dgrad": "convolution data-gradient",
               "conv_wgrad": "convolution weight-gradient", "gemm": "GEMM", "layout_conversion": "layout conversion",
               "dtype_cast": "dtype cast", "normalization": "normalization", "elementwise": "element-wise",
               "optimizer": "optimizer", "reduction": "reduction", "other": "other"}


# -- text pieces ----------------------------------------------------------------------------------------------------
def pieces(text: str) -> list[dict]:
    """A paragraph as {text}, {code} and {strong} pieces: ``literal`` and `code` become code, **strong** bold."""
    out = []
    # re.split interleaves the text with the three groups: k % 4 == 0 is text, 1 and 2 code, 3 strong.
    for k, part in enumerate(re.split(r"``(.+?)``|`([^`]+)`|\*\*(.+?)\*\*", text)):
        if part:
            out.append({"text": part} if k % 4 == 0 else {"strong": part} if k % 4 == 3 else {"code": part})
    return out


def paragraphs(text: str) -> list[list[dict]]:
    """Blank-line separated paragraphs (lines joined), as pieces."""
    return [pieces(" ".join(block.split())) for block in re.split(r"\n\s*\n", text.strip()) if block.strip()]


def caption(output: Output, root: Path) -> list[dict]:
    return [piece for para in paragraphs((root / output.caption).read_text()) for piece in para + [{"text": " "}]][:-1]


# -- references -----------------------------------------------------------------------------------------------------
_CITATION = re.compile(r"\[(@[\w-]+(?:,\s*@[\w-]+)*)\]")


def load_references(path: str | Path) -> list[dict]:
    entries = yaml.safe_load(Path(path).read_text())
    keys = [entry["key"] for entry in entries]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{path}: a reference key is listed twice")
    return [{"key": entry["key"], "text": " ".join(str(entry["text"]).split())} for entry in entries]


def cited_keys(text: str) -> list[str]:
    return [key.strip().lstrip("@") for group in _CITATION.findall(text) for key in group.split(",")]


def resolve_citations(text: str, numbers: dict[str, int]) -> str:
    """[@a] -> [1], [@a, @b] -> [1, 2]; an unknown key is an error naming it."""
    def number(match: re.Match) -> str:
        keys = [key.strip().lstrip("@") for key in match.group(1).split(",")]
        unknown = [key for key in keys if key not in numbers]
        if unknown:
            raise ValueError(f"citation of {unknown} not in {REFERENCES}")
        return "[" + ", ".join(str(numbers[key]) for key in keys) + "]"
    return _CITATION.sub(number, text)


# -- numbers as words -----------------------------------------------------------------------------------------------
def _join(words: list[str]) -> str:
    words = [w for w in words if w]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1] if words else "none"


def _num(value: float, digits: int = 3) -> str:
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


def _pct(share: float, digits: int = 1) -> str:
    return f"{100 * float(share):.{digits}f} %"


def _times(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio < 10 else f"{ratio:.1f}x"


def _class(name: str) -> str:
    return CLASS_WORDS.get(name, str(name).replace("_", " "))


def _present(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value)) and value == value


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
        if _present(row.get("volume_shape")):
            parts.append(f"{row['volume_shape']} volumes")
        if _present(row.get("parameters")):
            parts.append(f"{int(row['parameters']):,} parameters")
        if _present(row.get("sample_timesteps")):
            parts.append(f"T = {int(row['sample_timesteps'])}")
        return ", ".join(parts)


def verdicts(inputs: Inputs, verdict: Callable, phase: str = "train") -> pd.DataFrame:
    runs = inputs.result("runs")
    if runs.empty:
        return pd.DataFrame(columns=["gpu", "variant", "speedup", "low", "high", "within_noise", "verdict"])
    return verdict(runs, phase)


def speedup_words(row) -> str:
    """A speed-up over baseline as a reader should take it: a direction only where the quartiles are apart."""
    ratio, said = float(row["speedup"]), row["verdict"]
    if said == "faster":
        return f"{_times(ratio)} faster"
    if said == "slower":
        return f"{_times(1 / ratio)} slower"
    if said == "within noise":
        return f"{_times(ratio)}, within noise (its quartiles overlap the baseline's)"
    if said == "no spread measured":
        return f"{_times(ratio)} (no spread measured, so no direction is claimed)"
    return "not measured"


# -- title and abstract ---------------------------------------------------------------------------------------------
def headline(inputs: Inputs, verdict: Callable) -> str | None:
    """The title's finding: the largest measured, real (quartiles apart) TF32 speed-up of a GPU label."""
    table = verdicts(inputs, verdict)
    rows = table[(table["variant"] == "tf32") & (table["verdict"] == "faster")] if len(table) else table
    rows = rows[[inputs.is_gpu(gpu) for gpu in rows["gpu"]]] if len(rows) else rows
    if rows.empty:
        return None
    row = rows.loc[rows["speedup"].astype(float).idxmax()]
    return f"TF32 trains {_times(float(row['speedup']))} faster than FP32 on the {inputs.device(row['gpu'])}"


def title(inputs: Inputs, verdict: Callable) -> str:
    found = headline(inputs, verdict)
    return ("Where Med-DDPM's GPU time goes, rebuilt" + (f": {found}" if found else ""))


def _label_speedups(inputs: Inputs, table: pd.DataFrame, gpu: str) -> str:
    rows = table[table["gpu"] == gpu]
    runs = inputs.result("runs")
    base = runs[(runs["gpu"] == gpu) & (runs["variant"] == "baseline")]
    if rows.empty or base.empty:
        return ""
    said = [f"the fp32 baseline trains in {_num(base['train_ms_per_sample'].iloc[0], 4)} ms per sample"]
    paper = rows[rows["variant"].isin(PAPER_VARIANTS)]
    for row in paper.itertuples():
        said.append(f"{row.variant} {speedup_words(row._asdict())}")
    faster = rows[rows["verdict"] == "faster"]
    if len(faster):
        best = faster.loc[faster["speedup"].astype(float).idxmax()]
        if best["variant"] not in PAPER_VARIANTS:
            said.append(f"the fastest variant measured, {best['variant']}, {speedup_words(best)}")
    else:
        said.append("no variant is measurably faster than the baseline")
    return f"on {gpu} ({inputs.device(gpu)}, {inputs.workload(gpu)}), " + "; ".join(said)


def _counts(frame: pd.DataFrame) -> str:
    counts = frame["verdict"].value_counts()
    return ", ".join(f"{n} {verdict}" for verdict, n in counts.items())


def abstract(inputs: Inputs, settings: dict, verdict: Callable) -> str:
    hardware = inputs.labels()
    claims, conformance = inputs.table("tab05_claims"), inputs.table("tab08_conformance")
    table = verdicts(inputs, verdict)
    labels = [f"{row.label} ({row.device}, {row.origin})" for row in hardware.itertuples()]
    text = [
        "We rebuild the performance study of arXiv 2606.19365 [@study], which profiles the training and sampling of "
        "Med-DDPM [@medddpm], a mask-conditioned 3D diffusion model of brain MRI, on NVIDIA GPUs with Nsight Compute "
        "and Nsight Systems and evaluates TF32 Tensor Cores and a 3D channels-last layout. Every number below is "
        "produced by a workflow from measurements: median step times with their quartiles, kernel classes from "
        f"torch.profiler and Nsight Compute, and the quality of the samples. It covers {_join(labels)}."
    ]
    said = [_label_speedups(inputs, table, gpu) for gpu in hardware["label"]]
    said = [s for s in said if s]
    if said:
        text.append("Measured " + "; ".join(said) + ".")
    cpu = [gpu for gpu in hardware["label"] if not inputs.is_gpu(gpu)]
    if cpu:
        text.append(f"The {_join(cpu)} label{'s' if len(cpu) > 1 else ''} run{'' if len(cpu) > 1 else 's'} a "
                    "miniature of the workload on a CPU, to exercise the workflow: its times are not GPU findings.")
    if len(claims):
        per_label = [f"on {gpu}, {_counts(rows)}" for gpu, rows in claims.groupby("gpu", sort=False)]
        text.append(f"Of the {claims['claim'].nunique()} claims of the paper's abstract: "
                    + "; ".join(per_label) + ".")
    compared = conformance[conformance["variant"].notna()] if len(conformance) and "variant" in conformance \
        else pd.DataFrame()
    if len(compared):
        text.append("Against the shipped reference of the same label, metric by metric: "
                    + "; ".join(f"{gpu}: {_counts(rows)}" for gpu, rows in compared.groupby("gpu", sort=False))
                    + ".")
    return " ".join(text)


# -- introduction and method ----------------------------------------------------------------------------------------
def introduction(inputs: Inputs, settings: dict) -> list[str]:
    measured = [gpu for gpu in inputs.labels()["label"]]
    return [
        "Training a 3D diffusion model is expensive: Med-DDPM [@medddpm] synthesises 128^3 whole-head brain MRI "
        "volumes from a segmentation mask, and its maintainers report about three days on one GPU for 100,000 "
        "optimizer steps; sampling one volume takes 250 evaluations of a 40-million-parameter 3D U-Net. The study "
        "of arXiv 2606.19365 (2026) [@study] asks where that time goes. It profiles Med-DDPM's training and "
        "sampling on three generations of NVIDIA GPUs with Nsight Compute [@ncu] and Nsight Systems [@nsys], finds "
        "training dominated by cuDNN convolution (implicit-GEMM) kernels, with inefficiencies from memory access, "
        "tensor-layout conversions and little use of the Tensor Cores, and evaluates two optimizations: TF32 "
        "Tensor Cores and a 3D channels-last memory layout. On an A100 it reports SM cycles and dynamic "
        "instructions cut by up to 100x, Tensor Core utilisation raised from 1.45 % to 9.98 %, IPC up by 7 %, "
        "and unchanged synthesis quality.",
        "Med-DDPM is a denoising diffusion probabilistic model [@ddpm] conditioned on a semantic mask: the one-hot "
        "mask (brain or head, tumour) is concatenated to the noisy image on the channel axis, and a guided-diffusion "
        "style 3D U-Net (base width 64, channel multipliers 1, 1, 2, 3, 4, self-attention at 16^3 and 8^3) predicts "
        "the noise under a cosine schedule of T = 250 steps with an L1 loss. Its second configuration, for BraTS "
        "2021, synthesises four MRI modalities at 192 x 192 x 144 from a four-label tumour mask.",
        "Only the study's abstract is public, so its figures cannot be compared point by point. This reproduction "
        "asks whether its findings hold when the workload is re-implemented from Med-DDPM's code and measured "
        "again, on other hardware and software: where the time of a training step and of a sampling step goes, "
        "kernel class by kernel class; what TF32 and channels-last change in time, in the Nsight Compute counters "
        "and in the samples; and how far beyond the paper's two switches one GPU can take the same model. The "
        "workflow that produced this article, in Snakemake [@snakemake], measures every label it is given and "
        f"draws shipped reference sets beside them; this article shows {_join(measured)}.",
    ]


def hardware_text(inputs: Inputs) -> str:
    parts = []
    for row in inputs.labels().itertuples():
        bits = [row.device]
        if _present(getattr(row, "sms", None)):
            bits.append(f"{int(row.sms)} SMs")
        if _present(getattr(row, "memory_gib", None)):
            bits.append(f"{float(row.memory_gib):.0f} GiB")
        soft = [f"driver {row.driver}" if _present(getattr(row, "driver", None)) else "",
                f"CUDA {row.cuda}" if _present(getattr(row, "cuda", None)) else "",
                f"cuDNN {row.cudnn}" if _present(getattr(row, "cudnn", None)) else "",
                f"PyTorch {row.torch}" if _present(getattr(row, "torch", None)) else ""]
        parts.append(f"{row.label}: {', '.join(bits)}; {', '.join(s for s in soft if s)} "
                     f"({row.origin}, {row.date})")
    return ("Each result file carries its provenance (device, driver, CUDA, cuDNN, PyTorch [@pytorch], clocks "
            "where recorded, the digest of the configuration the job ran with); tab01 lists it per hardware label: "
            + "; ".join(parts) + ". A label names one kind of device; a run labelled with a GPU type is checked "
            "against the device it found, and a mismatch is an error.")


def workload_text(inputs: Inputs, settings: dict) -> str:
    work = dict(inputs.table("tab02_workload").itertuples(index=False)) if len(inputs.table("tab02_workload")) else {}
    data, model = settings["dataset"], settings["model"]
    source = source_of(data["source"]).words.format(root=data["root"])
    return (f"The workload configured for the runs measured here is the {settings.get('workload', 'wholehead')} "
            f"network of Med-DDPM at base width {model['base_width']} (tab02): "
            f"{work.get('volume (D x W x H), batch', '?')}, {work.get('parameters', '?')} parameters, "
            f"{work.get('FLOPs per U-Net forward (sampling step)', '?')} per U-Net forward, "
            f"T = {settings['diffusion']['timesteps']} diffusion steps, Adam at learning rate "
            f"{settings['train']['lr']:g} with {settings['train']['gradient_accumulation']} micro-batches of one "
            "volume per optimizer step and an EMA copy of the weights, as upstream. The paper's network has "
            "40,226,433 parameters, works on 128^3 volumes with T = 250 and costs about 5.5 TFLOP per forward; "
            f"each table and figure names the workload of its rows. The data are {source}; "
            f"{data['cases']} cases, {data['heldout']} held out for sampling and for the quality study.")


def variants_text(settings: dict) -> str:
    parts = []
    for name in settings["run_variants"]:
        switches = settings["variants"].get(name, {})
        on = [f"{key}={value}" if value is not True else key for key, value in switches.items()
              if value not in (False, None)]
        parts.append(f"{name} ({', '.join(on) or 'every switch off'})")
    return ("The optimization matrix is data in the configuration: a variant is a name and its switches, and a "
            "switch left out keeps upstream's behaviour. The paper's four are baseline (TF32 explicitly off for "
            "cuDNN and matrix products, since PyTorch turns cuDNN TF32 on by default), tf32, channels_last (model "
            "and inputs in PyTorch's channels_last_3d memory format) and tf32_channels_last; torch_defaults is what "
            "upstream users ran; further variants (bf16 autocast, a layout-preserving GroupNorm + SiLU, "
            "torch.compile, CUDA graphs, fused Adam, activation checkpointing) go beyond the paper. Run here: "
            f"{_join(parts)}. Where a switch has no meaning on a device (TF32 on a CPU), the run's provenance "
            "records it as without effect and the comparisons that depend on it say so.")


def timing_text(settings: dict) -> str:
    train, sample = settings["train"], settings["sample"]
    chain = ("every step of each chain" if sample.get("max_steps") is None
             else f"the first {sample['max_steps']} steps of each chain, the volume time being the median step x T")
    return ("Time is measured on the device's own clock: CUDA events around each optimizer step on a GPU, a "
            "clock read after synchronising on a CPU. Warm-up steps run before and outside the timed region (the "
            "allocator, cuDNN's algorithm choice and any compilation settle there): here "
            f"{train['warmup_steps']} warm-up and {train['measured_steps']} measured optimizer steps of "
            f"{train['gradient_accumulation']} micro-batches each, and for sampling {chain} after "
            f"{sample.get('warmup_steps', 1)} warm-up step(s). A run is reported as the median step and its "
            "quartiles; a speed-up over the baseline is called faster or slower only where the two runs' "
            "interquartile ranges do not overlap, and within noise otherwise. Peak memory is the CUDA allocator's "
            "maximum on a GPU and the resident set on a CPU.")


def kernels_text(settings: dict, inputs: Inputs) -> str:
    ncu = settings["profiling"]["ncu"]
    kernels = inputs.table("tab03_kernels")
    tools = {gpu: sorted(set(rows["tool"])) for gpu, rows in kernels.groupby("gpu", sort=False)} if len(kernels) \
        else {}
    profiled = "; ".join(f"{gpu}: {', '.join(t)}" for gpu, t in tools.items()) or "no profile"
    return ("One optimizer step and one sampling step of each variant are profiled after warm-up, in a process of "
            "their own so that profiling never perturbs a timed run. torch.profiler records every kernel and its "
            "duration on any device. Nsight Compute [@ncu] replays each kernel to read its hardware counters (SM "
            "cycles, warp and thread instructions, IPC, Tensor-pipe utilisation, DRAM bytes, cache hit rates, warp "
            "stall reasons and the rules' estimated speedups); it runs with `--clock-control none` so that kernels "
            "run at the clocks the timed runs saw rather than at base clock, over a process-wide NVTX range so "
            "that autograd's backward kernels are kept, with the one-pass metric set "
            f"`{ncu.get('by_phase', {}).get('train', {}).get('metrics', ncu['metrics'])}` for training steps "
            "(a replay of several passes would save and restore the whole model state per kernel) and the full "
            f"set `{ncu['metrics']}` for sampling steps. Nsight Systems [@nsys] adds the timeline where a full "
            "installation is present. Kernels are classed by name (convolution forward, data gradient and weight "
            "gradient; GEMM; layout conversion; dtype cast; normalization; element-wise; optimizer; reduction; "
            f"other). Profiles behind the tables: {profiled}.")


def unmeasurable_text(inputs: Inputs) -> str:
    cpu = [gpu for gpu in inputs.labels()["label"] if not inputs.is_gpu(gpu)]
    text = ("Nsight Compute and Nsight Systems need an NVIDIA GPU: SM cycles, instruction counts, IPC and "
            "Tensor-pipe utilisation exist only for GPU labels with an Nsight Compute profile, and TF32 has no "
            "meaning on a CPU, so the tf32 variants there would time the baseline twice.")
    if cpu:
        text += (f" On {_join(cpu)} the workflow therefore times, profiles (torch.profiler) and checks the "
                 "quality of a miniature workload only; the claims about counters read 'not measurable here' for "
                 "it, and its CPU operator classes are not GPU kernel classes.")
    return text


def upstream_text() -> str:
    return ("The workload is written from Med-DDPM's public code, keeping every quirk that changes which kernels "
            "run (GroupNorm computed in float32, attention recomputed in backward, 1x1 Conv1d projections with "
            "einsum attention, the additive time embedding, trilinear upsampling followed by a convolution); its "
            "training and sampling steps measured within 3 % of the upstream code's on an H200 (the shipped "
            "reference set's notes). It differs where a performance study needs it to, and each difference is "
            "kept out of, or made equal in, the timed region. (1) Training starts from a seeded random "
            "initialisation, the same for every variant, where upstream's train.py fine-tunes its released "
            "model_128.pt: a step costs the same from any weights, and no checkpoint has to be downloaded. (2) "
            "The recomputation of attention in backward uses PyTorch's non-reentrant checkpoint, which recomputes "
            "under the forward's autocast state; upstream's own checkpoint function recomputes outside autocast "
            "and fails under bf16, so the bf16 variants could not run with it. (3) Each micro-batch reads the loss "
            "once (`loss.item()`, one host synchronisation) where upstream reads it twice; the value is checked "
            "to be finite. (4) The next batch is assembled and copied to pinned host memory before the timed "
            "step, as upstream's DataLoader workers with pin_memory have it ready; the timed step holds the "
            "asynchronous copy to the GPU and no file reading. (5) The sinusoidal time embedding's frequencies "
            "are built on the device of the timesteps instead of on the host and copied, which removes a small "
            "host-to-device copy from every U-Net evaluation.")


# -- results: a paragraph per output --------------------------------------------------------------------------------
def _train_rows(inputs: Inputs, phase: str = "train") -> pd.DataFrame:
    """tab03's class rows of `phase`, one tool per (gpu, variant): Nsight Compute where present."""
    classes = inputs.table("tab03_kernels_by_class")
    if classes.empty:
        return classes
    rows = classes[classes["phase"] == phase]
    rank = rows["tool"].map({"ncu": 0, "torch": 1, "nsys": 2}).fillna(3)
    best = rows.assign(_rank=rank).groupby(["gpu", "variant"])["_rank"].transform("min")
    return rows[rank == best]


def _top_classes(run: pd.DataFrame, n: int = 2) -> str:
    run = run[run["kernel_class"] != "all"].sort_values("time_share", ascending=False).head(n)
    return _join([f"{_class(row.kernel_class)} {_pct(row.time_share)}" for row in run.itertuples()])


def text_fig08(inputs: Inputs, verdict: Callable) -> str:
    table, runs = verdicts(inputs, verdict), inputs.result("runs")
    if runs.empty:
        return "No run was timed."
    said = []
    for gpu, rows in runs.groupby("gpu", sort=False):
        base = rows[rows["variant"] == "baseline"]
        if base.empty:
            continue
        base = base.iloc[0]
        mine = table[table["gpu"] == gpu]
        faster = mine[mine["verdict"] == "faster"]
        best = faster.loc[faster["speedup"].astype(float).idxmax()] if len(faster) else None
        text = (f"On {inputs.named(gpu)}, {inputs.workload(gpu)}, the baseline takes "
                f"{_num(base['train_ms_per_sample'], 4)} ms per training sample, "
                f"{_num(base['sample_step_median_ms'], 4)} ms per sampling step and "
                f"{_num(base['train_peak_memory_gib'])} GiB at its peak")
        if best is not None:
            run = rows[rows["variant"] == best["variant"]].iloc[0]
            text += (f"; the fastest variant measured, {best['variant']}, trains {speedup_words(best)} "
                     f"({_num(run['train_ms_per_sample'], 4)} ms) with a peak of "
                     f"{_num(run['train_peak_memory_gib'])} GiB")
        else:
            text += "; no variant trains measurably faster"
        noise = mine[mine["verdict"].isin(["within noise", "no spread measured"])]
        if len(noise):
            text += f", and {_join(list(noise['variant']))} cannot be told apart from the baseline"
        slower = mine[mine["verdict"] == "slower"]
        if len(slower):
            text += "; " + _join([f"{r['variant']} is {speedup_words(r)}" for _, r in slower.iterrows()])
        said.append(text + ".")
    return (" ".join(said) + " Rows of different workloads are not comparable with each other; each is read "
            "against its own baseline.")


def text_tab04(inputs: Inputs, verdict: Callable) -> str:
    table = inputs.table("tab04_optimization")
    rows = table[table["sm_cycles_rel"].notna()] if len(table) and "sm_cycles_rel" in table else pd.DataFrame()
    said = []
    for gpu, runs in rows.groupby("gpu", sort=False) if len(rows) else []:
        for row in runs[runs["variant"] != "baseline"].itertuples():
            said.append(f"{row.variant} on {gpu} runs a training step in {_num(row.sm_cycles_rel)} of the "
                        f"baseline's SM cycles and {_num(row.warp_instructions_rel)} of its warp instructions at "
                        f"{_num(row.ipc_rel)} of its IPC, with the Tensor pipe busy {_num(row.tensor_pipe_pct)} % "
                        "of the time")
    text = ("The same numbers as a table, with the Nsight Compute totals of the training step relative to the "
            "baseline where the step was profiled. ")
    return text + (("; ".join(said) + ".") if said else "No training step was profiled with Nsight Compute.")


def text_fig01(inputs: Inputs, verdict: Callable) -> str:
    said = []
    for phase in ("train", "sample"):
        rows = _train_rows(inputs, phase)
        for gpu, runs in rows.groupby("gpu", sort=False) if len(rows) else []:
            parts = []
            for variant in ("baseline", *PAPER_VARIANTS):
                run = runs[runs["variant"] == variant]
                if len(run):
                    parts.append(f"{variant}: {_top_classes(run)}")
            if parts:
                said.append(f"In a {'training' if phase == 'train' else 'sampling'} step on {gpu} "
                            f"({runs['tool'].iloc[0]}), the two largest classes are " + "; ".join(parts) + ".")
    return " ".join(said) or "No kernel profile was collected."


def text_fig02(inputs: Inputs, verdict: Callable) -> str:
    kernels = inputs.result("kernels")
    if kernels.empty:
        return "The top kernels are read from the collected kernel table, which this article was not given."
    said = []
    for (gpu, variant), run in kernels[kernels["phase"] == "train"].groupby(["gpu", "variant"], sort=False):
        if variant != "baseline" and variant != "tf32":
            continue
        tool = "ncu" if "ncu" in set(run["tool"]) else run["tool"].iloc[0]
        run = run[run["tool"] == tool]
        per_name = run.groupby(["short_name", "kernel_class"], as_index=False)["duration_ns"].sum()
        total = float(run["duration_ns"].sum())
        if total <= 0 or per_name.empty:
            continue
        top = per_name.sort_values("duration_ns", ascending=False).iloc[0]
        top5 = per_name.sort_values("duration_ns", ascending=False).head(5)["duration_ns"].sum() / total
        said.append(f"on {gpu} with {variant}, `{str(top['short_name'])[:60]}` ({_class(top['kernel_class'])}) "
                    f"takes {_pct(top['duration_ns'] / total)} of the training step and the five longest kernels "
                    f"{_pct(top5)}")
    return ("Few kernels carry most of the time: " + "; ".join(said) + ".") if said else \
        "No training step has a kernel profile."


def text_tab03(inputs: Inputs, verdict: Callable) -> str:
    table = inputs.table("tab03_kernels")
    if table.empty:
        return "No kernel profile was collected."
    said = []
    for row in table[(table["phase"] == "train") & (table["variant"].isin(["baseline", *PAPER_VARIANTS]))] \
            .drop_duplicates(["gpu", "variant"]).itertuples():
        said.append(f"{row.variant} on {row.gpu} launches {int(row.kernels):,} kernels "
                    f"({_num(row.kernel_time_ms, 4)} ms, convolutions {_pct(row.conv_share)}, layout conversion "
                    f"{_pct(row.layout_conversion_share)})")
    return ("Per run and phase, the kernel count and time with the convolution and layout-conversion shares and, "
            "where Nsight Compute ran, the step's totals. Training steps: " + "; ".join(said) + ".")


def text_fig07(inputs: Inputs, verdict: Callable) -> str:
    table = inputs.table("tab04_optimization")
    rows = table[table["sm_cycles_rel"].notna() & (table["variant"] != "baseline")] \
        if len(table) and "sm_cycles_rel" in table else pd.DataFrame()
    if rows.empty:
        return "No label has Nsight Compute profiles of the baseline and another variant's training step."
    fewest = rows.loc[rows["warp_instructions_rel"].idxmin()]
    ipc = rows.loc[rows["ipc_rel"].idxmax()]
    tensor = rows.loc[rows["tensor_pipe_pct"].idxmax()]
    return (f"Relative to the baseline, {fewest['variant']} on {fewest['gpu']} executes the fewest warp instructions "
            f"({_times(1 / fewest['warp_instructions_rel'])} fewer, {_times(1 / fewest['sm_cycles_rel'])} fewer SM "
            f"cycles); no variant raises IPC above the baseline's: the highest is {ipc['variant']}'s at "
            f"{_num(ipc['ipc_rel'])} of it. " if ipc["ipc_rel"] <= 1 else
            f"Relative to the baseline, {fewest['variant']} on {fewest['gpu']} executes the fewest warp instructions "
            f"({_times(1 / fewest['warp_instructions_rel'])} fewer); {ipc['variant']} raises IPC to "
            f"{_num(ipc['ipc_rel'])} of the baseline's. ") + (
            f"The Tensor pipe is busiest with {tensor['variant']} ({_num(tensor['tensor_pipe_pct'])} % of the "
            "step's time, weighted by kernel time). Fewer instructions with a lower IPC is what moving the "
            "convolutions' arithmetic onto the Tensor Cores looks like: each tensor instruction does the work of "
            "many FFMAs, and the remaining kernels (normalization, element-wise) issue at their own rate.")


def text_fig03(inputs: Inputs, verdict: Callable) -> str:
    rows = _train_rows(inputs, "sample")
    rows = rows[(rows["kernel_class"] == "all") & rows["warp_instructions"].notna()] if len(rows) else rows
    if rows.empty:
        return "No sampling step was profiled with Nsight Compute's instruction counters."
    said = [f"{row.variant} on {row.gpu} {_num(row.warp_instructions / 1e9)} G warp instructions"
            + (f", {_num(row.fp32_flop / 1e12)} TFLOP in FP32 arithmetic" if _present(row.fp32_flop) else "")
            for row in rows.itertuples()]
    return ("A sampling step (one U-Net evaluation) executes: " + "; ".join(said) + ". With TF32 the "
            "convolutions' FP32 multiply-adds move to the Tensor Cores, which is why the FP32 share of the "
            "instruction mix falls; what the counters could not split is drawn as such.")


def text_fig04(inputs: Inputs, verdict: Callable) -> str:
    rows = _train_rows(inputs, "sample")
    rows = rows[(rows["kernel_class"] != "all") & rows["dram_bytes"].notna()] if len(rows) else rows
    if rows.empty:
        return "No sampling step was profiled with Nsight Compute's memory counters."
    said = []
    for (gpu, variant), run in rows.groupby(["gpu", "variant"], sort=False):
        total = float(run["dram_bytes"].sum())
        top = run.loc[run["dram_bytes"].idxmax()]
        said.append(f"{variant} on {gpu} moves {_num(total / 1e9)} GB to and from DRAM, "
                    f"{_pct(top['dram_bytes'] / total)} of it in {_class(top['kernel_class'])} kernels")
    return "Per sampling step: " + "; ".join(said) + "."


def text_fig05(inputs: Inputs, verdict: Callable) -> str:
    kernels = inputs.result("ncu_kernels")
    if kernels.empty:
        return "No kernel was profiled with Nsight Compute's warp-state counters."
    said = []
    for (gpu, variant, phase), run in kernels.groupby(["gpu", "variant", "phase"], sort=False):
        stalls = {c: derived.weighted_mean(run, c) for c in run.columns if c.startswith("stall_")}
        stalls = {c: v for c, v in stalls.items() if _present(v)}
        occupancy = derived.weighted_mean(run, "achieved_occupancy_pct") if "achieved_occupancy_pct" in run \
            else math.nan
        if not stalls or variant not in ("baseline", "tf32"):
            continue
        top = max(stalls, key=stalls.get)
        said.append(f"{variant}'s {phase} step on {gpu}: {top.removeprefix('stall_').replace('_', ' ')} "
                    f"({_num(stalls[top])} cycles per issued instruction)"
                    + (f", achieved occupancy {_num(occupancy)} %" if _present(occupancy) else ""))
    return ("The largest stall reason, weighted by kernel time: " + "; ".join(said) + ".") if said else \
        "No profile carries warp-state counters."


def text_fig06(inputs: Inputs, verdict: Callable) -> str:
    rules, kernels = inputs.result("rules"), inputs.result("ncu_kernels")
    if rules.empty or "estimated_speedup_pct" not in rules:
        return "No profile carries Nsight Compute's rule results."
    from .outputs.fig06_priority_scores import priority_scores

    said = []
    for (gpu, phase), run in rules.groupby(["gpu", "phase"], sort=False):
        mine = kernels[(kernels["gpu"] == gpu) & (kernels["phase"] == phase)] if len(kernels) else kernels
        scores = priority_scores(run, mine)
        scores = scores[scores["variant"] == "baseline"] if "baseline" in set(scores["variant"]) else scores
        if scores.empty:
            continue
        top = scores.loc[scores["saving_pct"].idxmax()]
        said.append(f"for {top['variant']}'s {phase} step on {gpu}, the largest is {top['rule']} on "
                    f"{_class(top['kernel_class'])} kernels ({_num(top['saving_pct'])} % of the step)")
    return ("Nsight Compute's rules estimate what fixing each problem would save; weighted by kernel time, "
            + "; ".join(said) + ". These are the profiler's estimates, not measured gains.") if said else \
        "No rule result carries an estimated speedup."


def text_fig10(inputs: Inputs, verdict: Callable, peaks: dict | None = None) -> str:
    rows = _train_rows(inputs, "sample")
    rows = rows[(rows["kernel_class"] == "all") & rows["fp32_flop"].notna()] if len(rows) else rows
    if rows.empty:
        return "No sampling step was profiled with the FLOP counters the roofline needs."
    said = []
    for row in rows.itertuples():
        rate = row.fp32_flop / (row.time_ns * 1e-9) / 1e12
        peak = (peaks or {}).get(row.gpu, {}).get("fp32_tflops")
        said.append(f"{row.variant} on {row.gpu} {_num(rate)} TFLOP/s of FP32 arithmetic over the whole step"
                    + (f" ({_pct(rate / peak, 0)} of the {_num(peak)} TFLOP/s datasheet peak)" if peak else ""))
    return ("The roofline places each kernel class by its arithmetic intensity and achieved rate under the "
            "device's datasheet ceilings (not measurements). Averaged over a sampling step: " + "; ".join(said)
            + ". Tensor-core work appears where the tensor-op counters were collected.")


def _quality_label(gpu: str, rows: pd.DataFrame) -> str | None:
    """One label's quality study as tab06 has it: the baseline's samples, then each variant's paired difference
    against the margin, and the rerun."""
    base = rows[rows["variant"] == "baseline"]
    if base.empty:
        return None
    first = base.iloc[0]
    text = (f"On {gpu} ({first['volume_shape']}, T = {int(first['timesteps'])}, {int(first['optimizer_steps'])} "
            f"optimizer steps), the baseline's samples reach a mean 3D SSIM of {_num(first['ssim_vs_real_mean'])} "
            f"against the held-out real images over seeds {first['seeds']}")
    if float(rows["ssim_vs_real_mean"].max()) < 0.3:
        return text + (". These samples are not brain-like (the training is far too short), so the figure checks "
                       "the path, not the quality.")
    judged, unjudged, rerun = [], {}, ""
    for row in rows[rows["variant"] != "baseline"].itertuples():
        if str(row.variant).startswith("baseline, rerun"):
            rerun = (f" The baseline's seed {row.seeds} trained again in the same job moved the distance by "
                     f"{_num(row.mean_difference)}: {row.outcome}.")
        elif str(row.outcome).startswith("not measurable"):
            unjudged.setdefault(str(row.outcome), []).append(row.variant)
        else:
            judged.append(f"{row.variant} {_num(row.mean_difference)} (90 % interval {_num(row.interval_low)} to "
                          f"{_num(row.interval_high)}), {row.outcome}")
    if judged:
        text += (f". Against a margin of {_num(first['margin'])}, the mean difference in the distance to the real "
                 "images from the baseline of the same seed is: " + "; ".join(judged))
    text += "".join(f"; {_join(variants)}: {outcome}" for outcome, variants in unjudged.items())
    return text + "." + rerun


def text_fig09(inputs: Inputs, verdict: Callable) -> str:
    quality = inputs.table("tab06_quality")
    if quality.empty:
        return "No quality study was run."
    said = [_quality_label(gpu, rows) for gpu, rows in quality.groupby("gpu", sort=False)]
    return " ".join(s for s in said if s) + (
        " Every variant trains from the same seeds as the baseline, with the same initial weights, data order and "
        "sampling noise, so each seed gives one paired difference; the margin is the baseline's seed-to-seed "
        "standard deviation: how far training again from another seed moves the distance.")


def text_tab06(inputs: Inputs, verdict: Callable) -> str:
    quality = inputs.table("tab06_quality")
    if quality.empty or "forward_rel_error_max" not in quality or quality["forward_rel_error_max"].isna().all():
        return "No numeric check was run."
    errors = quality.dropna(subset=["forward_rel_error_max"])
    worst = errors.loc[errors["forward_rel_error_max"].astype(float).idxmax()]
    best = errors.loc[errors["forward_rel_error_max"].astype(float).idxmin()]
    return (f"The float64 check at the trained weights: the forward pass's relative error ranges from "
            f"{_num(best['forward_rel_error_max'])} ({best['variant']} on {best['gpu']}) to "
            f"{_num(worst['forward_rel_error_max'])} ({worst['variant']} on {worst['gpu']}); fp32 arithmetic stays "
            "near 1e-7, TF32 and bf16 trade about three orders of magnitude of it for speed. SSIM and PSNR are "
            "torchmetrics' [@torchmetrics], the Wasserstein distance of the intensities per mask label and the "
            "t-intervals of the paired differences SciPy's [@scipy].")


def text_fig11(inputs: Inputs, verdict: Callable) -> str:
    frontier = inputs.table("tab07_frontier")
    if frontier.empty:
        return ("No label has bench results: `snakemake --cores 1 bench` measures the variants against the "
                "device's own ceilings.")
    table = verdicts(inputs, verdict)
    said = []
    for gpu, rows in frontier.groupby("gpu", sort=False):
        best = rows.loc[rows["train_ms_per_sample"].idxmin()]
        base = rows[rows["variant"] == "baseline"]
        mine = table[(table["gpu"] == gpu) & (table["variant"] == best["variant"])]
        text = f"On {gpu}, the fastest rung is {best['variant']} at {_num(best['train_ms_per_sample'], 4)} ms per " \
               "training sample"
        if len(base) and best["variant"] != "baseline":
            text += (f" against the baseline's {_num(base['train_ms_per_sample'].iloc[0], 4)} ms"
                     + (f" ({speedup_words(mine.iloc[0])})" if len(mine) else ""))
        if _present(best.get("train_fraction_of_bf16_rate")):
            text += (f", {_num(best['train_model_tflops'])} TFLOP/s of model arithmetic, "
                     f"{_pct(best['train_fraction_of_bf16_rate'], 0)} of the device's measured bf16 matrix rate")
        said.append(text + ".")
    return ("Beyond the paper, the ladder climbs from the fp32 baseline to the fastest variant, one switch at a "
            "time, against the FLOP floor. " + " ".join(said))


def text_tab07(inputs: Inputs, verdict: Callable) -> str:
    frontier = inputs.table("tab07_frontier")
    if frontier.empty:
        return "The bench table is empty for the same reason."
    low = frontier.loc[frontier["train_peak_gib"].idxmin()] if "train_peak_gib" in frontier else None
    text = "Per variant: time, model TFLOP/s and their share of the measured bf16 rate, sampling, memory, compilation."
    if low is not None:
        text += (f" The smallest training peak is {_num(low['train_peak_gib'])} GiB ({low['variant']} on "
                 f"{low['gpu']}).")
    return text


def text_tab08(inputs: Inputs, verdict: Callable) -> str:
    table = inputs.table("tab08_conformance")
    if table.empty:
        return "No label was checked against a reference."
    compared = table[table["variant"].notna()]
    if compared.empty:
        reasons = _join(sorted({str(r) for r in table["reasons"].dropna()}))
        return (f"Nothing here can be checked against a shipped reference: {reasons}. A label measured here and "
                "listed in `reference_results` is compared metric by metric, within the configured bands.")
    said = [f"{gpu}: {_counts(rows)}" for gpu, rows in compared.groupby("gpu", sort=False)]
    return ("Each label measured here against the shipped reference set of the same label, metric by metric, "
            "within the bands of `conformance.bands`: " + "; ".join(said) + ". A run outside a band is reported "
            "with the likely reasons from both sides' provenance, never failed.")


def text_tab01(inputs: Inputs, verdict: Callable) -> str:
    return ""


def text_tab02(inputs: Inputs, verdict: Callable) -> str:
    return ""


DESCRIBE = {
    "fig01_runtime_breakdown": text_fig01, "fig02_top_kernels": text_fig02, "fig03_instruction_mix": text_fig03,
    "fig04_memory_system": text_fig04, "fig05_warp_states": text_fig05, "fig06_priority_scores": text_fig06,
    "fig07_optimization_impact": text_fig07, "fig08_end_to_end": text_fig08, "fig09_quality": text_fig09,
    "fig10_roofline": text_fig10, "fig11_optimization_ladder": text_fig11, "tab01_hardware": text_tab01,
    "tab02_workload": text_tab02, "tab03_kernels": text_tab03, "tab04_optimization": text_tab04,
    "tab06_quality": text_tab06, "tab07_frontier": text_tab07, "tab08_conformance": text_tab08,
}


# -- claims ---------------------------------------------------------------------------------------------------------
def claims_text(inputs: Inputs) -> list[str]:
    claims = inputs.table("tab05_claims")
    if claims.empty:
        return ["No claim was evaluated."]
    notes = {f"[{k + 1}]": note for k, note in enumerate(table_notes(inputs.root / "paper/tables/tab05_claims.md"))}
    out = ["Each quantitative claim of the study's abstract is checked by a rule fixed before the measurement (the "
           "numbered notes of tab05); the published values are the paper's A100 numbers, kept in one data file "
           "and shown only as published. The verdicts are reproduced, same direction with another magnitude, "
           "contradicted, inconclusive (the quality claim only: its equivalence test could not decide), or not "
           "measurable here."]
    for k, (claim, rows) in enumerate(claims.groupby("claim", sort=False)):
        first = rows.iloc[0]
        text = f"**Claim {k + 1}: {claim}** (published: {first['published']}, on {first['published_on']}). "
        text += " ".join(f"On {row.gpu} ({row.origin}): {row.measured}; **{row.verdict}**."
                         for row in rows.itertuples())
        note = notes.get(str(first.get("rule", "")))
        if note:
            text += f" Rule: {note}."
        out.append(_claim_comment(claim, rows, text))
    return out


def _claim_comment(claim: str, rows: pd.DataFrame, text: str) -> str:
    """What a verdict means for the claim, where the verdict alone would mislead."""
    verdicts_ = set(rows["verdict"])
    if "same direction, other magnitude" in verdicts_:
        text += (" The direction holds; the size depends on the GPU, cuDNN's algorithm choice and the metric "
                 "(a whole step, or the one convolution class where the change is largest).")
    if "contradicted" in verdicts_ and "IPC" in claim:
        text += (" Fewer, denser instructions need not raise the instructions issued per cycle: with TF32 the "
                 "convolutions issue tensor instructions and the step's time shifts towards normalization and "
                 "element-wise kernels.")
    if "contradicted" in verdicts_ and "quality" in claim:
        text += (" A variant is called different only where the whole 90 % interval of its mean paired difference "
                 "lies beyond the margin, a change larger than training again from another seed; the study's "
                 "training is short and its masks few, so this says what the setting does at that budget.")
    if "inconclusive" in verdicts_ and "quality" in claim:
        text += (" Inconclusive: the interval of at least one variant crosses an edge of the margin, so the study "
                 "can neither call it unchanged nor changed; more seeds (quality_study.seeds) narrow the interval.")
    if verdicts_ == {"not measurable here"}:
        text += " No label of this article can measure it."
    return text


def limitations_text(inputs: Inputs, settings: dict) -> list[str]:
    gpus = [gpu for gpu in inputs.labels()["label"] if inputs.is_gpu(gpu)]
    devices = sorted({inputs.device(gpu) for gpu in gpus})
    text = [
        f"One GPU generation: the study measured three NVIDIA generations, this article {len(devices)} GPU "
        f"model{'s' if len(devices) != 1 else ''} ({_join(devices) if devices else 'none'}). Its findings about "
        "how the optimizations' effect changes across architectures cannot be checked here; the A100 numbers of "
        "the claims are compared with other hardware, so only the direction of a change is expected to agree.",
        "The study's size: a few measured optimizer steps per run (their quartiles bound the noise, and a speed-up "
        "within them is reported as within noise), one profiled step per phase, and a quality study of a short "
        "training at a reduced size with a few seeds per variant. The software differs from the study's (its versions "
        "are not public): cuDNN's algorithm choice, which dominates the fp32 and TF32 convolutions, changes "
        "between versions.",
        "CPU miniature numbers are not GPU findings: the default configuration runs a 32^3, width-32 network with "
        "a ten-step schedule on a CPU so that the whole workflow runs anywhere; its times, kernel classes and "
        "samples test the path, and no claim is judged on them.",
    ]
    return text


# -- figures and tables ---------------------------------------------------------------------------------------------
def pdf_size(path: Path) -> tuple[float, float]:
    """Width and height (points) of a one-page PDF, from its MediaBox."""
    match = re.search(rb"/MediaBox\s*\[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]", path.read_bytes())
    if match is None:
        raise ValueError(f"{path}: no MediaBox (not a PDF page)")
    x0, y0, x1, y1 = map(float, match.groups())
    return x1 - x0, y1 - y0


def figure_item(output: Output, root: Path) -> dict:
    path = output.files_out()["pdf"]
    width, height = pdf_size(root / path)
    return {"kind": "figure", "id": output.id, "path": "/" + path, "caption": caption(output, root),
            "width_cm": round(min(TEXT_WIDTH_CM, FIGURE_HEIGHT_CM * width / height), 2)}


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def cell(text: str, column: str = "") -> str:
    """A CSV value as the article shows it: fractions of PERCENT_COLUMNS as percentages, floats to 4 significant
    digits (integers and version strings such as 13.0 as written)."""
    if not _NUMBER.fullmatch(text):
        return text
    if column in PERCENT_COLUMNS:
        return f"{100 * float(text):.1f}"
    if ("." in text or "e" in text.lower()) and len(re.sub(r"[^0-9]", "", text.lower().partition("e")[0])
                                                    .strip("0")) > 4:
        value = float(text)
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3g}".replace("e+0", "e").replace("e-0", "e-").replace("e+", "e")
        return f"{value:.4g}"
    return text


def _needs(header: list[str], rows: list[list[str]]) -> list[float]:
    """Characters each column needs: its longest header word (bold: a tenth wider) or its longest value, long texts
    wrapping at about 36."""
    return [max(3.0, min(36.0, max([1.1 * max(map(len, h.split()), default=0)]
                                   + [len(r[k].replace("\u200b", "")) for r in rows])))
            for k, h in enumerate(header)]


def _column_pt(header: list[str], rows: list[list[str]], size: float) -> list[float]:
    """About how wide each column set at `size` points is, its cell inset included."""
    return [need * size * 0.5 + 5 for need in _needs(header, rows)]


def _layout(header: list[str], rows: list[list[str]]) -> tuple[float, bool]:
    """Font size and orientation: the largest legible size at which the table fits a portrait page, else landscape."""
    for landscape, width in ((False, PORTRAIT_PT), (True, LANDSCAPE_PT)):
        for size in (8.5, 8.0, 7.5, 7.0):
            if sum(_column_pt(header, rows, size)) <= width:
                return size, landscape
    return 7.0, True


def table_notes(md: Path) -> list[str]:
    """The numbered notes under a table (write_table puts them after the Markdown table)."""
    if not md.exists():
        return []
    return [match.group(1) for match in re.finditer(r"^\[\d+\] (.*?)\s*$", md.read_text(), re.M)]


def article_frame(output_id: str, frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The columns the article shows, with their headers."""
    chosen = ARTICLE_COLUMNS.get(output_id)
    if chosen is None:
        keep = [c for c in frame.columns if not ("gpu" in frame and c in TAGS)]
        return frame[keep], [c.replace("_", " ") for c in keep]
    chosen = [(c, h) for c, h in chosen if c in frame.columns]
    # A column the article shows that holds nothing in any row says nothing.
    chosen = [(c, h) for c, h in chosen if frame[c].ne("").any()]
    frame = frame[[c for c, _ in chosen]].copy()
    if output_id == "tab05_claims":  # a claim and its published value once, above its labels' rows
        repeated = frame["claim"].duplicated() if "claim" in frame else pd.Series(False, index=frame.index)
        for column in ("claim", "published"):
            if column in frame:
                frame.loc[repeated, column] = ""
    return frame, [h for _, h in chosen]


def table_item(output: Output, root: Path) -> dict:
    files = output.files_out()
    try:
        frame = pd.read_csv(root / files["csv"], dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame()
    frame, header = article_frame(output.id, frame)
    numeric = [all(_NUMBER.fullmatch(v) is not None for v in frame[c] if v) and bool(frame[c].ne("").any())
               for c in frame.columns]
    rows = [[cell(value, column).replace("_", "_\u200b") for value, column in zip(row, frame.columns)]
            for row in frame.itertuples(index=False)]
    header = [h + (" %" if c in PERCENT_COLUMNS and not h.endswith("%") and "of" not in h else "")
              if c in PERCENT_COLUMNS else h for c, h in zip(frame.columns, header)]
    size, landscape = _layout(header, rows)
    return {"kind": "table", "id": output.id, "caption": caption(output, root),
            "notes": table_notes(root / files["md"]),
            "header": header, "numeric": numeric, "rows": rows, "empty": "no rows: nothing was measured for this table",
            "size": size, "landscape": landscape, "widths": [round(w, 1) for w in _column_pt(header, rows, size)]}


def item(output: Output, root: Path) -> dict:
    return figure_item(output, root) if output.kind == "figure" else table_item(output, root)


def only_not_comparable(output_id: str, root: Path) -> bool:
    """tab08 whose every row is 'not comparable': its one sentence says so, and no table is shown."""
    if output_id != "tab08_conformance":
        return False
    try:
        frame = pd.read_csv(root / BY_ID[output_id].files_out()["csv"])
    except pd.errors.EmptyDataError:
        return True
    return frame.empty or bool((frame["verdict"] == "not comparable").all())


# -- the article ----------------------------------------------------------------------------------------------------
class Blocks:
    """The article as a flat list of blocks; paragraphs keep their [@key] citations until all are known."""

    def __init__(self):
        self.blocks: list[dict] = []

    def heading(self, text: str, level: int = 1, flush: bool | None = None) -> None:
        """`flush`: the floats pending place before it (every level-1 heading does)."""
        self.blocks.append({"kind": "heading", "level": level, "text": text,
                            "flush": level == 1 if flush is None else flush})

    def par(self, text: str) -> None:
        if text:
            self.blocks.append({"kind": "par", "text": text})

    def add(self, block: dict) -> None:
        self.blocks.append(block)


def default_verdict() -> Callable:
    return derived.speedup_verdict


def _output_block(blocks: Blocks, output: Output, inputs: Inputs, verdict: Callable, peaks: dict) -> None:
    describe = DESCRIBE.get(output.id)
    text = ""
    if describe is text_fig10:
        text = text_fig10(inputs, verdict, peaks)
    elif describe is not None:
        text = describe(inputs, verdict)
    if only_not_comparable(output.id, inputs.root):
        blocks.par(text)  # one sentence instead of a table of one 'not comparable' row
        return
    block = item(output, inputs.root)
    block["text"] = text
    blocks.add(block)


def article_data(root: str | Path, settings: dict, collected: dict[str, str | Path] | None = None,
                 verdict: Callable | None = None, peaks: dict | None = None,
                 references: str | Path | None = None) -> dict:
    """Everything the layout (workflow/report/article.typ) shows, from the outputs under `root` and the collected
    result tables. `verdict(runs, phase)` calls each speed-up faster, slower or within noise
    (reporting.derived.speedup_verdict)."""
    root = Path(root)
    inputs = Inputs(root, collected)
    verdict = verdict or default_verdict()
    refs = load_references(references or root / REFERENCES)
    blocks = Blocks()
    intro, method, results, claims, limits, repro, refs_title = SECTION_TITLES

    blocks.heading(intro)
    for text in introduction(inputs, settings):
        blocks.par(text)

    blocks.heading(method)
    blocks.heading("Hardware and software", 2)
    blocks.par(hardware_text(inputs))
    blocks.add(item(BY_ID["tab01_hardware"], root))
    blocks.heading("Workload", 2)
    blocks.par(workload_text(inputs, settings))
    blocks.add(item(BY_ID["tab02_workload"], root))
    blocks.heading("Variants", 2)
    blocks.par(variants_text(settings))
    blocks.heading("Measuring time", 2)
    blocks.par(timing_text(settings))
    blocks.heading("Measuring kernels", 2)
    blocks.par(kernels_text(settings, inputs))
    blocks.heading("What cannot be measured here", 2)
    blocks.par(unmeasurable_text(inputs))
    blocks.heading("Differences from upstream Med-DDPM", 2)
    blocks.par(upstream_text())
    shown = {"tab01_hardware", "tab02_workload"}
    for output in OUTPUTS:  # any other methods output the registry adds
        if output.section == "methods" and output.id not in shown:
            _output_block(blocks, output, inputs, verdict, peaks or {})

    blocks.heading(results)
    grouped = {i for _, ids in RESULTS_GROUPS for i in ids}
    groups = [(name, [BY_ID[i] for i in ids if i in BY_ID and BY_ID[i].section == "results"])
              for name, ids in RESULTS_GROUPS]
    groups += [(output.title, [output]) for output in OUTPUTS if output.section == "results"
               and output.id not in grouped]
    groups += [("Beyond the paper: the optimization ladder", [o for o in OUTPUTS if o.section == "frontier"]),
               ("Conformance with the shipped reference", [o for o in OUTPUTS if o.section == "conformance"])]
    for name, outputs in groups:
        # Each subsection starts after the figures of the previous one, so its text stays near its figures.
        blocks.heading(name, 2, flush=True)
        for output in outputs:
            _output_block(blocks, output, inputs, verdict, peaks or {})

    blocks.heading(claims)
    texts = claims_text(inputs)
    blocks.par(texts[0])
    for output in [o for o in OUTPUTS if o.section == "claims"]:
        blocks.add(item(output, root))
    for text in texts[1:]:
        blocks.par(text)

    blocks.heading(limits)
    for text in limitations_text(inputs, settings):
        blocks.par(text)

    blocks.heading(repro)
    blocks.par("Every number above comes from the workflow's outputs, typeset with Typst [@typst]: "
               "`snakemake --cores 1 paper/figures/all` rebuilds the figures, the tables and this article from the "
               "measurements (`paper/article.pdf` alone: `snakemake --cores 1 paper/article.pdf`); the "
               "configuration of each run is recorded in its provenance. To share this machine's results as a "
               "reference set for others: `snakemake --cores 1 export`.")

    the_abstract = abstract(inputs, settings, verdict)
    # Citations, numbered in the order of the references file; every reference must be cited.
    numbers = {ref["key"]: k + 1 for k, ref in enumerate(refs)}
    texts = [the_abstract] + [b.get("text", "") for b in blocks.blocks if b["kind"] in ("par", "figure", "table")]
    cited = {key for text in texts for key in cited_keys(text)}
    uncited = [ref["key"] for ref in refs if ref["key"] not in cited]
    if uncited:
        raise ValueError(f"{REFERENCES}: {uncited} listed but never cited")
    for block in blocks.blocks:
        if block["kind"] == "par":
            block["pieces"] = pieces(resolve_citations(block.pop("text"), numbers))
        elif block["kind"] in ("figure", "table"):
            block["text"] = [pieces(resolve_citations(t, numbers)) for t in [block.pop("text", "")] if t]
    blocks.heading(refs_title)
    blocks.add({"kind": "references", "entries": [ref["text"] for ref in refs]})
    labels = ", ".join(inputs.labels()["label"])
    return {
        "title": title(inputs, verdict),
        "subtitle": f"A reproduction of the performance study of arXiv 2606.19365, measured on: {labels}",
        "author": "the Med-DDPM performance-study workflow",
        "abstract": [pieces(resolve_citations(the_abstract, numbers))],
        "blocks": blocks.blocks,
    }


def typeset(root: str | Path, template: str | Path, settings: dict, out: str | Path,
            collected: dict[str, str | Path] | None = None, peaks: str | Path | None = None,
            references: str | Path | None = None) -> None:
    """Write the article's PDF (`out`) with Typst from the outputs under `root`."""
    import typst

    peak_table = yaml.safe_load(Path(peaks).read_text()) if peaks else {}
    data = article_data(root, settings, collected, peaks=peak_table, references=references)
    fonts = typst.Fonts(include_system_fonts=False)
    compiler = typst.Compiler(str(template), root=str(Path(root).resolve()), font_paths=fonts,
                              ignore_system_fonts=True)
    pdf = compiler.compile(format="pdf", sys_inputs={"data": json.dumps(data, sort_keys=True)})
    Path(out).write_bytes(pdf)
