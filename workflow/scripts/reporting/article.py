"""The study's article, ``paper/article.pdf``: a short paper typeset from the workflow's outputs, "the paper as it
comes out on my hardware". An abstract of what was measured, methods written from the configuration and the runs'
provenance, every registered figure and table with its caption (in the section its registry entry names), the claims
table with its verdicts, the frontier (fig11, tab07) and the conformance with the shipped reference (tab08).

Typesetting is Typst's, from the `typst` wheel on PyPI (a pip dependency like any other: no TeX installation, the
compiler and its fonts inside the wheel, about a second per article); the layout lives in
``workflow/report/article.typ``, which this module feeds with the text and the outputs as JSON. Only fonts that ship
inside Typst are used and the document carries no date, so equal outputs give a byte-identical PDF on any machine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from .registry import OUTPUTS, SECTIONS, Output

TEXT_WIDTH_CM = 17.0  # A4 less 2 cm margins
PORTRAIT_PT = TEXT_WIDTH_CM / 2.54 * 72
LANDSCAPE_PT = (29.7 - 4) / 2.54 * 72
FIGURE_HEIGHT_CM = 20.5  # the tallest figure that leaves room for its caption on a page
# Columns every collected row carries; the article names the device and origin of each label once (tab01).
TAGS = ("origin", "device", "date")
SECTION_TITLES = {
    "methods": "Methods",
    "results": "Results",
    "claims": "The paper's claims",
    "frontier": "Beyond the paper: the optimization frontier",
    "conformance": "Conformance with the reference",
}


# -- text pieces ----------------------------------------------------------------------------------------------------
def pieces(text: str) -> list[dict]:
    """A paragraph as {text}, {code} and {strong} pieces: ``literal`` (reStructuredText) and `code` become code,
    **strong** bold."""
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


def cell(text: str) -> str:
    """A CSV value as the Markdown and LaTeX tables show it: a float of more than 5 digits to 4 significant ones;
    anything else (integers, short decimals, version strings such as 13.0) as written."""
    if _NUMBER.fullmatch(text) and ("." in text or "e" in text.lower()) \
            and len(re.sub(r"[^0-9]", "", text.lower().partition("e")[0]).strip("0")) > 5:
        return f"{float(text):.4g}"
    return text


def _needs(header: list[str], rows: list[list[str]]) -> list[float]:
    """Characters each column needs: its longest header word (bold: a tenth wider) or its longest value, long texts
    wrapping at about 40."""
    return [max(3.0, min(40.0, max([1.1 * max(map(len, h.split()), default=0)]
                                   + [len(r[k].replace("\u200b", "")) for r in rows])))
            for k, h in enumerate(header)]


def _column_pt(header: list[str], rows: list[list[str]], size: float) -> list[float]:
    """About how wide each column set at `size` points is, its cell inset included."""
    return [need * size * 0.55 + 6 for need in _needs(header, rows)]


def _width_pt(header: list[str], rows: list[list[str]], size: float) -> float:
    return sum(_column_pt(header, rows, size))


def _layout(header: list[str], rows: list[list[str]]) -> tuple[float, bool]:
    """Font size and orientation: the largest size at which the table fits a portrait page, else a landscape one."""
    for landscape, width in ((False, PORTRAIT_PT), (True, LANDSCAPE_PT)):
        for size in (8.5, 7.5, 6.5):
            if _width_pt(header, rows, size) <= width:
                return size, landscape
    return 6.0, True


def table_notes(md: Path) -> list[str]:
    """The numbered notes under a table (write_table puts them after the Markdown table)."""
    return [match.group(1) for match in re.finditer(r"^\[\d+\] (.*?)\s*$", md.read_text(), re.M)]


def table_item(output: Output, root: Path) -> dict:
    files = output.files_out()
    frame = pd.read_csv(root / files["csv"], dtype=str, keep_default_na=False)
    if "gpu" in frame and output.id != "tab01_hardware":
        frame = frame.drop(columns=[c for c in TAGS if c in frame])
    numeric = [all(_NUMBER.fullmatch(v) is not None for v in frame[c] if v) and bool(frame[c].ne("").any())
               for c in frame.columns]
    rows = [[cell(value).replace("_", "_\u200b") for value in row] for row in frame.itertuples(index=False)]
    header = [column.replace("_", " ") for column in frame.columns]
    size, landscape = _layout(header, rows)
    return {"kind": "table", "id": output.id, "caption": caption(output, root), "notes": table_notes(root / files["md"]),
            "header": header, "numeric": numeric, "rows": rows, "empty": "no rows: nothing was measured for this table",
            "size": size, "landscape": landscape, "widths": [round(w, 1) for w in _column_pt(header, rows, size)]}


def item(output: Output, root: Path) -> dict:
    return figure_item(output, root) if output.kind == "figure" else table_item(output, root)


# -- what was measured ----------------------------------------------------------------------------------------------
def _number_of(section: str) -> int:
    return SECTIONS.index(section) + 1


def _read(root: Path, output_id: str) -> pd.DataFrame:
    return pd.read_csv(root / f"paper/tables/{output_id}.csv")


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1] if words else "none"


def _labels(hardware: pd.DataFrame) -> list[str]:
    return [f"{row.label} ({row.device}, {row.origin}{', ' + row.date if isinstance(row.date, str) else ''})"
            for row in hardware.itertuples()]


def _headlines(optimization: pd.DataFrame) -> list[str]:
    """Per label: baseline and fastest variant's training time per sample, and the sampling step."""
    lines = []
    for gpu, runs in optimization.groupby("gpu", sort=False):
        runs = runs.dropna(subset=["train_ms_per_sample"])
        if runs.empty:
            continue
        best = runs.loc[runs["train_ms_per_sample"].idxmin()]
        base = runs[runs["variant"] == "baseline"]
        if base.empty or best["variant"] == "baseline":
            lines.append(f"on {gpu}, the fastest variant measured ({best['variant']}) trains in "
                         f"{best['train_ms_per_sample']:.4g} ms per sample")
            continue
        base = base.iloc[0]
        lines.append(f"on {gpu}, training takes {base['train_ms_per_sample']:.4g} ms per sample with baseline and "
                     f"{best['train_ms_per_sample']:.4g} ms with {best['variant']} "
                     f"({base['train_ms_per_sample'] / best['train_ms_per_sample']:.3g}x), "
                     f"{_sampling_steps(base, best)}")
    return lines


