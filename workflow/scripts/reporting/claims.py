"""The paper's abstract claims against what was measured (tab05): one verdict per claim and hardware label.

Published values come only from data/paper_claims.yaml and go only into the "published" columns. A verdict is one of
five kinds: the measured value reproduces the claim (within the stated factor), goes the same way with another
magnitude, contradicts it, leaves it undecided (inconclusive: the quality claim's equivalence test, whose interval
straddles its margin), or cannot be measured here (the missing input or the switch without effect is named).

The evidence is the paper's: every verdict is over `baseline` and the paper's optimized variants (the claims file's
`optimized_variants`), never over a variant beyond the paper; the claims about Nsight Compute metrics read Nsight
Compute profiles only, and the kernel-time shares the Nsight profiles where a run has one, the measured value saying
so where torch.profiler stood in. Each rule's text (the table's note) names the variants it is over.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from . import equivalence
from .derived import CONV_CLASSES, class_totals, differing_switches, exercised, ncu_headline
from .results import Results, preferred_tool, variant_order

REPRODUCED = "reproduced"
SAME_DIRECTION = "same direction, other magnitude"
CONTRADICTED = "contradicted"
# The quality claim only: its equivalence test could not decide (an interval straddling the margin).
INCONCLUSIVE = "inconclusive"
NOT_MEASURABLE = "not measurable here"
VERDICTS = (REPRODUCED, SAME_DIRECTION, CONTRADICTED, INCONCLUSIVE, NOT_MEASURABLE)


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
    """The reason goes where the measured value would be, so that the verdict column holds one of the verdicts alone."""
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


def seed_list(seeds) -> str:
    """'0', '0-4' (three or more consecutive seeds), '0, 2, 5'."""
    seeds = sorted(int(s) for s in seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def seeds_text(seeds) -> str:
    """'seed 0', 'seeds 0-4', 'seeds 0, 2, 5'."""
    seeds = list(seeds)
    return f"seed{'s' if len(seeds) != 1 else ''} {seed_list(seeds)}"


@dataclass(frozen=True)
class Rerun:
    """The baseline's seed trained twice in one job (run.json's `rerun` block): what is left of run-to-run noise."""

    seed: int
    weights_identical: bool
    max_abs_weight_difference: float
    distance: float  # the rerun's distance to the real images (the claim's `distance`)
    difference: float  # the rerun's distance minus the first training's
    ssim: float  # the rerun's 3D SSIM against the real images

    @property
    def weights(self) -> str:
        return ("weights bit-identical" if self.weights_identical else
                f"weights differ (largest difference {self.max_abs_weight_difference:.2g})")

    def text(self, column: str, decimals: int) -> str:
        return (f"rerun of seed {self.seed}: {self.weights}, {column} {self.difference:+.{decimals}f} against the "
                "first training")


def study_rerun(study: pd.DataFrame, column: str) -> Rerun | None:
    """The baseline's rerun (collected as the `rerun_*` columns of the seed that carries it), or None."""
    if len(study) == 0 or "rerun_seed" not in study:
        return None
    rows = study[(study["variant"] == "baseline") & study["rerun_seed"].notna()]
    if rows.empty or pd.isna(rows[f"rerun_{column}"].iloc[0]):
        return None
    row = rows.iloc[0]
    distance = float(row[f"rerun_{column}"])
    return Rerun(int(row["rerun_seed"]), bool(row["rerun_weights_identical"]),
                 float(row["rerun_max_abs_weight_difference"]), distance, distance - float(row[column]),
                 float(row["rerun_ssim_vs_real"]))


