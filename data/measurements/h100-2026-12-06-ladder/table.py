"""The sitting's paired ratios, judged by the workflow's own code (measurement.verdicts.judge) from each group's rounds:
the label's comparison.json needs all five groups, and the first ran out of memory. Run from the repository root:
    PYTHONPATH=workflow/scripts python3 data/measurements/h100-2026-12-06-ladder/table.py [RECORD]
RECORD: a record folder holding ladder/comparison_groups (this one where not given); every group found there, each
variant judged from the rounds of its pack (medddpm.comparison times a group in packs where the device holds fewer)."""

import sys
from pathlib import Path

from measurement.comparison_groups import group_pairs
from measurement.verdicts import judge_in_group, pack_of, read_group
from medddpm.settings import ComparisonSettings

HERE = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent) / "ladder" / "comparison_groups"
FOLLOWS = {"frontier_lean_edges": "frontier_gemm_dense_embedding"}  # the one pairing beside the references'


def cell(judged: dict) -> str:
    interval = f"[{judged['low']:.2f}-{judged['high']:.2f}]" if judged["low"] is not None else "[no interval]"
    verdict = "" if judged["verdict"] == "faster" else f", {judged['verdict']}"
    return f"{judged['speedup']:.2f} {interval}{verdict}"


def main() -> None:
    rows = []
    for number in sorted(int(path.stem) for path in HERE.glob("*.json")):
        record, rounds = read_group(HERE / f"{number}.json", HERE / f"{number}.csv")
        settings = ComparisonSettings.from_params(record["settings"]["comparison"])
        switches = {name: {"switches": side["switches"], "switches_effective": side["switches_effective"]}
                    for name, side in record["sides"].items()}
        for phase in ("train", "sample"):
            mine = rounds[rounds["phase"] == phase]
            # Each variant's median from its pack's rounds (a group timed in packs where the device holds fewer at
            # once), the references' from the first pack's; its comparisons from the same rounds (judge_in_group).
            medians = {variant: mine[(mine["pack"] == pack_of(record, variant)) & (mine["variant"] == variant)]
                       ["step_ms"].median() for variant in record["variants"]}
            pairs = group_pairs(record["variants"], settings.references, first=False)
            pairs += [(reference, variant) for variant, reference in FOLLOWS.items() if variant in record["variants"]]
            judged = {(r, v): judge_in_group(r, v, record, mine, settings, switches) for r, v in pairs}
            for variant in record["variants"]:
                if variant in settings.references:
                    continue
                rows.append((number, phase, variant, medians[variant],
                             cell(judged[("baseline", variant)]), cell(judged[("tf32", variant)]),
                             cell(judged[(FOLLOWS[variant], variant)]) if variant in FOLLOWS else ""))
            rows.append((number, phase, "baseline / tf32 in this group", medians["baseline"], "",
                         f"{medians['tf32']:.1f} ms", ""))
    for phase, unit in (("train", "ms per training sample"), ("sample", "ms per sampling step")):
        print(f"\n{phase}: {unit}\n")
        print("| group | rung | rounds' median | x baseline | x tf32 | x the rung before |")
        print("|---|---|---:|---|---|---|")
        for number, row_phase, variant, median, over_baseline, over_tf32, over_before in rows:
            if row_phase == phase:
                print(f"| {number} | {variant} | {median:.1f} | {over_baseline} | {over_tf32} | {over_before} |")


if __name__ == "__main__":
    main()
