"""Whether a number as a page prints it is a table's value: the printed digits are the value rounded, whatever the
format chose (decimals, significant digits, thousands separators)."""

from __future__ import annotations

import math


def agrees(printed: str, value: float) -> bool:
    """`printed` ("1,251", "5.38", "0.0409", "1.6") is `value` rounded at its last printed digit."""
    text = printed.replace(",", "").strip()
    decimals = len(text.split(".")[1]) if "." in text else 0
    if decimals == 0 and abs(value) >= 10:  # a whole number: the last digit printed is the units
        return abs(float(text) - value) <= 0.5 + 1e-9 * abs(value)
    return abs(float(text) - value) <= 0.5 * 10 ** -decimals + 1e-9 * abs(value)
