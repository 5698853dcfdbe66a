"""The article's own text, written from the outputs and the configuration: title and abstract, the introduction,
the method's subsections, the paper's claims one by one, the limitations, how to reproduce it. (The paragraph on each
figure and table is its output's: `describe` in reporting/outputs/<id>.py.)

Text may carry ``literal`` or `code`, **strong** words and [@key] citations (workflow/report/references.yaml).
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from medddpm.workloads import source_of

from ..prose import (PAPER_VARIANTS, Inputs, join_words, num, present, speedup_words, table_notes, times,
                     verdict_counts, verdicts)


# -- title and abstract ---------------------------------------------------------------------------------------------
def headline(inputs: Inputs, verdict: Callable) -> str | None:
    """The title's finding: the largest measured, real (called faster by speedup_verdict) TF32 speed-up of a GPU
    label."""
    table = verdicts(inputs, verdict)
    rows = table[(table["variant"] == "tf32") & (table["verdict"] == "faster")] if len(table) else table
    rows = rows[[inputs.is_gpu(gpu) for gpu in rows["gpu"]]] if len(rows) else rows
    if rows.empty:
        return None
    row = rows.loc[rows["speedup"].astype(float).idxmax()]
    return f"TF32 trains {times(float(row['speedup']))} faster than FP32 on the {inputs.device(row['gpu'])}"


def title(inputs: Inputs, verdict: Callable) -> str:
    found = headline(inputs, verdict)
    return ("Where Med-DDPM's GPU time goes, rebuilt" + (f": {found}" if found else ""))


def _label_speedups(inputs: Inputs, table: pd.DataFrame, gpu: str) -> str:
    rows = table[table["gpu"] == gpu]
    runs = inputs.result("runs")
    base = runs[(runs["gpu"] == gpu) & (runs["variant"] == "baseline")]
    if rows.empty or base.empty:
        return ""
    said = [f"the fp32 baseline trains in {num(base['train_ms_per_sample'].iloc[0], 4)} ms per sample"]
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
        f"torch.profiler and Nsight Compute, and the quality of the samples. It covers {join_words(labels)}."
    ]
    said = [_label_speedups(inputs, table, gpu) for gpu in hardware["label"]]
    said = [s for s in said if s]
    if said:
        text.append("Measured " + "; ".join(said) + ".")
    cpu = [gpu for gpu in hardware["label"] if not inputs.is_gpu(gpu)]
    if cpu:
        text.append(f"The {join_words(cpu)} label{'s' if len(cpu) > 1 else ''} run{'' if len(cpu) > 1 else 's'} a "
                    "miniature of the workload on a CPU, to exercise the workflow: its times are not GPU findings.")
    if len(claims):
        per_label = [f"on {gpu}, {verdict_counts(rows)}" for gpu, rows in claims.groupby("gpu", sort=False)]
        text.append(f"Of the {claims['claim'].nunique()} claims of the paper's abstract: "
                    + "; ".join(per_label) + ".")
    compared = conformance[conformance["variant"].notna()] if len(conformance) and "variant" in conformance \
        else pd.DataFrame()
    if len(compared):
        text.append("Against the shipped reference of the same label, metric by metric: "
                    + "; ".join(f"{gpu}: {verdict_counts(rows)}" for gpu, rows in compared.groupby("gpu", sort=False))
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
        f"draws shipped reference sets beside them; this article shows {join_words(measured)}.",
    ]


def hardware_text(inputs: Inputs, settings: dict) -> str:
    parts = []
    for row in inputs.labels().itertuples():
        bits = [row.device]
        if present(getattr(row, "sms", None)):
            bits.append(f"{int(row.sms)} SMs")
        if present(getattr(row, "memory_gib", None)):
            bits.append(f"{float(row.memory_gib):.0f} GiB")
        soft = [f"driver {row.driver}" if present(getattr(row, "driver", None)) else "",
                f"CUDA {row.cuda}" if present(getattr(row, "cuda", None)) else "",
                f"cuDNN {row.cudnn}" if present(getattr(row, "cudnn", None)) else "",
                f"PyTorch {row.torch}" if present(getattr(row, "torch", None)) else ""]
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


def variants_text(inputs: Inputs, settings: dict) -> str:
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
            f"{join_words(parts)}. Where a switch has no meaning on a device (TF32 on a CPU), the run's provenance "
            "records it as without effect and the comparisons that depend on it say so.")


def band_text(settings: dict) -> str:
    """The comparisons' band as the text says it ('10 %'), or what it is where the settings hold none."""
    band = settings.get("comparison", {}).get("band")
    return "the comparisons' band" if band is None else f"{100 * band:g} %"


