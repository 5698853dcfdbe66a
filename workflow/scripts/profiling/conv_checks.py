"""What the preflight of a timed campaign checks and what its record says (profiling.preflight measures it): the
precisions and layouts of the variants, the software stack a record holds for, and the one line of a failure. No
torch here: the workflow reads it while it builds the DAG."""

from __future__ import annotations

from dataclasses import dataclass

from measurement.stack import describe

# Largest error allowed, relative to the RMS of the float64 result at the sampled points. TF32 and bf16 round every
# input to 10 and 7 stored mantissa bits (relative steps of 2^-11 and 2^-8) and bf16 the result too: over the 27 x C
# products of one output the errors add up as a random walk, to a few steps at the largest of thousands of points.
# A kernel returning wrong results misses by the size of the output itself.
TOLERANCE = {"fp32": 1e-4, "tf32": 2e-2, "fp16": 2e-2, "bf16": 8e-2}
NOT_MEASURABLE = "not measurable here"


@dataclass(frozen=True)
class Check:
    """One precision and layout that some variants use, and those variants."""

    precision: str  # fp32 | tf32 | bf16 | fp16
    channels_last: bool
    cudnn_benchmark: bool
    variants: tuple[str, ...]

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


def checks_of(variants: dict[str, dict]) -> list[Check]:
    """The distinct (precision, layout, autotuner) of `variants` (name -> switches), each with its variants."""
    found: dict[tuple, list[str]] = {}
    for name, switches in variants.items():
        key = (precision_of(switches), bool(switches.get("channels_last")), bool(switches.get("cudnn_benchmark")))
        found.setdefault(key, []).append(name)
    return [Check(*key, tuple(names)) for key, names in sorted(found.items())]


def problem_line(record: dict) -> str | None:
    """The one line of a failed preflight (None: it passed): what failed, and the stack it failed on."""
    failed = [check["state"] for check in record["checks"] if check["passed"] is False]
    if not failed:
        return None
    variants = sorted({variant for check in record["checks"] if check["passed"] is False
                       for variant in check["variants"]})
    return (f"preflight on {describe(record['stack'])}: {'; '.join(failed)}; this stack would time and draw wrong or "
            f"fallback convolutions; fix: install a torch release whose cuDNN has not this fault (pip install "
            f"torch==<another release>; torch.backends.cudnn.version() names the cuDNN), or leave "
            f"{', '.join(variants)} out of run_variants and quality_study.variants")