@dataclass(frozen=True)
class QualityJudgement:
    """The quality claim on one hardware label (quality_judgement): every variant's paired comparison with the
    baseline, the margin, the rerun, the verdict, and (`reason`) why it is not measurable where it is not: `short`
    where that holds for every variant (no margin, samples that are not brain-like, ...), else each variant says its
    own (shown)."""

    column: str
    verdict: str
    reason: str | None  # the not-measurable reason as tab05 says it; None where judged
    short: str | None  # a reason that holds for every variant, in a few words (tab06, fig09)
    spread: float | None  # the baseline's seed-to-seed SD of `column`
    margin: float | None
    baseline_seeds: tuple[int, ...] = ()
    comparisons: dict[str, equivalence.Comparison] = field(default_factory=dict)  # every variant but the baseline
    judged: tuple[str, ...] = ()  # the paper's variants of the study: the evidence
    idle: tuple[str, ...] = ()  # variants whose distinguishing switches had no effect on the device
    rerun: Rerun | None = None
    alpha: float = 0.05  # TOST's level: the intervals are two-sided 1 - 2 alpha
    min_seeds: int = 3

    @property
    def interval_name(self) -> str:
        """'90 %' (alpha 0.05)."""
        return f"{100 * (1 - 2 * self.alpha):.3g} %"

    def shown(self, variant: str) -> str:
        """A variant's outcome as tab06 and fig09 write it: the test's, or why it was not judged."""
        if variant == "baseline":
            return "reference"
        found = self.comparisons.get(variant)
        if self.short is not None:
            return f"not measurable here ({self.short})"
        if variant in self.idle:
            return "not measurable here (its switches had no effect on this device)"
        if found is None or found.outcome is None:
            count = found.n if found else 0
            return f"not measurable here ({count} paired seed{'s' * (count != 1)}, fewer than {self.min_seeds})"
        return found.outcome


def _stop(column: str, reason: str, short: str | None, **known) -> QualityJudgement:
    return QualityJudgement(column, NOT_MEASURABLE, reason, short, **{"spread": None, "margin": None} | known)


def _not_brain_like(claim: dict, study: pd.DataFrame) -> str | None:
    """Why the baseline's samples are not brain-like (3D SSIM against the held-out real images under
    `trained_ssim_min` for some seed, or missing), or None where they are."""
    base = study[study["variant"] == "baseline"].sort_values("seed")
    ssim = base["ssim_vs_real"].astype(float)
    if not ssim.isna().any() and float(ssim.min()) >= claim["trained_ssim_min"]:
        return None
    return (f"the baseline's samples are not brain-like: 3D SSIM against the held-out real images "
            f"{' / '.join(f'{v:.2g}' for v in ssim)} (seeds {' / '.join(map(str, base['seed']))}) < "
            f"{claim['trained_ssim_min']} after {int(base['optimizer_steps'].iloc[0])} optimizer steps at "
            f"{base['volume_shape'].iloc[0]}")


def quality_judgement(claim: dict, gpu: str, study: pd.DataFrame, optimized: list[str]) -> QualityJudgement:
    """The quality claim from the quality study by its rule (data/paper_claims.yaml, statistics in
    reporting/equivalence.py). Not measurable, in this order: without a study, without one of the paper's variants
    or the baseline in it, where a judged variant's switches had no effect on the device, while the baseline's
    samples are not brain-like (3D SSIM against the held-out real images under `trained_ssim_min` for some seed; the
    first thing to fix, whatever the seeds), with fewer than `min_seeds` seeds paired with the baseline for a judged
    variant, or with a zero margin (the baseline's seeds agree exactly). Else reproduced when every judged variant is
    equivalent, contradicted when one is different, inconclusive otherwise. A study without the paper's variants
    (the baseline and a rung of one's own) is not measurable for the claim, and its variants still get their outcomes
    by the claim's rule (shown, quality_verdict's measured text) unless the study itself allows none."""
    column = claim["distance"]
    if len(study) == 0:
        return _stop(column, f"no quality study on {gpu}", "no quality study", alpha=claim["alpha"],
                     min_seeds=claim["min_seeds"])
    spread = equivalence.seed_spread(study, column)
    margin = None if spread is None else claim["margin_factor"] * spread
    variants = variant_order(study["variant"])
    first = study.sort_values("seed", kind="stable").drop_duplicates("variant")  # switches: one run per variant
    known = {"spread": spread, "margin": margin, "rerun": study_rerun(study, column), "alpha": claim["alpha"],
             "min_seeds": claim["min_seeds"],
             "idle": tuple(v for v in variants if v != "baseline" and not exercised(first, gpu, v)),
             "baseline_seeds": tuple(int(s) for s in equivalence.by_seed(study, "baseline", column).index),
             "comparisons": {v: equivalence.compare(study, v, column, margin, claim["alpha"], claim["min_seeds"])
                             for v in variants if v != "baseline"},
             "judged": tuple(v for v in variants if v in optimized)}
    if not known["judged"]:
        # The claim is about the paper's variants. A study of other variants against the baseline (a rung of one's
        # own) still gets each variant's outcome by the claim's rule, where the study itself allows one.
        short = ("no baseline" if "baseline" not in variants else
                 "the baseline's samples are not brain-like" if _not_brain_like(claim, study) else
                 None if margin else "the baseline's seeds agree exactly: no margin")
        return _stop(column, f"no optimized variant ({', '.join(optimized)}) in the quality study on {gpu}", short,
                     **known)
    if "baseline" not in variants:
        return _stop(column, f"no baseline in the quality study on {gpu}", "no baseline", **known)
    idle = _unexercised({"runs": first}, gpu, known["judged"])
    if idle:
        return _stop(column, idle[0], None, **known)
    not_brain_like = _not_brain_like(claim, study)
    if not_brain_like:
        return _stop(column, not_brain_like, "the baseline's samples are not brain-like", **known)
    few = [known["comparisons"][v] for v in known["judged"] if known["comparisons"][v].n < claim["min_seeds"]]
    if few:
        listed = ", ".join(f"{c.variant} {c.n}" + (f" ({seeds_text(c.seeds)})" if c.n else "") for c in few)
        return _stop(column, f"fewer than {claim['min_seeds']} seeds paired with the baseline on {gpu}: {listed}; "
                     "every variant trains every seed of quality_study.seeds", None, **known)
    if not margin:
        values = equivalence.by_seed(study, "baseline", column)
        return _stop(column, f"the baseline's seeds agree exactly on {gpu} ({column} {_fmt(values.iloc[0])} at "
                     f"{seeds_text(values.index)}): no seed-to-seed spread, so no margin to judge by",
                     "the baseline's seeds agree exactly: no margin", **known)
    outcomes = {known["comparisons"][v].outcome for v in known["judged"]}
    verdict = (REPRODUCED if outcomes == {equivalence.EQUIVALENT} else
               CONTRADICTED if equivalence.DIFFERENT in outcomes else INCONCLUSIVE)
    return QualityJudgement(column, verdict, None, None, **known)


