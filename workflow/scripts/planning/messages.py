"""The words of a job's line (its rule's `message:`), written when the rule is defined rather than from its params:
Snakemake prints a params list as space-separated words and a dict as Python, and a param added only for its words
would rerun the job's existing results."""

from __future__ import annotations


def listed(words) -> str:
    """'a', 'a and b', 'a, b and c'."""
    words = [str(word) for word in words]
    return " and ".join(words) if len(words) < 3 else f"{', '.join(words[:-1])} and {words[-1]}"


def sampler_words(samplers: dict) -> str:
    """`fast_sampling.samplers` as a reader says it, samplers of the same step counts together: 'ddim and
    dpm_solver_pp_2m at 10, 25 and 50 steps; deis_ipndm_as_shipped at 10 steps'."""
    by_counts: dict[tuple, list[str]] = {}
    for name, counts in samplers.items():
        by_counts.setdefault(tuple(counts), []).append(name)
    return "; ".join(f"{listed(names)} at {listed(counts)} step{'' if counts == (1,) else 's'}"
                     for counts, names in by_counts.items())