def _sampling_steps(base: pd.Series, best: pd.Series) -> str:
    """The two variants' sampling steps, naming any that was not measured (a set may time training only)."""
    steps = {row["variant"]: row.get("sample_step_median_ms") for row in (base, best)}
    measured = {variant: step for variant, step in steps.items() if pd.notna(step)}
    if len(measured) == 2:
        return "a sampling step " + " and ".join(f"{step:.4g} ms" for step in measured.values())
    missing = " and ".join(variant for variant in steps if variant not in measured)
    shown = "".join(f"a sampling step {step:.4g} ms with {variant}, " for variant, step in measured.items())
    return f"{shown}sampling not measured with {missing}"


def _counts(frame: pd.DataFrame, by: str = "gpu") -> list[str]:
    out = []
    for gpu, rows in frame.groupby(by, sort=False):
        counts = rows["verdict"].value_counts()
        out.append(f"{gpu}: " + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()))
    return out


def abstract(root: Path, settings: dict) -> list[list[dict]]:
    hardware = _read(root, "tab01_hardware")
    claims, conformance = _read(root, "tab05_claims"), _read(root, "tab08_conformance")
    optimization, frontier = _read(root, "tab04_optimization"), _read(root, "tab07_frontier")
    workload = dict(_read(root, "tab02_workload").itertuples(index=False))
    measured = hardware[hardware["origin"] == "measured here"]
    text = [
        "This article is rebuilt by a Snakemake workflow from measurements of Med-DDPM, a mask-conditioned 3D "
        "denoising diffusion model of brain MRI, reproducing the GPU performance study of arXiv 2606.19365: where "
        "the training and sampling time goes, kernel class by kernel class, and what TF32 Tensor Cores and a 3D "
        "channels-last layout change. "
        f"It covers {len(hardware)} hardware label(s): {_join(_labels(hardware))}. "
        f"Measured here: the variants {_join(list(settings['run_variants']))} of a U-Net with "
        f"{workload.get('parameters', '?')} parameters on "
        f"{workload.get('volume (D x W x H), batch', '?').split(',')[0]} volumes (batch 1) "
        f"with T = {settings['diffusion']['timesteps']} diffusion steps (the paper's model has 40,226,433 parameters "
        "and works on 128^3 volumes with T = 250)."
    ]
    headlines = _headlines(optimization)
    if headlines:
        text.append(f"In short, {'; '.join(headlines)}.")
    if len(claims):
        text.append(f"Against the {claims['claim'].nunique()} claims of the paper's abstract, the verdicts are "
                    f"{'; '.join(_counts(claims))} (Section {_number_of('claims')}).")
    compared = conformance[conformance["variant"].notna()] if len(conformance) else conformance
    if len(compared):
        text.append("Checked against the shipped reference set of the same label, metric by metric: "
                    f"{'; '.join(_counts(compared))} (Section {_number_of('conformance')}).")
    elif len(measured):
        text.append(f"No label measured here ({_join(list(measured['label']))}) has a shipped reference set to be "
                    f"checked against (Section {_number_of('conformance')}).")
    if len(frontier):
        best = frontier.loc[frontier["train_ms_per_sample"].idxmin()]
        text.append(f"The bench reaches {best['train_ms_per_sample']:.4g} ms per training sample with "
                    f"{best['variant']} on {best['gpu']} (Section {_number_of('frontier')}).")
    return [pieces(" ".join(text))]


