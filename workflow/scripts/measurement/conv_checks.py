"""What the preflight of a timed campaign checks, and what a timed job asks of its record (profiling.preflight
measures it; the `preflight` rule writes results/<workload>/<label>/preflight.json).

The preflight checks conv3d in every combination of precision (fp32, TF32, bf16 or fp16 autocast), layout
(contiguous, channels-last) and cuDNN's autotuner that a variant can switch on, whether a variant uses it now or not:
a variant added later finds its combination checked. It fails when a combination that the configured variants use
fails; a timed job refuses a record made on another stack than its own, or one whose check of its own combination
failed. No torch here: the workflow reads it while it builds the DAG.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from jobio.errors import ExpectedError

from .stack import describe, stack_problem

# Largest error allowed, relative to the RMS of the float64 result at the sampled points. TF32 and bf16 round every
# input to 10 and 7 stored mantissa bits (relative steps of 2^-11 and 2^-8) and bf16 the result too: over the 27 x C
# products of one output the errors add up as a random walk, to a few steps at the largest of thousands of points.
# A kernel returning wrong results misses by the size of the output itself.
TOLERANCE = {"fp32": 1e-4, "tf32": 2e-2, "fp16": 2e-2, "bf16": 8e-2}
PRECISIONS = tuple(TOLERANCE)
NOT_MEASURABLE = "not measurable here"


@dataclass(frozen=True)
class Check:
    """One combination of precision, layout and cuDNN's autotuner, and the configured variants that use it."""

    precision: str  # fp32 | tf32 | bf16 | fp16
    channels_last: bool
    cudnn_benchmark: bool
    variants: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, bool, bool]:
        return self.precision, self.channels_last, self.cudnn_benchmark

    @property
    def name(self) -> str:
        layout = "channels-last" if self.channels_last else "contiguous"
        return f"{self.precision} conv3d ({layout}{', cudnn.benchmark' if self.cudnn_benchmark else ''})"


def precision_of(switches: dict) -> str:
    """The arithmetic a variant's convolutions run in: its autocast dtype, else TF32 or fp32 (cudnn_tf32)."""
    if switches.get("autocast") == "bfloat16":
        return "bf16"
    if switches.get("autocast") == "float16":
        return "fp16"
    return "tf32" if switches.get("cudnn_tf32") else "fp32"


def key_of(switches: dict) -> tuple[str, bool, bool]:
    """The combination a variant's convolutions run in (its switches, defaults where it leaves one out)."""
    return precision_of(switches), bool(switches.get("channels_last")), bool(switches.get("cudnn_benchmark"))


def checks_for(variants: dict[str, dict]) -> list[Check]:
    """Every combination, each with the variants of `variants` (name -> switches) that use it."""
    users: dict[tuple, list[str]] = {}
    for name, switches in variants.items():
        users.setdefault(key_of(switches), []).append(name)
    return [Check(*key, tuple(users.get(key, ()))) for key in product(PRECISIONS, (False, True), (False, True))]


def problem_line(record: dict) -> str | None:
    """The one line of a failed preflight (None: it passed): the checks of combinations the configured variants
    use that failed, and the stack they failed on."""
    failed = [check for check in record["checks"] if check["passed"] is False and check["variants"]]
    if not failed:
        return None
    variants = sorted({variant for check in failed for variant in check["variants"]})
    return (f"preflight on {describe(record['stack'])}: {'; '.join(check['state'] for check in failed)}; this stack "
            f"would time and draw wrong or fallback convolutions; fix: {_fix(variants)}")


def _fix(variants) -> str:
    """Another torch (with its cuDNN), or the variants left out (not the baseline: every comparison needs it)."""
    fix = ("install a torch release whose cuDNN has not this fault (pip install torch==<another release>; "
           "torch.backends.cudnn.version() names the cuDNN)")
    optional = [variant for variant in variants if variant != "baseline"]
    return fix + (f", or leave {', '.join(optional)} out of run_variants and quality_study.variants"
                  if optional else "")


class PreflightRefusal(ExpectedError):
    """A timed job whose preflight record does not hold for it; the message names the record, the stack, the fix."""


def check_preflight(path: str | Path, here: dict, variant: str, switches: dict) -> None:
    """Raise PreflightRefusal unless the preflight record in `path` was made on the stack of the provenance record
    `here` and its check of the combination of `variant` (its `switches`) did not fail."""
    record = json.loads(Path(path).read_text())
    problem = stack_problem(record["stack"], here, path)
    if problem:
        raise PreflightRefusal(problem + " (every timed job of the label runs again: its results would otherwise "
                                         "mix two stacks)")
    key = key_of(switches)
    check = next((c for c in record["checks"] if (c["precision"], c["channels_last"], c["cudnn_benchmark"]) == key),
                 None)
    if check is None:
        name = Check(*key).name
        raise PreflightRefusal(f"{path} holds no check of {name}, which {variant} runs in (a record of an older "
                               f"workflow); fix: your snakemake command with --forcerun {path} added before any --")
    if check["passed"] is False:
        raise PreflightRefusal(f"preflight on {describe(record['stack'])}: {check['state']} ({path}); {variant} runs "
                               f"in it; fix: {_fix([variant])}")
