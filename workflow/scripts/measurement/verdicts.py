"""A label's paired comparison put together from its groups' rounds (medddpm.comparison times each group in a job of
its own): each comparison's ratio, interval and verdict from the rounds of the group that decided it, judged against
that group's own conditions; the label's comparison.json and comparison_rounds.csv. No torch here: the job that
puts the groups together is not a GPU job.

A group's files (medddpm.comparison.time_group): <n>.json (its variants, their switches and process ids, the
settings, the machine's conditions before and after the group, each phase's rounds, why they stopped and seconds, and
its packs: the variants that the device held together, each pack timed in rounds of its own) and <n>.csv (every timed
step: group, pack, phase, round, position in its round, variant, step_ms, other_load_cores). A group's files of
before packs (no `pack` column) are one pack."""

from __future__ import annotations

import json
import statistics
from datetime import datetime
from pathlib import Path

import pandas as pd

from jobio.errors import ExpectedError, write_json, writing
from .comparison_groups import combined_phase, group_pairs

from . import pairing

NO_EFFECT = "not measurable here"


def judge(reference: str, variant: str, rounds: pd.DataFrame, settings, switches: dict[str, dict],
          changed: list[str]) -> dict:
    """One comparison's ratio, interval and verdict from its rounds (a frame of round, variant, step_ms,
    other_load_cores). `switches`: each variant's {"switches": ..., "switches_effective": ...}; `changed`: what
    changed on the machine while the rounds ran (measurement.conditions.changes)."""
    by_round = rounds.pivot(index="round", columns="variant", values="step_ms")
    ratio = pairing.paired_ratio(list(by_round[reference]), list(by_round[variant]), settings.confidence)
    verdict, why = pairing.verdict(ratio, settings.band, settings.precision), None
    load = rounds.pivot(index="round", columns="variant", values="other_load_cores")
    difference = (load[reference] - load[variant]).dropna()
    load_difference = float(statistics.median(difference)) if len(difference) else None
    drift = pairing.halves_disagree(list(by_round[reference]), list(by_round[variant]), settings.confidence)
    reference_switches, variant_switches = switches[reference]["switches"], switches[variant]["switches"]
    effective = switches[variant]["switches_effective"]
    differing = [name for name, value in variant_switches.items() if reference_switches.get(name) != value]
    if differing and not any(effective.get(name, True) for name in differing):
        verdict, why = NO_EFFECT, (f"every switch that sets {variant} apart from {reference} "
                                   f"({', '.join(differing)}) has no effect on this device")
    elif changed:
        verdict, why = pairing.UNMEASURABLE, "; ".join(changed)
    elif drift:
        verdict, why = pairing.UNMEASURABLE, ("the first and the second half of the rounds give intervals that do "
                                              "not overlap")
    elif load_difference is not None and abs(load_difference) > settings.load_difference_cores:
        verdict, why = pairing.UNMEASURABLE, (f"the two sides ran under different load: other processes used "
                                              f"{load_difference:+.2f} cores more during {reference}'s steps")
    elif verdict in pairing.UNDECIDED:
        why = pairing.undecided_reason(ratio, settings.confidence, settings.band, settings.precision)
    return {"reference": reference, "variant": variant, "rounds": ratio.rounds, "speedup": ratio.speedup,
            "low": ratio.low, "high": ratio.high, "coverage": ratio.coverage,
            "half_width": None if ratio.low is None else ratio.half_width, "halves_disagree": drift,
            "load_difference_cores": load_difference, "verdict": verdict, "why": why}


def read_group(json_path: Path, csv_path: Path) -> tuple[dict, pd.DataFrame]:
    """One group's record and rounds, refused in one line where the job that wrote them did not finish them."""
    try:
        record = json.loads(Path(json_path).read_text())
        rounds = pd.read_csv(csv_path)
    except (OSError, ValueError) as error:
        raise ExpectedError(f"{json_path}: not a comparison group's record ({type(error).__name__}: {error}); fix: "
                            "delete it and run the workflow again") from None
    if "pack" not in rounds:
        rounds.insert(1, "pack", 0)
    sides = record.get("sides", {})
    record.setdefault("packs", [{"variants": record.get("variants"),
                                 "processes": {name: side["process"] for name, side in sides.items()}}])
    return record, rounds