def _variants(settings: dict) -> str:
    parts = []
    for name in settings["run_variants"]:
        switches = settings["variants"].get(name, {})
        on = [key for key, value in switches.items() if value not in (False, None)]
        shown = ", ".join(f"{key}={value}" if value is not True else key for key in on
                          for value in [switches[key]])
        parts.append(f"{name} ({shown or 'every switch off'})")
    return _join(parts)


def methods(root: Path, settings: dict) -> list[list[dict]]:
    train, sample, data = settings["train"], settings["sample"], settings["dataset"]
    source = {"synthetic": "derived from the MNI152 template shipped with nilearn (random deformations, intensity "
                           "changes and synthetic tumours; no download)",
              "wholehead": f"read from `{data['root']}` in Med-DDPM's whole-head layout"}[data["source"]]
    chain = ("every step of each chain" if sample["max_steps"] is None
             else f"the first {sample['max_steps']} steps of each chain (the volume time is the median step x T)")
    kernels = _read(root, "tab03_kernels")
    tools = {gpu: sorted(set(rows["tool"])) for gpu, rows in kernels.groupby("gpu", sort=False)}
    profiled = "; ".join(f"{gpu}: {', '.join(t)}" for gpu, t in tools.items()) or "no profile"
    ncu = settings["profiling"]["ncu"]
    train_set = ncu.get("by_phase", {}).get("train", {}).get("metrics", ncu["metrics"])
    bands = settings["conformance"]["bands"]
    return [
        pieces("The workload is this workflow's re-implementation of the Med-DDPM whole-head model (tab02): a 3D "
               "U-Net conditioned on a one-hot segmentation mask concatenated to the noisy image, trained to predict "
               f"the noise with an L1 loss under a cosine schedule of T = {settings['diffusion']['timesteps']} steps, "
               f"with Adam (learning rate {train['lr']:g}), {train['gradient_accumulation']} micro-batches of one "
               f"volume per optimizer step and an EMA copy of the weights, as upstream. The {data['cases']} cases "
               f"({data['heldout']} held out) are {source}."),
        pieces(f"Variants are data in the configuration: {_variants(settings)}. Each run of a (label, variant) "
               f"times {train['measured_steps']} optimizer steps after {train['warmup_steps']} warm-up step(s), "
               "with CUDA events on a GPU and a synchronised clock on a CPU; medians are reported, with quartiles "
               f"in the tables. Sampling runs ancestral DDPM with the EMA weights over {sample['masks']} held-out "
               f"mask(s), {chain}. Peak memory is the allocator's maximum on a GPU and the process's resident set "
               "on a CPU. Every result carries its provenance: device, driver, CUDA, cuDNN, torch, clocks where "
               "recorded, the digest of the configuration the job used (tab01 lists the devices)."),
        pieces(f"One post-warm-up step per phase ({', '.join(settings['profiling']['phases'])}) of every variant is "
               f"profiled ({profiled}). Nsight Compute runs with `--clock-control none` over a process-wide NVTX "
               f"range (so that autograd's backward kernels are kept), with the metric set `{train_set}` for "
               f"training steps and `{ncu['metrics']}` with the rule sections for sampling steps. Kernels are "
               "classed by name (convolution forward, data and weight gradient, GEMM, layout conversion, dtype "
               "cast, normalization, elementwise, optimizer, reduction, other)."),
        pieces(f"Labels measured here: {_join(list(settings['gpus']))}; shipped reference sets listed in "
               f"`reference_results`: {_join(list(settings['reference_results']))}. A label in both is drawn from "
               "this machine's runs and checked against its reference set with the bands of "
               f"`conformance.bands` (training ±{bands['train_step']['upper']:.0%}, sampling step "
               f"±{bands['sample_step']['upper']:.0%}, memory ±{bands['peak_memory']['upper']:.0%}, kernel-class "
               f"shares ±{bands['kernel_class_share']['upper']:g} points, Nsight Compute totals "
               f"±{bands['ncu_totals']['upper']:.0%}; Section {_number_of('conformance')})."),
    ]


