"""The end-of-run summary the workflow prints (workflow/rules/summary.smk): after a run that built `paper/figures/all`,
what was built, where the article and the HTML report are, and the headline numbers read back from the rendered
tables (fastest variant per hardware label, each claim's verdict, the conformance with the shipped references); after
a failed run, which jobs failed and their logs. Pure functions of the files they are given: a file that is missing or
unreadable gives one line saying so, never an exception."""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .prose import chain_speedup_words
from .registry import ARTICLE, OUTPUTS, Output
from .sampler_judgements import fastest_setting

MANIFEST = "paper/figures/all"
REPORT_COMMAND = "snakemake --report report.html"
WIDTH = 118  # longest line printed; longer ones are cut with an ellipsis


@dataclass
class FailedJob:
    rule: str
    wildcards: dict[str, str] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)


def success_summary(root: str | Path, outputs: list[Output] = OUTPUTS) -> list[str]:
    """The lines printed after a successful run of `paper/figures/all` in the workflow folder `root`."""
    root = Path(root)
    lines = ["", "Summary", "======="]
    lines += _built(root, outputs)
    for section in (_fastest, _samplers, _claims, _conformance):
        try:
            lines += section(root)
        except Exception as error:  # a summary never fails the run: it says what it could not read
            lines.append(f"(could not summarise {section.__name__.strip('_')}: {type(error).__name__}: {error})")
    return [_cut(line) for line in lines]


def _built(root: Path, outputs: list[Output]) -> list[str]:
    manifest = root / MANIFEST
    if not manifest.is_file():
        return [f"{MANIFEST} is missing: nothing to summarise of what was built."]
    listed = {line.split(maxsplit=1)[1] for line in manifest.read_text().splitlines()
              if line.strip() and not line.startswith("#") and len(line.split(maxsplit=1)) == 2}
    complete = [o for o in outputs if set(o.files_out().values()) <= listed]
    figures = sum(o.kind == "figure" for o in complete)
    tables = len(complete) - figures
    lines = [f"Built {figures} figures (paper/figures/) and {tables} tables (paper/tables/), listed with their sha256 "
             f"in {MANIFEST}."]
    if len(complete) < len(outputs):
        missing = ", ".join(o.id for o in outputs if o not in complete)
        lines.append(f"Not in the manifest: {missing}.")
    article = root / ARTICLE
    lines.append(f"Article: {ARTICLE}" if article.is_file() else f"Article: {ARTICLE} is missing.")
    lines.append(f"HTML report of every figure and table: {REPORT_COMMAND}")
    return lines


def _table(root: Path, output_id: str) -> pd.DataFrame | None:
    path = root / "paper" / "tables" / f"{output_id}.csv"
    return pd.read_csv(path) if path.is_file() else None