def _at(conditions: dict) -> datetime:
    """When a group's conditions were taken (measurement.conditions writes ISO 8601 in UTC)."""
    return datetime.fromisoformat(conditions["at"])


def pack_of(record: dict, variant: str) -> int:
    """The pack of a group whose rounds decide the variant's comparisons (the first that timed it: a reference
    against another reference is decided in the first pack, which holds every reference)."""
    return next(index for index, pack in enumerate(record["packs"]) if variant in pack["variants"])


def judge_in_group(reference: str, variant: str, record: dict, rounds: pd.DataFrame, settings,
                   switches: dict[str, dict]) -> dict:
    """One comparison of a group (`record`, `rounds`: that group's record and one phase's rounds), judged from the
    rounds of the pack that decides it against the group's own conditions; with that pack's index."""
    pack = pack_of(record, variant)
    return {**judge(reference, variant, rounds[rounds["pack"] == pack], settings, switches,
                    record["conditions"]["changes"]), "pack": pack}


def merge_groups(files: list[tuple[Path, Path]], expected: list[list[str]], settings, out_json: Path,
                 out_rounds: Path) -> None:
    """The label's comparison.json and comparison_rounds.csv from its groups' files, in group order. `expected`: the
    groups the configuration plans (measurement.comparison_groups.groups); a group file timed for other variants (a
    configuration changed under a kept file) is refused in one line instead of judged."""
    records, tables = [], []
    for number, (json_path, csv_path) in enumerate(files):
        record, rounds = read_group(json_path, csv_path)
        if record.get("group") != number or record.get("variants") != expected[number]:
            raise ExpectedError(f"{json_path}: timed group {record.get('group')} of {record.get('variants')}, but the "
                                f"configuration plans group {number} of {expected[number]}; fix: delete it and run the "
                                "workflow again")
        records.append(record)
        tables.append(rounds)
    rounds = pd.concat(tables, ignore_index=True)
    switches = {name: {"switches": side["switches"], "switches_effective": side["switches_effective"]}
                for record in records for name, side in record["sides"].items()}
    processes: dict[str, list[int]] = {}
    for record in records:
        for pack in record["packs"]:
            for name, process in pack["processes"].items():
                processes.setdefault(name, []).append(process)
    phases = {}
    for phase in settings.phases:
        mine = rounds[rounds["phase"] == phase]
        groups = [{"variants": record["variants"], **record["phases"][phase]} for record in records]
        comparisons = [{**judge_in_group(reference, variant, record, mine[mine["group"] == number], settings,
                                         switches), "group": number}
                       for number, record in enumerate(records)
                       for reference, variant in group_pairs(record["variants"], settings.references, number == 0)]
        phases[phase] = {
            "unit": records[0]["phases"][phase]["unit"], "groups": groups, "comparisons": comparisons,
            **combined_phase(groups),
            "median_ms": mine.groupby("variant")["step_ms"].median().to_dict(),
            "other_load_cores": mine.groupby("variant")["other_load_cores"].median().to_dict()}
    changes = [f"group {number + 1}: {change}" if len(records) > 1 else change
               for number, record in enumerate(records) for change in record["conditions"]["changes"]]
    with writing(out_rounds):
        rounds.to_csv(out_rounds, index=False, float_format="%.6g")
    write_json(out_json, {
        "provenance": records[0]["provenance"],
        "variants": {name: {**switches[name], "processes": processes[name]} for name in switches},
        "settings": records[0]["settings"],
        # The machine before the first group that ran and after the last: the scheduler runs the groups in any order
        # (an H100 sitting ran them as 3, 5, 2, 4, 1), so group order is not time order.
        "conditions": {"before": min((record["conditions"]["before"] for record in records), key=_at),
                       "after": max((record["conditions"]["after"] for record in records), key=_at),
                       "changes": changes},
        # Each group's own machine and GPU: on a cluster each group's job may run on another node (the top-level
        # provenance is the first group's).
        "groups": [{"variants": record["variants"], "packs": [pack["variants"] for pack in record["packs"]],
                    "conditions": record["conditions"], "provenance": record["provenance"]} for record in records],
        "phases": phases,
    })