def section_text(name: str, root: Path) -> list[list[dict]]:
    if name == "results":
        return paragraphs("Every figure and table draws one row or group per hardware label, measured here or "
                          "shipped; each names its device, its origin and the date measured, and a panel without "
                          "data says why.")
    if name == "claims":
        return paragraphs("Each quantitative claim of the paper's abstract, its published value (the paper's A100 "
                          "numbers, kept in ``data/paper_claims.yaml`` and shown only as published), the value "
                          "measured for each label and the verdict by the rule in the note of the same number.")
    if name == "frontier":
        bench = _read(root, "tab07_frontier")
        labels = _join(sorted(set(bench["gpu"]))) if len(bench) else ""
        return paragraphs("Beyond the paper: every run variant against its device's own measured ceilings (the "
                          "bench, ``snakemake --cores 1 bench``), and the ladder from the fp32 baseline to the "
                          "fastest variant against the FLOP floor. "
                          + (f"Bench results exist for {labels}." if labels else
                             "No label has bench results yet, so the figure and the table below are empty."))
    if name == "conformance":
        return paragraphs("A run measured here and the shipped reference set of the same label, metric by metric "
                          "(as HPC benchmark suites check per-system references): within the band; faster or "
                          "slower; lower or higher; or not comparable, with the reason. Outside the band, the likely "
                          "reasons come from the provenance of both sides. A run outside the bands is reported, "
                          "never failed.")
    return []


def article_data(root: str | Path, settings: dict) -> dict:
    """Everything the layout (workflow/report/article.typ) shows, from the outputs under `root`."""
    root = Path(root)
    hardware = _read(root, "tab01_hardware")
    labels = ", ".join(hardware["label"])
    sections = []
    for name in SECTIONS:
        items = [item(output, root) for output in OUTPUTS if output.section == name]
        text = methods(root, settings) if name == "methods" else section_text(name, root)
        sections.append({"title": SECTION_TITLES[name], "paragraphs": text, "items": items})
    sections.append({"title": "Reproducing this article", "items": [], "paragraphs": [pieces(
        "Every number above comes from the workflow's outputs: `snakemake --cores 1 paper/figures/all` rebuilds "
        "the figures, the tables and this article from the measurements (`paper/article.pdf` alone: "
        "`snakemake --cores 1 paper/article.pdf`); the configuration of each run is recorded in its provenance. "
        "To share this machine's results as a reference set for others: `snakemake --cores 1 export`.")]})
    return {
        "title": "Med-DDPM across GPU architectures, rebuilt",
        "subtitle": f"The performance study of arXiv 2606.19365 as measured on: {labels}",
        "author": "the Med-DDPM performance-study workflow",
        "abstract": abstract(root, settings),
        "sections": sections,
    }


def typeset(root: str | Path, template: str | Path, settings: dict, out: str | Path) -> None:
    """Write the article's PDF (`out`) with Typst from the outputs under `root`."""
    import typst

    data = article_data(root, settings)
    fonts = typst.Fonts(include_system_fonts=False)
    compiler = typst.Compiler(str(template), root=str(Path(root).resolve()), font_paths=fonts,
                              ignore_system_fonts=True)
    pdf = compiler.compile(format="pdf", sys_inputs={"data": json.dumps(data, sort_keys=True)})
    Path(out).write_bytes(pdf)
