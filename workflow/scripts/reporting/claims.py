"""The paper's abstract claims against what was measured (tab05): one verdict per claim and hardware label.

Published values come only from data/paper_claims.yaml and go only into the "published" columns. A verdict is one of
four kinds: the measured value reproduces the claim (within the stated factor), goes the same way with another
magnitude, contradicts it, or cannot be measured here (the missing input or the switch without effect is named).

The evidence is the paper's: every verdict is over `baseline` and the paper's optimized variants (the claims file's
`optimized_variants`), never over a variant beyond the paper; the claims about Nsight Compute metrics read Nsight
Compute profiles only, and the kernel-time shares the Nsight profiles where a run has one, the measured value saying
so where torch.profiler stood in. Each rule's text (the table's note) names the variants it is over.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import yaml

from .derived import CONV_CLASSES, class_totals, differing_switches, exercised, ncu_headline
from .results import Results, preferred_tool, variant_order

REPRODUCED = "reproduced"
SAME_DIRECTION = "same direction, other magnitude"
CONTRADICTED = "contradicted"
NOT_MEASURABLE = "not measurable here"
VERDICTS = (REPRODUCED, SAME_DIRECTION, CONTRADICTED, NOT_MEASURABLE)


DEFAULT_OPTIMIZED = ["tf32", "channels_last", "tf32_channels_last"]
# The paper's profilers: a kernel-time share from any other tool is said to be so in the measured value.
PAPER_TOOLS = {"ncu": "ncu", "nsys": "nsys"}


def load_claims(path: str | Path) -> dict:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        raise ValueError(f"{path}: expected a mapping with a `claims` list")
    optimized = data.get("optimized_variants", DEFAULT_OPTIMIZED)
    for claim in data["claims"]:
        for key in ("id", "claim", "published_text", "measure", "rule"):
            if key not in claim:
                raise ValueError(f"{path}: claim {claim.get('id', '?')!r} lacks `{key}`")
        # The rule is the table's note: it names the variants its verdict is over.
        unnamed = [v for v in ("baseline", *optimized) if not re.search(rf"\b{re.escape(v)}\b", claim["rule"])]
        if unnamed:
            raise ValueError(f"{path}: the rule of claim {claim['id']!r} does not name {', '.join(unnamed)}, "
                             "variants its verdict is over (optimized_variants)")
    return data


def within(measured: float, published: float, factor: float) -> bool:
    return published / factor <= measured <= published * factor


def magnitude_verdict(improved: bool, measured: float, published: float, factor: float) -> str:
    """For a claimed improvement: reproduced within `factor` of the published value, the same direction with
    another magnitude, or contradicted (no improvement)."""
    if not improved:
        return CONTRADICTED
    return REPRODUCED if within(measured, published, factor) else SAME_DIRECTION


def _not_measurable(why: str) -> tuple[str, str]:
    """The reason goes where the measured value would be, so that the verdict column holds one of four words."""
    return why, NOT_MEASURABLE


def _unexercised(ctx: dict, gpu: str, variants) -> tuple[str, str] | None:
    """'Not measurable' when a compared variant's distinguishing switches had no effect on the device."""
    idle = [v for v in variants if not exercised(ctx["runs"], gpu, v)]
    if not idle:
        return None
    switches = sorted({s for v in idle for s, on in differing_switches(ctx["runs"], gpu, v).items() if not on})
    what = f"{', '.join(switches)} had no effect on this device" if switches else "no run to compare with baseline"
    return _not_measurable(f"{what} ({', '.join(idle)} ran as baseline does)")


def _reduction(claim: dict, gpu: str, metric: str, classes: pd.DataFrame, others: list[str], base: float,
               head: pd.DataFrame) -> tuple[str, str]:
    """"Up to Nx lower": the largest baseline/variant ratio of `metric` summed over one convolution class (fprop,
    dgrad, wgrad: the kernels the optimizations replace), over the optimized variants; the whole-step ratio of the
    best variant is reported beside it."""
    totals = class_totals(classes, metric)
    ratios = {}
    for variant in others:
        for conv_class in totals.index:
            if "baseline" in totals and variant in totals and totals.loc[conv_class, variant] > 0:
                ratios[(variant, conv_class)] = totals.loc[conv_class, "baseline"] / totals.loc[conv_class, variant]
    step = {v: base / float(head.loc[v, metric]) for v in others if float(head.loc[v, metric]) > 0}
    if not ratios or not step:
        return _not_measurable(f"no {metric} of the convolution kernels in an optimized variant on {gpu}")
    (variant, conv_class), ratio = max(ratios.items(), key=lambda item: item[1])
    best_step = max(step, key=step.get)
    text = f"{ratio:.3g}x lower ({conv_class}, {variant}); whole step {step[best_step]:.3g}x ({best_step})"
    return text, magnitude_verdict(ratio > 1, ratio, claim["published"], claim["factor"])


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def reference_seed(study: pd.DataFrame) -> int | None:
    """The seed every variant of a study trained from: the one the most variants share (ties: the smallest)."""
    if len(study) == 0:
        return None
    counts = study.groupby("seed")["variant"].nunique()
    return int(counts[counts == counts.max()].index.min())