def _fastest(root: Path) -> list[str]:
    frame = _table(root, "tab04_optimization")
    if frame is None:
        return ["paper/tables/tab04_optimization.csv is missing: no fastest variant to report."]
    lines = ["Fastest variant per hardware label (training speed-up over its baseline, with the interval of paired "
             "rounds; tab04):"]
    for gpu, rows in frame.groupby("gpu", sort=False):
        rows = rows.dropna(subset=["train_ms_per_sample"])
        origin = rows["origin"].iloc[0] if len(rows) else ""
        baseline = rows[rows["variant"] == "baseline"]
        if rows.empty or baseline.empty:
            lines.append(f"  {gpu}: no training time of the baseline")
            continue
        base_ms = float(baseline["train_ms_per_sample"].iloc[0])
        # tab04's verdict (reporting.derived.speedup_verdict): a variant is named faster only where its paired
        # rounds say so (or, in a set of separately timed jobs, its step-time quartiles and the baseline's are apart).
        verdicts = rows["train_verdict"] if "train_verdict" in rows else \
            rows["train_speedup_vs_baseline"].gt(1).map({True: "faster", False: ""})
        unpaired = "paired" in rows and (rows["paired"] == "no").all()
        faster = rows[(verdicts == "faster") & (rows["variant"] != "baseline")]
        if faster.empty:
            head = (f"  {gpu} ({origin}): none measurably faster than baseline ({base_ms:.1f} ms/sample"
                    + (", separate jobs)" if unpaired else ")"))
            said = []
            for word in ("within noise", "slower", "at the band's edge", "not measurable under this load",
                         "not measurable here"):
                named = [v for v, verdict in zip(rows["variant"], verdicts) if verdict == word]
                if named:
                    said.append(f"{word}: " + (", ".join(named) if len(", ".join(named)) <= 60
                                               else f"{len(named)} variants (tab04)"))
            if said and len(head + "; " + "; ".join(said)) <= WIDTH:
                lines.append(head + "; " + "; ".join(said))
            else:
                lines.extend([head, *(f"    {text}" for text in said)])
            continue
        best = faster.loc[faster["train_ms_per_sample"].idxmin()]
        speedup = best["train_speedup_vs_baseline"]
        if pd.isna(speedup):
            speedup = base_ms / float(best["train_ms_per_sample"])
        times = f"{best['train_ms_per_sample']:.1f} vs {base_ms:.1f} ms/sample"
        if unpaired:  # separate jobs: no confidence interval to give (tab04's bounds there are the quartiles')
            lines.append(f"  {gpu} ({origin}): {best['variant']}, {speedup:.2f}x over baseline ({times}, separate jobs)")
        else:
            interval = (f" [{best['train_speedup_low']:.2f}-{best['train_speedup_high']:.2f}]"
                        if pd.notna(best.get("train_speedup_low")) else "")
            # The ratio is the paired rounds' median; the times are each variant's own job's, whose quotient may
            # differ from it by a few per cent (other moments, another host): said so, so that nobody divides them.
            lines.append(f"  {gpu} ({origin}): {best['variant']}, {speedup:.2f}x{interval} over baseline "
                         f"(own jobs {times})")
    return lines


def _samplers(root: Path) -> list[str]:
    """tab09's headline per label: the fastest timed sampler setting with its paired speed-up over the T-step chain,
    the settings as fast as it as far as the rounds tell (as many U-Net evaluations, their speed-up intervals
    overlapping its: on a loaded machine which of them comes out ahead changes from run to run), and the fewest steps
    of each sampler judged equivalent to the chain on each study variant's runs (or that none was judged)."""
    frame = _table(root, "tab09_samplers")
    if frame is None or frame.empty:
        return []
    lines = ["Fast samplers against the T-step chain (tab09):"]
    for gpu, rows in frame.groupby("gpu", sort=False):
        chain, fast = rows[rows["sampler"] == "ddpm"], rows[rows["sampler"] != "ddpm"]
        timed = fast.dropna(subset=["seconds_per_volume"])
        if len(chain) and len(timed):
            best, tied = fastest_setting(timed)
            lines.append(_cut(f"  {gpu} ({best['timed_variant']}, {_shape(best['timed_shape'])}): {best['sampler']} "
                              f"{int(best['steps'])} steps {best['seconds_per_volume']:.3g} s/volume, "
                              f"{chain_speedup_words(best, int(chain['steps'].iloc[0])).replace(' faster than', ' over')}"))
            if tied:
                lines.extend(textwrap.wrap(f"as fast within the intervals: {', '.join(tied)}", WIDTH,
                                           initial_indent="    ", subsequent_indent="      "))
        judged = fast[fast["study_variant"].notna() & (fast["study_variant"].astype(str) != "")]
        said = []
        for variant, mine in judged.groupby("study_variant", sort=False):
            fewest = []
            for sampler, group in mine.groupby("sampler", sort=False):
                equal = group[group["outcome"] == "equivalent"]
                if len(equal):
                    fewest.append(f"{sampler} {int(equal['steps'].min())}")
                elif group["outcome"].notna().any() and (group["outcome"] != "").any():
                    fewest.append(f"{sampler} none")
            if fewest:
                said.extend(textwrap.wrap(f"{variant}'s runs, fewest steps equivalent: {', '.join(fewest)}", WIDTH,
                                          initial_indent="    ", subsequent_indent="      "))
        if said:
            lines.extend(said)
        elif len(judged):
            lines.append("    study runs: none judged (fewer paired seeds than the quality claim asks)")
    return lines


