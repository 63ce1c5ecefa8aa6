"""Numbers and member order as RFC 8785 spells them, shared by both canonical paths."""

from __future__ import annotations

__all__ = [
    "EXACT_FLOAT_INTEGERS",
    "MAX_WIRE_INTEGER",
    "NOT_CANONICAL",
    "NOT_I_JSON",
    "es6_number",
    "utf16_sort_key",
]

#: The largest integer every JSON reader represents exactly (2**53 - 1).
MAX_WIRE_INTEGER = (1 << 53) - 1
#: Floats at or above 2**53 are printed with their shortest digits by
#: ECMAScript, not with all of their exact integer digits as ``int`` would.
EXACT_FLOAT_INTEGERS = float(1 << 53)
NOT_I_JSON = "checkpoint_definition_not_i_json"
NOT_CANONICAL = "checkpoint_canonicalization_invalid"


def utf16_sort_key(text: str) -> bytes:
    """Sort key equal to comparing UTF-16 code units (RFC 8785 member order)."""
    return text.encode("utf-16-be", "surrogatepass")


def es6_number(value: float) -> str:
    """Spell a finite float as ECMAScript's ``Number.prototype.toString``.

    Python's ``repr`` already yields the shortest round-tripping digits (the
    digits ECMAScript picks) and, between 1e-4 and 1e16, ECMAScript's plain
    spelling; elsewhere only the placement of point and exponent differs.
    """
    if value == 0:
        return "0"
    text = repr(value)
    if "e" not in text:
        return text[:-2] if text.endswith(".0") else text
    mantissa, _, exponent = text.partition("e")
    sign = ""
    if mantissa[0] == "-":
        sign, mantissa = "-", mantissa[1:]
    power = int(exponent)
    if power >= 21 or power < -6:
        return f"{sign}{mantissa}e{'+' if power > 0 else '-'}{abs(power)}"
    digits = mantissa.replace(".", "")
    if power >= 0:
        return sign + digits + "0" * (power + 1 - len(digits))
    return sign + "0." + "0" * (-power - 1) + digits
