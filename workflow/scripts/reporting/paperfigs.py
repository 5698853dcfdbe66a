"""The kernel-level figures of the paper (fig01-fig07, fig10), faceted by hardware label over every run available
(measured here and shipped references). A panel without data says why (reporting.style.note)."""

from __future__ import annotations

import math
import re
import textwrap

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
import numpy as np
import pandas as pd

from profiling.kernels import CLASS_NAMES, classify

from .claims import ncu_headline, relative_to_baseline
from .sources import SHIPPED, Sources, preferred_tool
from .style import note, variant_order

PHASES = ["train", "sample"]
TOOL_NAMES = {"ncu": "Nsight Compute", "nsys": "Nsight Systems", "torch": "torch.profiler"}
_PALETTE = plt.get_cmap("tab10").colors + ("#7f7f7f",)
CLASS_COLORS = {name: _PALETTE[k % len(_PALETTE)] for k, name in enumerate(CLASS_NAMES)}
VARIANT_COLORS = {v: c for v, c in zip(["baseline", "torch_defaults", "tf32", "channels_last", "tf32_channels_last"],
                                       plt.get_cmap("Set2").colors)}


def _variant_color(variant: str, k: int):
    return VARIANT_COLORS.get(variant, plt.get_cmap("Dark2").colors[k % 8])

def _grouped_barh(ax, frame: pd.DataFrame, category: str, value: str, categories: list) -> None:
    """One horizontal bar per variant for each of `categories` (bottom to top), side by side."""
    order = variant_order(frame["variant"])
    height = 0.8 / len(order)
    for k, variant in enumerate(order):
        values = frame[frame["variant"] == variant].set_index(category).reindex(categories)[value]
        ax.barh(np.arange(len(categories)) + (k - (len(order) - 1) / 2) * height, values, height=height,
                color=_variant_color(variant, k), label=variant)
    ax.set_yticks(range(len(categories)), categories, fontsize=8)


def _say(ax, text: str) -> None:
    note(ax, "\n".join(textwrap.wrap(text, 42)))


def phases_of(sources: Sources) -> list[str]:
    present = [p for p in sources.files["phase"].dropna().unique()]
    return [p for p in PHASES if p in present or not present] + sorted(set(present) - set(PHASES))


def absent_reason(sources: Sources, gpu: str, phase: str, what: str = "") -> str:
    """Why a label has no Nsight Compute numbers for `phase` (or why `what` is missing from its ncu profile)."""
    tools = sources.tools(gpu, phase)
    shipped = ", shipped reference" if sources.origin(gpu) == SHIPPED else ""
    if "ncu" in tools:
        return (f"Nsight Compute profile of the {phase} step on {gpu} has no {what}: not collected for that "
                f"phase (profiling.ncu.by_phase)")
    if not tools:
        return f"no Nsight Compute data for {gpu} ({phase}{shipped}): no {phase}-step profile"
    names = " and ".join(TOOL_NAMES.get(t, t) for t in tools)
    return f"no Nsight Compute data for {gpu} ({phase}{shipped}): {names} measure{'s' if len(tools) == 1 else ''} durations only"


def _rows_figure(titles: list[str], ncols: int, width: float = 5.2, height: float = 3.9, ratios=None,
                 left_out: list[str] = ()):
    """One subfigure per row (titled), `ncols` axes in each; `left_out` (rows not drawn, with the reason) goes into
    a last, short row, so a figure never hides a label or phase without saying why."""
    chars = int(width * ncols * 12)  # about what fits across the figure at 9 pt
    notes = [line for text in left_out for line in textwrap.wrap(f"- {text}", chars, subsequent_indent="  ")]
    extra = 0.35 + 0.2 * len(notes) if notes else 0
    fig = plt.figure(figsize=(width * ncols, height * len(titles) + extra), layout="constrained")
    heights = [height] * len(titles) + ([extra] if notes else [])
    subfigs = fig.subfigures(len(heights), 1, squeeze=False, height_ratios=heights)[:, 0]
    axes = []
    for subfig, title in zip(subfigs, titles):
        subfig.suptitle(title, x=0.01, ha="left", fontsize=11, fontweight="bold")
        axes.append(subfig.subplots(1, ncols, squeeze=False, width_ratios=ratios)[0])
    if notes:
        subfigs[-1].text(0.01, 0.5, "Not drawn:\n" + "\n".join(notes), ha="left",
                         va="center", fontsize=9)
    return fig, axes