def _shape(text: str) -> str:
    """'128x128x128' as 128^3; another shape as it is."""
    sides = str(text).split("x")
    return f"{sides[0]}^3" if len(sides) == 3 and len(set(sides)) == 1 else str(text)


def _claims(root: Path) -> list[str]:
    frame = _table(root, "tab05_claims")
    if frame is None:
        return ["paper/tables/tab05_claims.csv is missing: no verdicts on the paper's claims to report."]
    lines = ["The paper's claims (tab05), verdict per hardware label:"]
    for claim, rows in frame.groupby("claim", sort=False):
        verdicts = "; ".join(f"{row.gpu}: {row.verdict}" for row in rows.itertuples())
        room = max(WIDTH - len(verdicts) - 4, 24)  # the verdicts are what matters: cut the claim's text instead
        claim = claim if len(claim) <= room else claim[: room - 3] + "..."
        lines.append(f"  {claim}: {verdicts}")
    return lines


def _conformance(root: Path) -> list[str]:
    frame = _table(root, "tab08_conformance")
    if frame is None:
        return []  # tab08 exists only where a shipped reference is configured; nothing to say otherwise
    lines = ["Conformance with the shipped reference sets (tab08):"]
    for gpu, rows in frame.groupby("gpu", sort=False):
        if len(rows) == 1 and str(rows["metric"].iloc[0]) == "every metric":
            reason = rows["reasons"].iloc[0]
            lines.append(f"  {gpu}: {rows['verdict'].iloc[0]}" + (f" ({reason})" if isinstance(reason, str) else ""))
            continue
        counts = Counter(rows["verdict"].astype(str))
        lines.append(f"  {gpu}: {len(rows)} metrics: " + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()))
    return lines


def failure_summary(failed: list[FailedJob]) -> list[str]:
    """The lines printed after a failed run: each failed job with its log (Snakemake names its own log next)."""
    lines = ["", "Summary: the run stopped with errors"]
    if not failed:
        lines.append("No failed job was recorded (the run may have stopped before any job ran).")
    for job in failed:
        wildcards = ", ".join(f"{key}={value}" for key, value in job.wildcards.items())
        name = f"{job.rule} ({wildcards})" if wildcards else job.rule
        logs = ", ".join(job.logs) if job.logs else "no log file"
        lines.append(f"  failed: {name}; log: {logs}")
    lines.append("Fix the cause, then run the same command again: finished jobs are kept.")
    return lines


_ERROR = re.compile(r"^Error in rule (\S+):$")
_LOG = re.compile(r"^\s+log: (.*?)(?: \(check log file\(s\) for error details\))?$")
_WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")


def failed_jobs_from_log(text: str) -> list[FailedJob]:
    """The failed jobs named in Snakemake's main log (its `Error in rule X:` blocks), in order, once each."""
    jobs: list[FailedJob] = []
    current = None
    for line in text.splitlines():
        if match := _ERROR.match(line):
            current = FailedJob(match.group(1))
            jobs.append(current)
        elif current is not None and (match := _LOG.match(line)):
            current.logs = [path.strip() for path in match.group(1).split(",") if path.strip()]
        elif current is not None and (match := _WILDCARDS.match(line)):
            current.wildcards = dict(item.split("=", 1) for item in match.group(1).split(", ") if "=" in item)
        elif current is not None and line and not line.startswith(" "):
            current = None
    unique: dict[tuple, FailedJob] = {}
    for job in jobs:
        unique.setdefault((job.rule, tuple(job.logs)), job)
    return list(unique.values())


def _cut(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."