def decimals(margin: float | None) -> int:
    """Decimal places that give the margin three significant digits: the differences and intervals of a measured
    text share them, so that their ends line up with the margin's."""
    if not margin or not math.isfinite(margin):
        return 3
    return max(0, 2 - math.floor(math.log10(abs(margin))))


def _compared(comparison: equivalence.Comparison, seeds: int, places: int) -> str:
    """'tf32 -0.0021 [-0.0093, +0.0051] equivalent' (the paired seeds named where they are not all the baseline's)."""
    count = "" if comparison.n == seeds else f" ({comparison.n} seeds)"
    if comparison.outcome is None:
        return f"{comparison.variant}{count} {comparison.mean:+.{places}f}: not judged"
    return (f"{comparison.variant}{count} {comparison.mean:+.{places}f} [{comparison.low:+.{places}f}, "
            f"{comparison.high:+.{places}f}] {comparison.outcome}")


def quality_verdict(claim: dict, gpu: str, study: pd.DataFrame, optimized: list[str]) -> tuple[str, str]:
    """(measured text, verdict) of the quality claim (quality_judgement). The measured text gives, per variant, the
    mean paired difference and its 90 % interval, the margin and the outcome; variants beyond the paper are reported
    apart, never judged; and the baseline's rerun where the study has one."""
    judgement = quality_judgement(claim, gpu, study, optimized)
    beyond_only = judgement.reason is not None and not judgement.judged and judgement.short is None
    if judgement.reason is not None and not beyond_only:
        return _not_measurable(judgement.reason)
    seeds, places = len(judgement.baseline_seeds), decimals(judgement.margin)
    method = (f"{judgement.column}, variant - baseline paired by seed, mean [{judgement.interval_name} interval] "
              f"against the margin +-{judgement.margin:.{places}f} ({_fmt(claim['margin_factor'])} x the SD of the "
              f"baseline's {seeds} seeds)")
    beyond = "; ".join(_compared(c, seeds, places) for v, c in judgement.comparisons.items()
                       if v not in judgement.judged)
    if beyond_only:  # not measurable, and the variants the study has are still compared by the claim's rule
        text = f"{judgement.reason}; beyond the paper, {method}: {beyond}"
    else:
        judged = "; ".join(_compared(judgement.comparisons[v], seeds, places) for v in judgement.judged)
        text = f"{method}: {judged}" + (f"; beyond the paper: {beyond}" if beyond else "")
    if judgement.rerun is not None:
        text += f"; {judgement.rerun.text(judgement.column, places)}"
    return text, judgement.verdict


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