def study_band(claim: dict, study: pd.DataFrame) -> dict | None:
    """The baseline's seed-to-seed band of the claim's distance to the real images: centred on the baseline's
    distance at the reference seed (the one every variant trained from), half as wide as the spread of the
    baseline's distances over its seeds (largest minus smallest) times `spread_factor`. None without two baseline
    seeds with that distance."""
    column = claim["distance"]
    base = study[study["variant"] == "baseline"].dropna(subset=[column]) if len(study) else study
    seed = reference_seed(study)
    if len(base) < 2 or seed not in set(base["seed"]):
        return None
    base = base.sort_values("seed")
    values = base.set_index("seed")[column].astype(float)
    spread = float(values.max() - values.min())
    return {"column": column, "seeds": list(values.index), "values": list(values), "centre": float(values[seed]),
            "spread": spread, "half_width": spread * claim["spread_factor"], "seed": seed}


def quality_verdict(claim: dict, gpu: str, study: pd.DataFrame, optimized: list[str]) -> tuple[str, str]:
    """The quality claim from the quality study (the rule is the claim's in data/paper_claims.yaml): not measurable
    without a study, where a judged variant's switches had no effect on the device, without two baseline seeds, or
    while the baseline's samples are not brain-like (3D SSIM against the held-out real images under
    `trained_ssim_min`); else reproduced when every optimized variant's distance to the real images lies within the
    baseline's seed-to-seed band (study_band), contradicted when one lies outside."""
    if len(study) == 0:
        return _not_measurable(f"no quality study on {gpu}")
    first = study[study["seed"] == reference_seed(study)]
    judged = [v for v in variant_order(first["variant"]) if v in optimized]
    if not judged:
        return _not_measurable(f"no optimized variant ({', '.join(optimized)}) in the quality study on {gpu}")
    idle = _unexercised({"runs": first}, gpu, judged)
    if idle:
        return idle
    band = study_band(claim, study)
    if band is None:
        return _not_measurable(f"the baseline trained with one seed on {gpu}: no seed-to-seed spread to judge by")
    base = study[study["variant"] == "baseline"].sort_values("seed")
    ssim = base["ssim_vs_real"].astype(float)
    if ssim.isna().any() or float(ssim.min()) < claim["trained_ssim_min"]:
        return _not_measurable(
            f"the baseline's samples are not brain-like: 3D SSIM against the held-out real images "
            f"{' / '.join(f'{v:.2g}' for v in ssim)} (seeds {' / '.join(map(str, base['seed']))}) < "
            f"{claim['trained_ssim_min']} after {int(base['optimizer_steps'].iloc[0])} optimizer steps at "
            f"{base['volume_shape'].iloc[0]}")
    values = first.set_index("variant")[band["column"]].astype(float)
    inside = {v: bool(abs(values[v] - band["centre"]) <= band["half_width"]) for v in values.index}
    others = [v for v in variant_order(values.index) if v not in judged and v != "baseline"]

    def listed(variants):
        return ", ".join(f"{v} {_fmt(values[v])}{'' if inside[v] else ' (outside)'}" for v in variants)

    text = (f"{band['column']}: baseline {_fmt(band['centre'])} +- {_fmt(band['half_width'])} (seeds "
            f"{' / '.join(_fmt(v) for v in band['values'])}); {listed(judged)}")
    if others:
        text += f"; beyond the paper: {listed(others)}"
    return text, REPRODUCED if all(inside[v] for v in judged) else CONTRADICTED


def _tool(tool: str) -> str:
    return PAPER_TOOLS.get(tool, f"{'torch.profiler' if tool == 'torch' else tool}, not the paper's Nsight tools")


def _paper_classes(classes: pd.DataFrame, optimized: list[str]) -> pd.DataFrame:
    """The training-step class shares of the paper's variants only (baseline and `optimized`)."""
    return classes[classes["variant"].isin(["baseline", *optimized])]


