"""Which variants' processes a label's paired comparison runs together, and which comparisons each group decides
(medddpm.comparison times them; measurement.verdicts judges them). Decided when the workflow is planned: each group is
a job of its own (workflow/rules/compare.smk), so that a run cut short keeps the groups it finished."""

from __future__ import annotations

from jobio.errors import ExpectedError


def pairs(variants: list[str], references: tuple[str, ...]) -> list[tuple[str, str]]:
    """(reference, variant) of every comparison: each configured reference present against every other variant."""
    return [(reference, variant) for reference in references if reference in variants
            for variant in variants if variant != reference]


def groups(variants: list[str], references: tuple[str, ...], at_once: int | None) -> list[list[str]]:
    """The variants whose processes run together, group after group: every reference present in each group, the
    other variants in their order, split into groups as even as `at_once` processes allow (None: one group).

    Each process keeps its caching allocator's GPU memory through the rounds (releasing it between turns would put
    cudaMalloc calls inside the timed steps), so the processes alive together must fit on the GPU: the seventeen
    rungs of config/frontier.yaml hold some 170 GiB of peaks at 128^3, more than an H200's memory. A group that does
    not fit on the GPU that times it is timed in packs (medddpm.comparison). A reference timed in
    several groups is paired with each group's variants in that group's rounds."""
    present = [reference for reference in references if reference in variants]
    others = [variant for variant in variants if variant not in present]
    if at_once is None or len(variants) <= at_once:
        return [list(variants)]
    room = at_once - len(present)
    if room < 1:
        raise ExpectedError(f"comparison: processes_at_once {at_once} leaves no room beside the {len(present)} "
                            f"reference(s) {present}; fix: set it above {len(present)}, or null")
    count = -(-len(others) // room)
    size, extra = divmod(len(others), count)
    chunks, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        chunks.append(others[start:end])
        start = end
    return [present + chunk for chunk in chunks]


def group_pairs(members: list[str], references: tuple[str, ...], first: bool) -> list[tuple[str, str]]:
    """The comparisons a group's rounds decide: its references against its other variants, and the references
    against each other in the first group only (each comparison once in the job's record)."""
    return [(reference, variant) for reference, variant in pairs(members, references)
            if first or variant not in references]


def combined_phase(parts: list[dict]) -> dict:
    """One phase's record over several sets of rounds (a group's packs, a label's groups), each with its rounds, why
    they stopped and seconds: one set's own numbers; several: the most rounds any ran, every reason, the whole time."""
    return {"rounds": max(part["rounds"] for part in parts),
            "stopped": ", ".join(dict.fromkeys(part["stopped"] for part in parts)),
            "seconds": sum(part["seconds"] for part in parts)}