def _rows_with_data(sources: Sources, has_data, what: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(gpu, phase) rows for which has_data(gpu, phase) holds, and the reasons for the others. When no row has
    data, every row is kept (each then states its reason on its own panels)."""
    rows = [(g, p) for g in sources.labels() for p in phases_of(sources)]
    kept = [row for row in rows if has_data(*row)]
    if not kept:
        return rows, []
    return kept, [absent_reason(sources, gpu, phase, what) for gpu, phase in rows if (gpu, phase) not in kept]


def _class_legend(fig, classes) -> None:
    handles = [plt.Rectangle((0, 0), 1, 1, color=CLASS_COLORS.get(c, "grey")) for c in classes]
    if handles:
        per_row = max(2, int(fig.get_figwidth() / 1.7))  # class names are up to 17 characters at 9 pt
        fig.legend(handles, classes, loc="outside lower center", ncol=min(per_row, len(handles)),
                   title="kernel class", fontsize=9)


def _weighted(frame: pd.DataFrame, column: str, weight: str = "duration_ns") -> float:
    data = frame[[column, weight]].dropna()
    if data.empty or data[weight].sum() <= 0:
        return math.nan
    return float((data[column] * data[weight]).sum() / data[weight].sum())


def _has(frame: pd.DataFrame, columns) -> bool:
    return len(frame) > 0 and all(c in frame.columns and frame[c].notna().any() for c in columns)


def _ncu(kernels: pd.DataFrame, gpu: str, phase: str) -> pd.DataFrame:
    if kernels.empty:
        return kernels
    return kernels[(kernels["gpu"] == gpu) & (kernels["phase"] == phase) & (kernels["tool"] == "ncu")]


def _xticks(ax, labels) -> None:
    ax.set_xticks(range(len(labels)), labels, rotation=25, ha="right")


# -- fig01 --------------------------------------------------------------------------------------------------------
def plot_runtime_breakdown(sources: Sources):
    summaries = sources.summaries()
    summaries = preferred_tool(summaries) if len(summaries) else summaries
    labels, phases = sources.labels(), phases_of(sources)
    fig, axes = _rows_figure([sources.panel_label(g) for g in labels], len(phases))
    used = set()
    for gpu, row in zip(labels, axes):
        for phase, ax in zip(phases, row):
            data = summaries[(summaries["gpu"] == gpu) & (summaries["phase"] == phase)] if len(summaries) else summaries
            data = data[data["kernel_class"] != "all"] if len(data) else data
            ax.set_title(f"{phase} step", loc="left")
            if len(data) == 0:
                _say(ax, f"no {phase}-step profile for {gpu}" + (" in the shipped reference" if sources.origin(gpu) == SHIPPED else ""))
                continue
            order = variant_order(data["variant"])
            bottom = np.zeros(len(order))
            for kernel_class in CLASS_NAMES:
                shares = [float(data[(data["variant"] == v) & (data["kernel_class"] == kernel_class)]["time_share"].sum())
                          for v in order]
                if any(shares):
                    used.add(kernel_class)
                    ax.bar(range(len(order)), np.array(shares) * 100, bottom=bottom, color=CLASS_COLORS[kernel_class])
                    bottom += np.array(shares) * 100
            tools = [data[data["variant"] == v]["tool"].iloc[0] for v in order]
            _xticks(ax, [f"{v}\n({TOOL_NAMES.get(t, t)})" for v, t in zip(order, tools)])
            cpu = not sources.gpu_device(gpu)
            ax.set_ylabel("share of CPU operator self time (%)" if cpu else "share of GPU kernel time (%)")
            ax.set_ylim(0, 100)
    _class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig


# -- fig02 --------------------------------------------------------------------------------------------------------
def focus_variant(variants) -> str | None:
    variants = list(variants)
    for choice in ("tf32", "baseline"):
        if choice in variants:
            return choice
    return variant_order(variants)[0] if variants else None


def top_kernels(kernels: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """The `n` kernels (by short name, class and precision) with the largest summed time."""
    grouped = (kernels.groupby(["short_name", "kernel_class", "precision"], dropna=False)
               .agg(time_ns=("duration_ns", "sum"), launches=("instances", "sum")).reset_index())
    return grouped.sort_values(["time_ns", "short_name"], ascending=[False, True]).head(n).reset_index(drop=True)


def kernel_label(name: str, width: int = 56) -> str:
    """A kernel's short name cut to `width` characters, keeping its tile size (what tells cuDNN kernels apart)."""
    name = str(name)
    if len(name) <= width:
        return name
    tile = re.search(r"tilesize\w+?(?=_|$)", name)
    tail = "..." + tile.group(0) if tile else "..."
    return name[: width - len(tail)] + tail


def plot_top_kernels(sources: Sources, n: int = 10):
    kernels = sources.kernel_tables()
    labels = sources.labels()
    fig, axes = _rows_figure([sources.panel_label(g) for g in labels], 1, width=11, height=4.2)
    used = set()
    for gpu, (ax,) in zip(labels, axes):
        data = kernels[kernels["gpu"] == gpu] if len(kernels) else kernels
        phase = "train" if len(data) and (data["phase"] == "train").any() else (data["phase"].iloc[0] if len(data) else "train")
        data = data[data["phase"] == phase] if len(data) else data
        variant = focus_variant(data["variant"].unique()) if len(data) else None
        if variant is None:
            ax.set_title("top kernels", loc="left")
            _say(ax, f"no per-kernel profile for {gpu}")
            continue
        data = preferred_tool(data[data["variant"] == variant])
        tool = data["tool"].iloc[0]
        top = top_kernels(data, n)
        used.update(top["kernel_class"])
        names = [f"{kernel_label(s)}{'' if p in ('unknown', None) else f' [{p}]'} x{l}"
                 for s, p, l in zip(top["short_name"], top["precision"], top["launches"])]
        y = np.arange(len(top))[::-1]
        ax.barh(y, top["time_ns"] / 1e6, color=[CLASS_COLORS.get(c, "grey") for c in top["kernel_class"]])
        ax.set_yticks(y, names, fontsize=8)
        what = "CPU operator self time" if not sources.gpu_device(gpu) else "summed kernel time"
        ax.set_xlabel(f"{what} in one {phase} step (ms)")
        ax.set_title(f"top {len(top)}: {variant}, {phase} step, {TOOL_NAMES.get(tool, tool)}; "
                     f"name [precision] x launches", loc="left")
    _class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig


# -- fig03 --------------------------------------------------------------------------------------------------------
MIX = [("tensor", "tensor (HMMA + GMMA)"), ("inst_global_ld", "global load"), ("inst_global_st", "global store"),
       ("inst_shared_ld", "shared load"), ("inst_shared_st", "shared store")]
MIX_COLORS = dict(zip([m for m, _ in MIX] + ["other"], plt.get_cmap("tab10").colors[:5] + ("#bbbbbb",)))


def instruction_mix(kernels: pd.DataFrame) -> pd.DataFrame:
    """Per variant: warp instructions by kind (tensor, global/shared load/store), the remainder as 'other'."""
    rows = []
    for variant, run in kernels.groupby("variant"):
        total = float(run["warp_instructions"].sum())
        row = {"variant": variant}
        tensor = sum(float(run[c].fillna(0).sum()) for c in ("tensor_hmma_instructions", "tensor_gmma_instructions")
                     if c in run)
        row["tensor"] = tensor
        for column, _ in MIX[1:]:
            row[column] = float(run[column].fillna(0).sum()) if column in run else 0.0
        row["other"] = max(total - sum(row[c] for c, _ in MIX), 0.0)
        rows.append(row)
    return pd.DataFrame(rows)


def _has_mix(data: pd.DataFrame) -> bool:
    return _has(data, ["warp_instructions"]) and any(_has(data, [c]) for c, _ in MIX[1:])


def plot_instruction_mix(sources: Sources):
    kernels = sources.kernel_tables(["ncu"])
    what = "instruction-mix counters"
    rows, left_out = _rows_with_data(sources, lambda g, p: _has_mix(_ncu(kernels, g, p)), what)
    fig, axes = _rows_figure([f"{sources.panel_label(g)} - {p} step" for g, p in rows], 1, width=7.5,
                             height=3.6, left_out=left_out)
    for (gpu, phase), (ax,) in zip(rows, axes):
        ax.set_title("executed warp instructions by kind, Nsight Compute", loc="left")
        data = _ncu(kernels, gpu, phase)
        if not _has_mix(data):
            _say(ax, absent_reason(sources, gpu, phase, what))
            continue
        mix = instruction_mix(data).set_index("variant")
        order = variant_order(mix.index)
        left = np.zeros(len(order))
        for column, label in MIX + [("other", "other")]:
            values = mix.loc[order, column].to_numpy() / 1e9
            ax.barh(range(len(order)), values, left=left, color=MIX_COLORS[column], label=label)
            left += values
        for y, total in enumerate(left):
            ax.annotate(f"{total:,.1f}", (total, y), va="center", ha="left", fontsize=8, xytext=(3, 0),
                        textcoords="offset points")
        ax.set_yticks(range(len(order)), order)
        ax.invert_yaxis()
        ax.set_xlim(0, left.max() * 1.15)
        ax.set_xlabel("warp instructions executed in one step (billions)")
        ax.legend(fontsize=8, loc="lower right")
    return fig


# -- fig04 --------------------------------------------------------------------------------------------------------
def memory_by_class(kernels: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (variant, kernel_class), group in kernels.groupby(["variant", "kernel_class"]):
        dram = group.get("dram_read_bytes", pd.Series(dtype=float)).fillna(0).sum() + \
            group.get("dram_write_bytes", pd.Series(dtype=float)).fillna(0).sum()
        rows.append({"variant": variant, "kernel_class": kernel_class, "dram_gb": float(dram) / 1e9,
                     "l2_hit_pct": _weighted(group, "l2_hit_pct") if "l2_hit_pct" in group else math.nan,
                     "l1_hit_pct": _weighted(group, "l1_hit_pct") if "l1_hit_pct" in group else math.nan})
    return pd.DataFrame(rows)


def _grouped_bars(ax, frame: pd.DataFrame, column: str, categories: list[str], ylabel: str) -> None:
    order = variant_order(frame["variant"])
    width = 0.8 / max(len(order), 1)
    for k, variant in enumerate(order):
        values = frame[frame["variant"] == variant].set_index("kernel_class").reindex(categories)[column]
        ax.bar(np.arange(len(categories)) + (k - (len(order) - 1) / 2) * width, values, width=width,
               color=_variant_color(variant, k), label=variant)
    _xticks(ax, categories)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def plot_memory_system(sources: Sources):
    kernels = sources.kernel_tables(["ncu"])
    memory = ["dram_read_bytes", "l2_hit_pct", "l1_hit_pct"]
    rows, left_out = _rows_with_data(sources, lambda g, p: any(_has(_ncu(kernels, g, p), [c]) for c in memory),
                                     "DRAM or cache counters")
    fig, axes = _rows_figure([f"{sources.panel_label(g)} - {p} step" for g, p in rows], 3, left_out=left_out)
    panels = [("dram_gb", ["dram_read_bytes"], "DRAM traffic, read + write (GB)", "DRAM traffic counters"),
              ("l2_hit_pct", ["l2_hit_pct"], "L2 hit rate (%, time-weighted)", "L2 hit-rate counters"),
              ("l1_hit_pct", ["l1_hit_pct"], "L1 hit rate (%, time-weighted)", "L1 hit-rate counters")]
    for (gpu, phase), row in zip(rows, axes):
        data = _ncu(kernels, gpu, phase)
        table = memory_by_class(data) if len(data) else pd.DataFrame()
        for (column, needs, ylabel, what), ax in zip(panels, row):
            ax.set_title(ylabel.split(" (")[0] + " per kernel class", loc="left")
            if not _has(data, needs):
                _say(ax, absent_reason(sources, gpu, phase, what))
                continue
            classes = [c for c in CLASS_NAMES if c in set(table["kernel_class"])]
            _grouped_bars(ax, table, column, classes, ylabel)
            if column != "dram_gb":
                ax.set_ylim(0, 105)
    return fig


# -- fig05 --------------------------------------------------------------------------------------------------------
def warp_states(kernels: pd.DataFrame, top: int = 8) -> pd.DataFrame:
    """Per variant and stall reason: the time-weighted mean of stall_<reason> over kernels."""
    stalls = [c for c in kernels.columns if c.startswith("stall_") and kernels[c].notna().any()]
    rows = [{"variant": v, "reason": c.removeprefix("stall_"), "value": _weighted(run, c)}
            for v, run in kernels.groupby("variant") for c in stalls]
    frame = pd.DataFrame(rows, columns=["variant", "reason", "value"])
    if frame.empty:
        return frame
    ranking = frame.groupby("reason")["value"].max().sort_values(ascending=False)
    keep = list(ranking.index[:top])
    frame.loc[~frame["reason"].isin(keep), "reason"] = "other reasons"
    return frame.groupby(["variant", "reason"], as_index=False)["value"].sum()


def plot_warp_states(sources: Sources):
    kernels = sources.kernel_tables(["ncu"])

    def has_states(gpu: str, phase: str) -> bool:
        data = _ncu(kernels, gpu, phase)
        return _has(data, ["achieved_occupancy_pct"]) or any(
            _has(data, [c]) for c in data.columns if c.startswith("stall_"))

    rows, left_out = _rows_with_data(sources, has_states, "stall-reason or occupancy counters")
    fig, axes = _rows_figure([f"{sources.panel_label(g)} - {p} step" for g, p in rows], 2, width=6.5,
                             ratios=[2.2, 1], left_out=left_out)
    for (gpu, phase), (ax_stall, ax_occ) in zip(rows, axes):
        data = _ncu(kernels, gpu, phase)
        ax_stall.set_title("warp stall reasons (time-weighted over kernels)", loc="left")
        ax_occ.set_title("achieved occupancy (time-weighted)", loc="left")
        stalls = [c for c in data.columns if c.startswith("stall_")] if len(data) else []
        if not _has(data, stalls[:1]) or not stalls:
            _say(ax_stall, absent_reason(sources, gpu, phase, "stall-reason counters"))
        else:
            states = warp_states(data)
            reasons = list(states.groupby("reason")["value"].max().sort_values().index)
            _grouped_barh(ax_stall, states, "reason", "value", reasons)
            ax_stall.set_xlabel("warps stalled per issued instruction (cycles)")
            ax_stall.legend(fontsize=8)
        if not _has(data, ["achieved_occupancy_pct"]):
            _say(ax_occ, absent_reason(sources, gpu, phase, "occupancy counters"))
            continue
        order = variant_order(data["variant"].unique())
        values = [_weighted(data[data["variant"] == v], "achieved_occupancy_pct") for v in order]
        ax_occ.bar(range(len(order)), values, color=[_variant_color(v, k) for k, v in enumerate(order)])
        _xticks(ax_occ, order)
        ax_occ.set_ylabel("active warps (% of peak)")
        ax_occ.set_ylim(0, 105)
    return fig


# -- fig06 --------------------------------------------------------------------------------------------------------
def priority_scores(rules: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """Per (variant, rule, kernel class): estimated saving = sum over kernels of speedup % x kernel time, as % of the
    run's kernel time. Kernels are matched on ncu's kernel id (= launch order); unmatched ones count with zero time."""
    rules = rules[rules["estimated_speedup_pct"].notna()].copy()
    if rules.empty:
        return pd.DataFrame(columns=["variant", "rule", "kernel_class", "saving_pct"])
    rows = []
    for variant, run in rules.groupby("variant"):
        times = kernels[kernels["variant"] == variant][["launch", "duration_ns", "kernel_class"]] if len(kernels) else None
        run = run.copy()
        if times is not None and len(times):
            run = run.merge(times.rename(columns={"launch": "kernel_id"}), on="kernel_id", how="left")
            total = float(times["duration_ns"].sum())
        else:
            run["duration_ns"], run["kernel_class"], total = math.nan, None, math.nan
        run["kernel_class"] = run["kernel_class"].fillna(run["kernel_name"].astype(str).map(classify))
        run["saving_pct"] = run["estimated_speedup_pct"].astype(float) * run["duration_ns"].fillna(0) / total
        rows.append(run.groupby(["rule", "kernel_class"], as_index=False)["saving_pct"].sum().assign(variant=variant))
    return pd.concat(rows, ignore_index=True)[["variant", "rule", "kernel_class", "saving_pct"]]


def plot_priority_scores(sources: Sources, top: int = 10):
    rules, kernels = sources.ncu_rules(), sources.kernel_tables(["ncu"])

    def rules_of(gpu: str, phase: str) -> pd.DataFrame:
        return rules[(rules["gpu"] == gpu) & (rules["phase"] == phase)] if len(rules) else rules

    def has_scores(gpu: str, phase: str) -> bool:
        return bool(rules_of(gpu, phase)["estimated_speedup_pct"].notna().any())

    rows, left_out = _rows_with_data(sources, has_scores, "rule results (no sections)")
    fig, axes = _rows_figure([f"{sources.panel_label(g)} - {p} step" for g, p in rows], 2, width=6.5, height=4.4,
                             left_out=left_out)
    for (gpu, phase), (ax_rule, ax_heat) in zip(rows, axes):
        ax_rule.set_title("estimated saving per rule (all kernel classes)", loc="left")
        data = rules_of(gpu, phase)
        if not has_scores(gpu, phase):
            reason = absent_reason(sources, gpu, phase, "rule results (no sections)")
            _say(ax_rule, reason)
            _say(ax_heat, reason)
            continue
        scores = priority_scores(data, _ncu(kernels, gpu, phase))
        per_rule = scores.groupby(["variant", "rule"], as_index=False)["saving_pct"].sum()
        ranking = per_rule.groupby("rule")["saving_pct"].max().sort_values(ascending=False).index[:top]
        order = variant_order(per_rule["variant"])
        _grouped_barh(ax_rule, per_rule, "rule", "saving_pct", list(ranking)[::-1])
        ax_rule.set_xlabel("estimated saving (% of step kernel time)")
        ax_rule.legend(fontsize=8)
        variant = focus_variant(order)
        heat = scores[scores["variant"] == variant].pivot_table(index="rule", columns="kernel_class",
                                                                 values="saving_pct", aggfunc="sum", fill_value=0)
        heat = heat.reindex(index=list(ranking), columns=[c for c in CLASS_NAMES if c in heat.columns]).fillna(0)
        image = ax_heat.imshow(heat.to_numpy(), aspect="auto", cmap="Reds")
        ax_heat.set_yticks(range(len(heat.index)), heat.index, fontsize=8)
        ax_heat.set_xticks(range(len(heat.columns)), heat.columns, rotation=30, ha="right", fontsize=8)
        ax_heat.grid(False)
        ax_heat.set_title(f"by kernel class: {variant}", loc="left")
        ax_heat.figure.colorbar(image, ax=ax_heat, label="estimated saving (% of step kernel time)")
    return fig


# -- fig07 --------------------------------------------------------------------------------------------------------
RATIOS = [("sm_cycles", "SM cycles"), ("warp_instructions", "warp instructions"), ("ipc", "IPC")]


def optimization_impact(summaries: pd.DataFrame) -> pd.DataFrame:
    """ncu training step: per (gpu, variant) the ratios of SM cycles, warp instructions and IPC to baseline, and
    the tensor-pipe utilisation (%)."""
    head = ncu_headline(summaries)
    rel = relative_to_baseline(head, [m for m, _ in RATIOS])
    return rel.assign(tensor_pipe_pct=head["tensor_pipe_pct"].astype(float))


def plot_optimization_impact(sources: Sources):
    summaries, runs = sources.summaries(), sources.end_to_end()
    impact = optimization_impact(summaries)
    labels = sources.labels()
    fig, axes = _rows_figure([sources.panel_label(g) for g in labels], 3, ratios=[1.6, 1, 1])
    for gpu, (ax_rel, ax_tensor, ax_speed) in zip(labels, axes):
        ax_rel.set_title("Nsight Compute, training step, vs baseline", loc="left")
        ax_tensor.set_title("Tensor Core use, training step", loc="left")
        ax_speed.set_title("end-to-end training", loc="left")
        data = impact[impact["gpu"] == gpu]
        if data.empty or data[[m for m, _ in RATIOS]].isna().all().all():
            reason = absent_reason(sources, gpu, "train") if data.empty else \
                f"no Nsight Compute training-step profile of baseline on {gpu}: nothing to compare with"
            _say(ax_rel, reason)
            _say(ax_tensor, reason if data.empty or data["tensor_pipe_pct"].isna().all() else "")
        else:
            order = variant_order(data["variant"])
            width = 0.8 / len(order)
            for k, variant in enumerate(order):
                row = data[data["variant"] == variant].iloc[0]
                xs = np.arange(len(RATIOS)) + (k - (len(order) - 1) / 2) * width
                values = [row[m] for m, _ in RATIOS]
                ax_rel.bar(xs, values, width=width, color=_variant_color(variant, k), label=variant)
                for x, value in zip(xs, values):
                    if not pd.isna(value):
                        ax_rel.annotate(f"{value:.2g}", (x, value), ha="center", va="bottom", fontsize=7)
            ratios = data[[m for m, _ in RATIOS]].astype(float).to_numpy()
            ax_rel.set_yscale("log")
            ax_rel.set_ylim(np.nanmin(ratios) / 2, max(np.nanmax(ratios), 1) * 1.6)
            ax_rel.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
            ax_rel.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            ax_rel.yaxis.set_minor_formatter(NullFormatter())
            ax_rel.axhline(1, color="black", linewidth=0.8)
            ax_rel.set_xticks(range(len(RATIOS)), [label for _, label in RATIOS])
            ax_rel.set_ylabel("ratio to baseline (log scale; 1 = baseline)")
            ax_rel.legend(fontsize=8)
            ax_tensor.bar(range(len(order)), data.set_index("variant").loc[order, "tensor_pipe_pct"],
                          color=[_variant_color(v, k) for k, v in enumerate(order)])
            _xticks(ax_tensor, order)
            ax_tensor.set_ylabel("tensor pipe active (% of peak, time-weighted)")
        run = runs[runs["gpu"] == gpu] if len(runs) else runs
        if len(run) == 0 or "baseline" not in set(run["variant"]):
            _say(ax_speed, f"no baseline training run for {gpu}: no speed-up to compute")
            continue
        base = float(run[run["variant"] == "baseline"]["train_ms_per_sample"].iloc[0])
        order = variant_order(run["variant"])
        speed = [base / float(run[run["variant"] == v]["train_ms_per_sample"].iloc[0]) for v in order]
        ax_speed.bar(range(len(order)), speed, color=[_variant_color(v, k) for k, v in enumerate(order)])
        for x, value in enumerate(speed):
            ax_speed.annotate(f"{value:.2f}x", (x, value), ha="center", va="bottom", fontsize=8)
        ax_speed.axhline(1, color="black", linewidth=0.8)
        _xticks(ax_speed, order)
        ax_speed.set_ylabel("speed-up vs baseline (x, per sample)")
    return fig


# -- fig10 --------------------------------------------------------------------------------------------------------
def peaks_for(peaks: dict, gpu: str, device: str) -> dict | None:
    """Datasheet ceilings of a label: by label, else by a name pattern matched against the device name."""
    if gpu in peaks:
        return peaks[gpu]
    for entry in peaks.values():
        if isinstance(entry, dict) and entry.get("name_pattern") and re.search(entry["name_pattern"], device or "", re.I):
            return entry
    return None


def roofline_points(kernels: pd.DataFrame, top: int = 12) -> pd.DataFrame:
    """Per variant, the `top` kernels by time (grouped by short name): FP32 FLOP from thread-level FFMA x 2 + FADD +
    FMUL, DRAM bytes read + written, intensity (FLOP/byte) and throughput (GFLOP/s)."""
    frame = kernels.copy()
    for column in ("thread_inst_ffma", "thread_inst_fadd", "thread_inst_fmul", "dram_read_bytes", "dram_write_bytes"):
        frame[column] = frame[column].fillna(0) if column in frame else 0.0
    frame["flop"] = 2 * frame["thread_inst_ffma"] + frame["thread_inst_fadd"] + frame["thread_inst_fmul"]
    frame["bytes"] = frame["dram_read_bytes"] + frame["dram_write_bytes"]
    grouped = frame.groupby(["variant", "short_name", "kernel_class"], as_index=False)[["flop", "bytes", "duration_ns"]].sum()
    grouped = grouped.sort_values(["variant", "duration_ns", "short_name"], ascending=[True, False, True])
    grouped = grouped.groupby("variant").head(top)
    grouped = grouped[(grouped["flop"] > 0) & (grouped["bytes"] > 0) & (grouped["duration_ns"] > 0)]
    grouped["intensity"] = grouped["flop"] / grouped["bytes"]
    grouped["gflops"] = grouped["flop"] / grouped["duration_ns"]
    return grouped.reset_index(drop=True)


MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def plot_roofline(sources: Sources, peaks: dict):
    kernels = sources.kernel_tables(["ncu"])
    needs = ["thread_inst_ffma", "dram_read_bytes"]
    what = "FP32 instruction or DRAM counters"
    rows, left_out = _rows_with_data(sources, lambda g, p: _has(_ncu(kernels, g, p), needs), what)
    fig, axes = _rows_figure([f"{sources.panel_label(g)} - {p} step" for g, p in rows], 1, width=7.5, height=5,
                             left_out=left_out)
    used = set()
    for (gpu, phase), row in zip(rows, axes):
        ceiling = peaks_for(peaks, gpu, sources.tags(gpu)["device"])
        for ax in row:
            ax.set_title("top kernels on the roofline, Nsight Compute", loc="left")
            data = _ncu(kernels, gpu, phase)
            if not _has(data, needs):
                _say(ax, absent_reason(sources, gpu, phase, what))
                continue
            points = roofline_points(data)
            if points.empty:
                _say(ax, f"no kernel with FP32 FLOP and DRAM traffic in the {phase} step on {gpu}")
                continue
            order = variant_order(points["variant"])
            for k, variant in enumerate(order):
                part = points[points["variant"] == variant]
                used.update(part["kernel_class"])
                ax.scatter(part["intensity"], part["gflops"], marker=MARKERS[k % len(MARKERS)], s=30,
                           c=[CLASS_COLORS.get(c, "grey") for c in part["kernel_class"]], edgecolors="black",
                           linewidths=0.4, label=variant)
            ax.set_xscale("log")
            ax.set_yscale("log")
            lo = min(points["intensity"].min() / 3, 0.1)
            hi = max(points["intensity"].max() * 3, 1000)
            if ceiling:
                xs = np.logspace(np.log10(lo), np.log10(hi), 200)
                bw = ceiling["dram_bandwidth_gbs"]
                for value, text, style in ((ceiling.get("fp32_tflops"), "FP32", "-"),
                                           (ceiling.get("tf32_tensor_tflops"), "TF32 tensor", "--")):
                    if value:
                        ax.plot(xs, np.minimum(xs * bw, value * 1e3), style, color="black", linewidth=1)
                        ax.annotate(f"{text} peak {value:g} TFLOP/s (datasheet)", (hi, value * 1e3),
                                    ha="right", va="bottom", fontsize=7)
                ax.annotate(f"DRAM {bw:g} GB/s (datasheet)", (lo * 1.5, lo * 1.5 * bw), fontsize=7, rotation=0,
                            va="bottom")
            else:
                ax.annotate(f"no datasheet ceilings for {gpu} in data/gpu_peaks.yaml", (0.02, 0.95),
                            xycoords="axes fraction", fontsize=8, va="top")
            ax.set_xlim(lo, hi)
            ax.set_xlabel("arithmetic intensity (FP32 FLOP per DRAM byte)")
            ax.set_ylabel("achieved FP32 throughput (GFLOP/s)")
            legend = ax.legend(fontsize=8, title="variant (marker)", loc="lower right")
            for handle in legend.legend_handles:
                handle.set_facecolor("white")
    _class_legend(fig, [c for c in CLASS_NAMES if c in used])
    return fig
