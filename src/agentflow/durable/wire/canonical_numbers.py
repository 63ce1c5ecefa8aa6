"""Numbers and member order as RFC 8785 spells them, shared by both canonical paths."""

from __future__ import annotations

from codecs import utf_16_be_encode

__all__ = [
    "EXACT_FLOAT_INTEGERS",
    "MAX_WIRE_INTEGER",
    "NOT_CANONICAL",
    "NOT_I_JSON",
    "es6_number",
    "es6_spelling",
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
    # The codec function itself: ``str.encode`` would look the codec up by name.
    return utf_16_be_encode(text, "surrogatepass")[0]


def es6_number(value: float) -> str:
    """Spell a finite float as ECMAScript's ``Number.prototype.toString``.

    Python's ``repr`` already yields the shortest round-tripping digits (the
    digits ECMAScript picks); :func:`es6_spelling` places point and exponent.
    """
    return "0" if value == 0 else es6_spelling(repr(value))


def es6_spelling(shortest: str) -> str:
    """ECMAScript's spelling of a nonzero finite float from its shortest digits.

    ``shortest`` is the float as ``repr`` or orjson write it (``1e-07`` or
    ``1e-7``, ``1.5e+16``, ``123.0``). Their plain spellings are ECMAScript's
    once a trailing ``.0`` goes; elsewhere only the placement of point and
    exponent differs.
    """
    mantissa, _, exponent = shortest.partition("e")
    if not exponent:
        return shortest[:-2] if shortest.endswith(".0") else shortest
    power = int(exponent)
    if power >= 21 or power < -6:
        return f"{mantissa}e{power:+d}"
    sign = "-" if mantissa[0] == "-" else ""
    digits = mantissa.lstrip("-").replace(".", "")
    if power >= 0:
        return sign + digits.ljust(power + 1, "0")
    return sign + "0." + digits.rjust(len(digits) - power - 1, "0")
