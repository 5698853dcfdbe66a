"""Scale factors from the units Nsight Compute prints to base units (nanoseconds for time, plain counts)."""

from __future__ import annotations

import re

# Time goes to nanoseconds, ncu's own base unit for gpu__time_duration (printed "nsecond").
_TIME_NS = {
    "nsecond": 1.0,
    "usecond": 1e3,
    "msecond": 1e6,
    "second": 1e9,
    "ns": 1.0,
    "us": 1e3,
    "ms": 1e6,
    "s": 1e9,
}
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
# Counts and sizes: an optional SI prefix on a lower-case base word (Kbyte, Mbyte, Gcycle, Minst, Ghz).
_PREFIXED = re.compile(r"^([KMGT]?)([a-z]+)$")
# Sizes with a binary prefix, as ncu prints some of them (Kibyte = 1024 bytes, Mibyte, Gibyte, Tibyte). Matched
# before _PREFIXED, which would read "Kibyte" as 1000 of a unit "ibyte".
_BINARY = re.compile(r"^([KMGT])i(byte|bit)$")
_DIMENSIONLESS = {"", "%", "nan"}


def _simple(unit: str) -> tuple[float, str] | None:
    if unit in _DIMENSIONLESS:
        return 1.0, unit
    if unit in _TIME_NS:
        return _TIME_NS[unit], "nsecond"
    binary = _BINARY.match(unit)
    if binary is not None:
        prefix, base = binary.groups()
        return 1024.0 ** ("KMGT".index(prefix) + 1), base
    match = _PREFIXED.match(unit)
    if match is None:
        return None
    prefix, base = match.groups()
    return _PREFIX[prefix], base


def scale_to_base(unit: str) -> tuple[float, str] | None:
    """(factor, base unit) that turns a value printed in `unit` into base units; None for a unit not understood.

    Rates keep their form with both sides in base units: "Gbyte/second" -> (1.0, "byte/nsecond").
    """
    parts = unit.strip().split("/")
    if len(parts) > 2:
        return None
    scaled = [_simple(part.strip()) for part in parts]
    if any(s is None for s in scaled):
        return None
    if len(scaled) == 1:
        return scaled[0]
    (num_factor, num_base), (den_factor, den_base) = scaled  # type: ignore[misc]
    return num_factor / den_factor, f"{num_base}/{den_base}"