def timing_text(inputs: Inputs, settings: dict) -> str:
    train, sample = settings["train"], settings["sample"]
    chain = ("every step of each chain" if sample.get("max_steps") is None
             else f"the first {sample['max_steps']} steps of each chain, the volume time being the median step x T")
    return ("Time is measured on the device's own clock: CUDA events around each optimizer step on a GPU, a "
            "clock read after synchronising on a CPU. Warm-up steps run before and outside the timed region (the "
            "allocator, cuDNN's algorithm choice and any compilation settle there): here "
            f"{train['warmup_steps']} warm-up and {train['measured_steps']} measured optimizer steps of "
            f"{train['gradient_accumulation']} micro-batches each, and for sampling {chain} after "
            f"{sample.get('warmup_steps', 1)} warm-up step(s). A run is reported as the median step and its "
            "quartiles. A speed-up over the baseline comes from paired rounds: one job per hardware label times "
            "every variant's step in rotating rounds, each variant in a process of its own (no cache of one reaches "
            "another's steps), so that a change of load hits both sides; the speed-up is the median of the rounds' "
            "ratios with the sign test's exact interval, and is called within noise where the "
            f"whole interval lies within {band_text(settings)} of 1, faster or slower where it lies wholly beyond, "
            "at the band's edge where a narrow interval (within the comparison's precision) lies across that edge, "
            "and not measurable under this load where a wider one does, the rounds disagree or the "
            "machine's conditions changed (a shipped set of separately timed jobs is marked unpaired). Peak memory is the CUDA allocator's maximum on a GPU and the resident set on a CPU.")


def kernels_text(inputs: Inputs, settings: dict) -> str:
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


def unmeasurable_text(inputs: Inputs, settings: dict) -> str:
    cpu = [gpu for gpu in inputs.labels()["label"] if not inputs.is_gpu(gpu)]
    text = ("Nsight Compute and Nsight Systems need an NVIDIA GPU: SM cycles, instruction counts, IPC and "
            "Tensor-pipe utilisation exist only for GPU labels with an Nsight Compute profile, and TF32 has no "
            "meaning on a CPU, so the tf32 variants there would time the baseline twice.")
    if cpu:
        text += (f" On {join_words(cpu)} the workflow therefore times, profiles (torch.profiler) and checks the "
                 "quality of a miniature workload only; the claims about counters read 'not measurable here' for "
                 "it, and its CPU operator classes are not GPU kernel classes.")
    return text


def upstream_text(inputs: Inputs, settings: dict) -> str:
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


# The method's subsections in their order: (key, title, text). A methods output whose `group` is a key follows the
# subsection's text.
METHOD = (
    ("hardware", "Hardware and software", hardware_text),
    ("workload", "Workload", workload_text),
    ("variants", "Variants", variants_text),
    ("timing", "Measuring time", timing_text),
    ("kernels", "Measuring kernels", kernels_text),
    ("unmeasurable", "What cannot be measured here", unmeasurable_text),
    ("upstream", "Differences from upstream Med-DDPM", upstream_text),
)


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


# -- limitations and reproduction ----------------------------------------------------------------------------------
def limitations_text(inputs: Inputs, settings: dict) -> list[str]:
    gpus = [gpu for gpu in inputs.labels()["label"] if inputs.is_gpu(gpu)]
    devices = sorted({inputs.device(gpu) for gpu in gpus})
    text = [
        f"One GPU generation: the study measured three NVIDIA generations, this article {len(devices)} GPU "
        f"model{'s' if len(devices) != 1 else ''} ({join_words(devices) if devices else 'none'}). Its findings about "
        "how the optimizations' effect changes across architectures cannot be checked here; the A100 numbers of "
        "the claims are compared with other hardware, so only the direction of a change is expected to agree.",
        "The study's size: a few measured optimizer steps per run, paired rounds until each speed-up's interval is "
        "narrow or a time budget ends them (on a loaded machine a speed-up may stay not measurable), one profiled "
        "step per phase, and a quality study of a short "
        "training at a reduced size with a few seeds per variant. The software differs from the study's (its versions "
        "are not public): cuDNN's algorithm choice, which dominates the fp32 and TF32 convolutions, changes "
        "between versions.",
        "CPU miniature numbers are not GPU findings: the default configuration runs a 16^3, width-32 network with "
        "a ten-step schedule on a CPU so that the whole workflow runs anywhere; its times, kernel classes and "
        "samples test the path, and no claim is judged on them.",
    ]
    return text


def reproducing_text() -> str:
    return ("Every number above comes from the workflow's outputs, typeset with Typst [@typst]: "
            "`snakemake --cores 1 paper/figures/all` rebuilds the figures, the tables and this article from the "
            "measurements (`paper/article.pdf` alone: `snakemake --cores 1 paper/article.pdf`); the "
            "configuration of each run is recorded in its provenance. To share this machine's results as a "
            "reference set for others: `snakemake --cores 1 export`.")
