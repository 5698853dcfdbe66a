"""The paper's abstract claims against what was measured here (tab05), and the per-variant headline (tab04).

Published values come only from data/paper_claims.yaml and go only into the "published" columns.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import yaml

from .kernels import CONV_CLASSES
from .sources import Sources, preferred_tool
from .style import variant_order

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_MEASURABLE = "not measurable here"
NCU_METRICS = ("sm_cycles", "warp_instructions", "tensor_pipe_pct", "ipc")


def load_claims(path: str | Path) -> dict:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        raise ValueError(f"{path}: expected a mapping with a `claims` list")
    for claim in data["claims"]:
        for key in ("id", "claim", "published_text", "measure", "rule"):
            if key not in claim:
                raise ValueError(f"{path}: claim {claim.get('id', '?')!r} lacks `{key}`")
    return data


def ncu_headline(summaries: pd.DataFrame, phase: str = "train") -> pd.DataFrame:
    """One row per (gpu, variant) with an ncu profile of `phase`: the 'all' row's SM cycles, instructions, IPC,
    tensor-pipe %."""
    columns = ["gpu", "variant", *NCU_METRICS]
    if summaries.empty:
        return pd.DataFrame(columns=columns)
    rows = summaries[(summaries["tool"] == "ncu") & (summaries["phase"] == phase) & (summaries["kernel_class"] == "all")]
    return rows.reindex(columns=columns).reset_index(drop=True)


def relative_to_baseline(frame: pd.DataFrame, columns, baseline: str = "baseline") -> pd.DataFrame:
    """frame (gpu, variant, columns...) -> the same with each column divided by the gpu's baseline value.
    NaN where the baseline (or the value) is missing or the baseline is zero."""
    out = frame.copy()
    for column in columns:
        base = frame[frame["variant"] == baseline].set_index("gpu")[column]
        ref = frame["gpu"].map(base).astype(float)
        out[column] = (frame[column].astype(float) / ref.where(ref != 0)).astype(float)
    return out


def _within(measured: float, published: float, factor: float) -> bool:
    return published / factor <= measured <= published * factor


def _verdict(ok: bool) -> str:
    return REPRODUCED if ok else NOT_REPRODUCED


def _reduction(claim: dict, gpu: str, metric: str, classes: pd.DataFrame, others: list[str], base: float,
               head: pd.DataFrame) -> tuple[str, str]:
    """"Up to Nx lower": the largest baseline/variant ratio of `metric` summed over one convolution class (fprop,
    dgrad, wgrad: the kernels the optimizations replace), over the optimized variants; the whole-step ratio of the
    best variant is reported beside it."""
    totals = classes[classes["kernel_class"].isin(CONV_CLASSES)].pivot_table(
        index="kernel_class", columns="variant", values=metric, aggfunc="sum")
    ratios = {}
    for variant in others:
        for conv_class in totals.index:
            if "baseline" in totals and variant in totals and totals.loc[conv_class, variant] > 0:
                ratios[(variant, conv_class)] = totals.loc[conv_class, "baseline"] / totals.loc[conv_class, variant]
    step = {v: base / float(head.loc[v, metric]) for v in others if float(head.loc[v, metric]) > 0}
    if not ratios or not step:
        return "", f"{NOT_MEASURABLE}: no {metric} of the convolution kernels in an optimized variant on {gpu}"
    (variant, conv_class), ratio = max(ratios.items(), key=lambda item: item[1])
    best_step = max(step, key=step.get)
    text = f"{ratio:.3g}x lower ({conv_class}, {variant}); whole step {step[best_step]:.3g}x ({best_step})"
    return text, _verdict(_within(ratio, claim["published"], claim["factor"]))


def evaluate(claim: dict, gpu: str, ctx: dict) -> tuple[str, str]:
    """(measured value as text, verdict) of one claim for one hardware label.

    ctx: headline (ncu_headline rows of the label), ncu_classes (its ncu training-step summaries, every class),
    classes (training summaries of the label, preferred tool),
    quality (quality rows of the label), is_gpu, optimized (variant names).
    """
    measure = claim["measure"]
    optimized = [v for v in ctx["optimized"]]
    if measure in ("reduction_ratio", "ipc_gain", "tensor_utilisation"):
        head = ctx["headline"].set_index("variant") if len(ctx["headline"]) else pd.DataFrame()
        metric = {"reduction_ratio": claim.get("metric"), "ipc_gain": "ipc", "tensor_utilisation": "tensor_pipe_pct"}[measure]
        if head.empty or "baseline" not in head.index or pd.isna(head.loc["baseline", metric]):
            return "", f"{NOT_MEASURABLE}: no Nsight Compute training-step profile of baseline on {gpu}"
        others = [v for v in variant_order(head.index) if v in optimized and not pd.isna(head.loc[v, metric])]
        if not others:
            return "", f"{NOT_MEASURABLE}: no Nsight Compute training-step profile of an optimized variant on {gpu}"
        base = float(head.loc["baseline", metric])
        if measure == "reduction_ratio":
            return _reduction(claim, gpu, metric, ctx["ncu_classes"], others, base, head)
        if measure == "ipc_gain":
            if base <= 0:
                return "", f"{NOT_MEASURABLE}: baseline IPC is zero on {gpu}"
            gains = {v: (float(head.loc[v, metric]) / base - 1) * 100 for v in others}
            best = max(gains, key=gains.get)
            ok = gains[best] > 0 and _within(gains[best], claim["published"], claim["factor"])
            return f"{gains[best]:+.3g} % ({best})", _verdict(ok)
        values = {v: float(head.loc[v, metric]) for v in others}
        best = max(values, key=values.get)
        ok = values[best] > base and _within(values[best], claim["published"], claim["factor"])
        return f"{base:.3g} -> {values[best]:.3g} % ({best})", _verdict(ok)
    if measure == "quality_unchanged":
        qual = ctx["quality"]
        rows = qual[qual["variant"].isin(optimized)] if len(qual) else qual
        if len(rows) == 0:
            return "", f"{NOT_MEASURABLE}: no quality check of an optimized variant on {gpu}"
        ssim = rows["ssim_vs_baseline"].astype(float)
        error = rows["forward_rel_error"].astype(float)
        if ssim.isna().any() or error.isna().any():
            return "", f"{NOT_MEASURABLE}: incomplete quality check on {gpu}"
        ok = bool((ssim > claim["ssim_min"]).all() and (error < claim["forward_rel_error_max"]).all())
        return f"min SSIM vs baseline {ssim.min():.4g}, max forward rel. error {error.max():.2g}", _verdict(ok)
    if measure in ("conv_share", "layout_share"):
        if not ctx["is_gpu"]:
            return "", f"{NOT_MEASURABLE}: {gpu} ran on a CPU (no GPU kernels)"
        classes = ctx["classes"]
        if len(classes) == 0:
            return "", f"{NOT_MEASURABLE}: no training-step kernel profile on {gpu}"
        if measure == "conv_share":
            variants = variant_order(classes["variant"])
            variant = "baseline" if "baseline" in variants else variants[0]
            run = classes[classes["variant"] == variant]
            share = float(run[run["kernel_class"].isin(CONV_CLASSES)]["time_share"].sum())
            tool = run["tool"].iloc[0]
            return f"{share:.1%} of kernel time ({variant}, {tool})", _verdict(share > claim["threshold"])
        layout = classes[classes["kernel_class"] == "layout_conversion"]
        if len(layout) == 0:
            return "0 % (no layout-conversion kernels)", NOT_REPRODUCED
        best = layout.loc[layout["time_share"].astype(float).idxmax()]
        share = float(best["time_share"])
        return f"{share:.1%} of kernel time ({best['variant']}, {best['tool']})", _verdict(share >= claim["threshold"])
    raise ValueError(f"paper_claims: unknown measure {measure!r} in claim {claim['id']!r}")


def claims_table(claims: dict, sources: Sources) -> pd.DataFrame:
    """One row per (claim, hardware label): published value, measured value, verdict and the rule."""
    summaries = sources.summaries()
    headline = ncu_headline(summaries)
    ncu_train = summaries[(summaries["tool"] == "ncu") & (summaries["phase"] == "train")] if len(summaries) else summaries
    train = preferred_tool(summaries[summaries["phase"] == "train"]) if len(summaries) else summaries
    quality = sources.quality()
    rows = []
    for claim in claims["claims"]:
        for gpu in sources.labels():
            ctx = {
                "headline": headline[headline["gpu"] == gpu],
                "ncu_classes": ncu_train[ncu_train["gpu"] == gpu] if len(ncu_train) else ncu_train,
                "classes": train[train["gpu"] == gpu] if len(train) else train,
                "quality": quality[quality["gpu"] == gpu] if len(quality) else quality,
                "is_gpu": sources.gpu_device(gpu),
                "optimized": claims.get("optimized_variants", ["tf32", "channels_last", "tf32_channels_last"]),
            }
            measured, verdict = evaluate(claim, gpu, ctx)
            rows.append(
                {
                    "claim": claim["claim"],
                    "published": claim["published_text"],
                    "published_on": claim.get("published_on", ""),
                    "gpu": gpu,
                    "origin": sources.origin(gpu),
                    "measured": measured,
                    "verdict": verdict,
                    "rule": claim["rule"],
                }
            )
    return pd.DataFrame(rows)


def optimization_table(sources: Sources) -> pd.DataFrame:
    """tab04: per (gpu, variant) training and sampling cost, speed-up vs baseline, and ncu ratios where measured."""
    runs = sources.end_to_end()
    if runs.empty:
        return pd.DataFrame()
    runs = runs[["gpu", "variant", "origin", "device", "train_ms_per_sample", "sample_step_median_ms",
                 "train_peak_memory_gib"]].copy()
    speed = relative_to_baseline(runs[["gpu", "variant", "train_ms_per_sample"]], ["train_ms_per_sample"])
    runs.insert(5, "train_speedup_vs_baseline", 1 / speed["train_ms_per_sample"].to_numpy())
    head = ncu_headline(sources.summaries())
    rel = relative_to_baseline(head, ["sm_cycles", "warp_instructions", "ipc"]).rename(
        columns={"sm_cycles": "sm_cycles_rel", "warp_instructions": "warp_instructions_rel", "ipc": "ipc_rel"}
    )
    rel = rel.drop(columns="tensor_pipe_pct").merge(head[["gpu", "variant", "tensor_pipe_pct"]], on=["gpu", "variant"])
    table = runs.merge(rel, on=["gpu", "variant"], how="left")
    for column in ("sm_cycles_rel", "warp_instructions_rel", "ipc_rel", "tensor_pipe_pct"):
        table[column] = table[column].astype(float)
    order = {g: k for k, g in enumerate(sources.labels())}
    table["_g"] = table["gpu"].map(order)
    table["_v"] = table["variant"].map({v: k for k, v in enumerate(variant_order(table["variant"]))})
    return table.sort_values(["_g", "_v"]).drop(columns=["_g", "_v"]).reset_index(drop=True)


def hardware_table(sources: Sources) -> pd.DataFrame:
    """tab01: one row per hardware label, from provenance."""
    from .sources import date_of, device_of

    rows = []
    for row in sources.hardware().itertuples():
        prov = row.provenance
        memory = prov.get("memory_bytes")
        cudnn = prov.get("cudnn")
        if isinstance(cudnn, int) and cudnn >= 10000:  # torch reports 91900 for 9.19.0
            cudnn = f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}"
        rows.append(
            {
                "label": row.gpu,
                "device": device_of(prov) if prov else "",
                "sms": prov.get("multiprocessors"),
                "memory_gib": memory / 2**30 if isinstance(memory, (int, float)) else math.nan,
                "driver": prov.get("driver") or "",
                "cuda": prov.get("cuda") or "",
                "cudnn": "" if cudnn is None else str(cudnn),
                "torch": prov.get("torch") or "",
                "origin": row.origin,
                "date": date_of(prov),
            }
        )
    table = pd.DataFrame(rows, columns=["label", "device", "sms", "memory_gib", "driver", "cuda", "cudnn", "torch",
                                        "origin", "date"])
    table["sms"] = [("" if pd.isna(v) else str(int(v))) for v in table["sms"]]
    table["memory_gib"] = table["memory_gib"].astype(float)
    return table