def evaluate(claim: dict, gpu: str, ctx: dict) -> tuple[str, str]:
    """(measured value as text, verdict) of one claim for one hardware label.

    ctx: headline (ncu_headline rows of the label), ncu_classes (its ncu training-step summaries, every class),
    classes (training summaries of the label, preferred tool), study (the quality study's runs of the label), runs
    (its end-to-end rows, with switches), is_gpu, optimized (variant names).
    """
    measure = claim["measure"]
    optimized = list(ctx["optimized"])
    if measure in ("reduction_ratio", "ipc_gain", "tensor_utilisation"):
        head = ctx["headline"].set_index("variant") if len(ctx["headline"]) else pd.DataFrame()
        metric = {"reduction_ratio": claim.get("metric"), "ipc_gain": "ipc",
                  "tensor_utilisation": "tensor_pipe_pct"}[measure]
        if head.empty or "baseline" not in head.index or pd.isna(head.loc["baseline", metric]):
            return _not_measurable(f"no Nsight Compute training-step profile of baseline on {gpu}")
        others = [v for v in variant_order(head.index) if v in optimized and not pd.isna(head.loc[v, metric])]
        if not others:
            return _not_measurable(f"no Nsight Compute training-step profile of an optimized variant on {gpu}")
        base = float(head.loc["baseline", metric])
        if measure == "reduction_ratio":
            return _reduction(claim, gpu, metric, ctx["ncu_classes"], others, base, head)
        if measure == "ipc_gain":
            if base <= 0:
                return _not_measurable(f"baseline IPC is zero on {gpu}")
            gains = {v: (float(head.loc[v, metric]) / base - 1) * 100 for v in others}
            best = max(gains, key=gains.get)
            among = f"; the highest of {', '.join(others)}" if len(others) > 1 else ""
            return (f"{gains[best]:+.3g} % ({best}{among})",
                    magnitude_verdict(gains[best] > 0, gains[best], claim["published"], claim["factor"]))
        values = {v: float(head.loc[v, metric]) for v in others}
        best = max(values, key=values.get)
        return (f"{base:.3g} -> {values[best]:.3g} % ({best})",
                magnitude_verdict(values[best] > base, values[best], claim["published"], claim["factor"]))
    if measure == "quality_unchanged":
        return quality_verdict(claim, gpu, ctx["study"], optimized)
    if measure in ("conv_share", "layout_share"):
        if not ctx["is_gpu"]:
            return _not_measurable(f"{gpu} ran on a CPU (no GPU kernels)")
        if len(ctx["classes"]) == 0:
            return _not_measurable(f"no training-step kernel profile on {gpu}")
        classes = _paper_classes(ctx["classes"], optimized)
        if len(classes) == 0:
            return _not_measurable(f"no training-step kernel profile of the paper's variants (baseline, "
                                   f"{', '.join(optimized)}) on {gpu}")
        if measure == "conv_share":
            variants = variant_order(classes["variant"])
            variant = "baseline" if "baseline" in variants else variants[0]
            run = classes[classes["variant"] == variant]
            share = float(run[run["kernel_class"].isin(CONV_CLASSES)]["time_share"].sum())
            return (f"{share:.1%} of kernel time ({variant}, {_tool(run['tool'].iloc[0])})",
                    REPRODUCED if share > claim["threshold"] else CONTRADICTED)
        over = ", ".join(variant_order(classes["variant"]))
        layout = classes[classes["kernel_class"] == "layout_conversion"]
        if len(layout) == 0:
            return f"0 % (no layout-conversion kernels in {over})", CONTRADICTED
        best = layout.loc[layout["time_share"].astype(float).idxmax()]
        share = float(best["time_share"])
        return (f"{share:.1%} of kernel time ({best['variant']}, {_tool(best['tool'])}; largest of {over})",
                REPRODUCED if share >= claim["threshold"] else CONTRADICTED)
    raise ValueError(f"paper_claims: unknown measure {measure!r} in claim {claim['id']!r}")


def claims_table(claims: dict, results: Results) -> tuple[pd.DataFrame, list[str]]:
    """One row per (claim, hardware label): published value, measured value, verdict and the number of the note
    that states the claim's rule; and the notes (one rule per claim)."""
    summaries = results.table("summaries")
    headline = ncu_headline(summaries)
    ncu_train = (summaries[(summaries["tool"] == "ncu") & (summaries["phase"] == "train")] if len(summaries)
                 else summaries)
    train = preferred_tool(summaries[summaries["phase"] == "train"]) if len(summaries) else summaries
    study, runs = results.table("study"), results.table("runs")

    def of(frame: pd.DataFrame, gpu: str) -> pd.DataFrame:
        return frame[frame["gpu"] == gpu] if len(frame) else frame

    rows, notes = [], []
    for number, claim in enumerate(claims["claims"], 1):
        notes.append(claim["rule"])
        for gpu in results.labels():
            ctx = {"headline": of(headline, gpu), "ncu_classes": of(ncu_train, gpu), "classes": of(train, gpu),
                   "study": of(study, gpu), "runs": of(runs, gpu), "is_gpu": results.gpu_device(gpu),
                   "optimized": claims.get("optimized_variants", DEFAULT_OPTIMIZED)}
            measured, verdict = evaluate(claim, gpu, ctx)
            rows.append({"claim": claim["claim"], "published": claim["published_text"],
                         "published_on": claim.get("published_on", ""), "gpu": gpu, "origin": results.origin(gpu),
                         "measured": measured, "verdict": verdict, "rule": f"[{number}]"})
    return pd.DataFrame(rows), notes
