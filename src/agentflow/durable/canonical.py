"""RFC 8785 canonical JSON with the I-JSON limits, and the strict JSON reader.

Every digest of the durable layer (run definitions, operation requests, event
payloads) is SHA-256 over these bytes, so they must equal the Rust original's
byte for byte: object members sorted by the UTF-16 code units of their names,
strings escaped as RFC 8785 prescribes (``"`` ``\\`` and the C0 controls only,
everything else raw UTF-8), numbers printed as ECMAScript's
``Number.prototype.toString``.

Speed comes from letting the C encoder of :mod:`json` write the bytes. One
walk in Python checks what it cannot (integer range, key types, float text)
and substitutes the few values whose Python spelling differs from
ECMAScript's: integral floats become ints with the same digits, and floats
below 1e-4 become placeholders holding a lone surrogate, which no accepted
string can contain, replaced after encoding. Only when a document has object
keys whose code point order differs from their UTF-16 order (a character at
U+E000 or above beside one above U+FFFF) are objects re-ordered in Python.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from agentflow.durable.errors import DurableError

__all__ = [
    "MAX_WIRE_INTEGER",
    "canonical_json",
    "es6_number",
    "parse_json",
    "utf16_sort_key",
    "validate_i_json",
]

#: The largest integer every JSON reader represents exactly (2**53 - 1).
MAX_WIRE_INTEGER = (1 << 53) - 1

_NOT_I_JSON = "checkpoint_definition_not_i_json"
_NOT_CANONICAL = "checkpoint_canonicalization_invalid"
_JSON_INVALID = "checkpoint_json_invalid"
#: Floats at or above 2**53 are printed with their shortest digits by
#: ECMAScript, not with all of their exact integer digits as ``int`` would.
_EXACT_FLOAT_INTEGERS = float(1 << 53)
_MARK = "\ud800"
_PLACEHOLDER = re.compile(f'"{_MARK}(\\d+){_MARK}"')
#: Serde's reader holds an integer literal as u64/i64 when it fits and as a
#: float when it does not; the strict reader does the same.
_INT_LITERAL_RANGE = (-(1 << 63), (1 << 64) - 1)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def utf16_sort_key(text: str) -> bytes:
    """Sort key equal to comparing UTF-16 code units (RFC 8785 member order)."""
    return text.encode("utf-16-be", "surrogatepass")


def es6_number(value: float) -> str:
    """Spell a finite float as ECMAScript's ``Number.prototype.toString``.

    Python's ``repr`` already yields the shortest round-tripping digits (the
    digits ECMAScript picks); only the placement of point and exponent differs.
    """
    if value == 0:
        return "0"
    text = repr(value)
    sign = "-" if text[0] == "-" else ""
    mantissa, _, exponent = text.lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    raw = whole + fraction
    digits = raw.lstrip("0")
    point = len(whole) + (int(exponent) if exponent else 0) - (len(raw) - len(digits))
    digits = digits.rstrip("0")
    count = len(digits)
    if count <= point <= 21:
        body = digits + "0" * (point - count)
    elif 0 < point <= 21:
        body = f"{digits[:point]}.{digits[point:]}"
    elif -6 < point <= 0:
        body = "0." + "0" * -point + digits
    else:
        power = point - 1
        head = digits[0] + (f".{digits[1:]}" if count > 1 else "")
        body = f"{head}e{'+' if power > 0 else '-'}{abs(power)}"
    return sign + body


class _Walk:
    """One pass over a document: checks it and records the substitutions."""

    __slots__ = ("floats", "reorder", "what")

    def __init__(self, what: str) -> None:
        self.what = what
        self.floats: list[str] = []
        self.reorder = False

    def value(self, value: Any) -> Any:
        kind = type(value)
        if kind is str or kind is bool or value is None:
            return value
        if kind is int:
            if -MAX_WIRE_INTEGER <= value <= MAX_WIRE_INTEGER:
                return value
            raise DurableError(_NOT_I_JSON, f"{self.what} is outside the JSON-safe integer range")
        if kind is float:
            return self.number(value)
        if kind is dict:
            return self.mapping(value)
        if kind is list or kind is tuple:
            return self.sequence(value)
        return self.subclass(value)

    def subclass(self, value: Any) -> Any:
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, str):
            return str(value)
        if isinstance(value, int):
            return self.value(int(value))
        if isinstance(value, float):
            return self.number(float(value))
        if isinstance(value, Mapping):
            return self.mapping(dict(value))
        if isinstance(value, list | tuple):
            return self.sequence(list(value))
        raise DurableError(
            _NOT_CANONICAL, f"{self.what} holds a {type(value).__name__}, which is not JSON"
        )

    def number(self, value: float) -> Any:
        if not math.isfinite(value):
            raise DurableError(_NOT_I_JSON, f"{self.what} is not a finite JSON number")
        if value.is_integer():
            if abs(value) < _EXACT_FLOAT_INTEGERS:
                return int(value)
            if abs(value) < 1e21:
                return int(es6_number(value))
            return value
        if abs(value) >= 1e-4:
            return value
        self.floats.append(es6_number(value))
        return f"{_MARK}{len(self.floats) - 1}{_MARK}"

    def mapping(self, value: dict[Any, Any]) -> dict[str, Any]:
        changed: dict[str, Any] | None = None
        for raw_key, item in value.items():
            key = raw_key
            if type(raw_key) is not str:
                if not isinstance(raw_key, str):
                    raise DurableError(
                        _NOT_CANONICAL, f"{self.what} has a {type(raw_key).__name__} object key"
                    )
                changed = changed if changed is not None else dict(value)
                del changed[raw_key]
                key = str(raw_key)
            if not key.isascii() and max(key) >= "\ue000":
                self.reorder = True
            new = self.value(item)
            if new is not item or changed is not None:
                if changed is None:
                    changed = dict(value)
                changed[key] = new
        return value if changed is None else changed

    def sequence(self, value: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
        changed: list[Any] | None = None
        for index, item in enumerate(value):
            new = self.value(item)
            if new is not item:
                if changed is None:
                    changed = list(value)
                changed[index] = new
        return value if changed is None else changed


def _utf16_ordered(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _utf16_ordered(value[key]) for key in sorted(value, key=utf16_sort_key)}
    if isinstance(value, list | tuple):
        return [_utf16_ordered(item) for item in value]
    return value


def canonical_json(value: object, *, what: str = "value") -> bytes:
    """Return the RFC 8785 canonical UTF-8 bytes of ``value``.

    ``value`` is JSON made of dicts with string keys, lists (or tuples),
    strings, bools, None, ints within +-(2**53 - 1) and finite floats.
    Raises :class:`DurableError` with ``checkpoint_definition_not_i_json`` for
    an integer out of that range or a non-finite float, and
    ``checkpoint_canonicalization_invalid`` for anything that is not JSON, a
    lone surrogate in a string or key, or a structure nested beyond Python's
    recursion limit (a cycle included). ``what`` names the value in messages.
    """
    walk = _Walk(what)
    try:
        prepared = walk.value(value)
        if walk.reorder:
            prepared = _utf16_ordered(prepared)
        text = json.dumps(
            prepared,
            ensure_ascii=False,
            separators=(",", ":"),
            sort_keys=not walk.reorder,
            allow_nan=False,
            check_circular=False,
        )
    except RecursionError as exc:
        raise DurableError(_NOT_CANONICAL, f"{what} is nested too deeply or cyclic") from exc
    if walk.floats:
        floats = walk.floats
        text = _PLACEHOLDER.sub(lambda match: floats[int(match.group(1))], text)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DurableError(_NOT_CANONICAL, f"{what} holds a lone surrogate") from exc


def validate_i_json(value: object, what: str) -> None:
    """Raise as :func:`canonical_json` would; return None when ``value`` is I-JSON."""
    canonical_json(value, what=what)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DurableError(_JSON_INVALID, f"duplicate JSON object key {key!r}")
            seen.add(key)
    return result


def _int_literal(text: str) -> int | float:
    number = int(text)
    low, high = _INT_LITERAL_RANGE
    return number if low <= number <= high else float(text)


def _no_constant(name: str) -> Any:
    raise DurableError(_JSON_INVALID, f"{name} is not JSON")


def _find_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= char <= "\udfff" for char in value)
    if isinstance(value, dict):
        return any(_find_surrogate(key) or _find_surrogate(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_find_surrogate(item) for item in value)
    return False


def parse_json(data: bytes | bytearray | memoryview | str) -> Any:
    """Read JSON as strictly as the original's reader.

    Refuses (``checkpoint_json_invalid``) invalid UTF-8, duplicate object keys,
    ``NaN``/``Infinity`` and escapes of lone surrogates; an integer literal
    beyond 64 bits becomes a float, as serde_json holds it, so a document
    read here canonicalizes to the same bytes as in Rust.
    """
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        if isinstance(data, str):
            data.encode("utf-8")
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicate_keys,
            parse_constant=_no_constant,
            parse_int=_int_literal,
        )
    except (UnicodeError, ValueError, RecursionError) as exc:
        raise DurableError(_JSON_INVALID, f"not valid JSON: {exc}") from exc
    if _SURROGATE_ESCAPE.search(text) and _find_surrogate(value):
        raise DurableError(_JSON_INVALID, "a string escapes a lone surrogate")
    return value
