"""RFC 8785 canonical JSON with the I-JSON limits.

Every digest of the durable layer (run definitions, operation requests, event
payloads) is SHA-256 over these bytes, so they must equal the Rust original's
byte for byte: object members sorted by the UTF-16 code units of their names,
strings escaped as RFC 8785 prescribes (``"`` ``\\`` and the C0 controls only,
everything else raw UTF-8), numbers printed as ECMAScript's
``Number.prototype.toString``.

The fast path lets orjson write the bytes, which already escapes strings as
RFC 8785 does, sorts members by code point and refuses integers beyond 2**53
and lone surrogates, and refuses keys that are not exactly ``str``. A scan in
Python looks only at containers (their element types are gathered in C) and
replaces each float by its ECMAScript spelling as an ``orjson.Fragment``.
Code point order differs from UTF-16 order only between two names that both
hold a character at U+E000 or above, one of them above U+FFFF; only an object
whose names do is written by hand, member by member in UTF-16 order, as a
fragment of its own (the rest of the document keeps orjson's sort). Anything
else (subclasses of the JSON types, very deep nesting, a value orjson
refuses) goes to the per-node walk of :mod:`agentflow.durable.wire.canonical_walk`,
which also words the error.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from agentflow.durable.errors import DurableError
from agentflow.durable.wire.canonical_numbers import (
    EXACT_FLOAT_INTEGERS,
    MAX_WIRE_INTEGER,
    NOT_I_JSON,
    es6_number,
    utf16_sort_key,
)
from agentflow.durable.wire.canonical_walk import canonical_by_walk
from agentflow.durable.wire.strict_json import parse_json

__all__ = [
    "MAX_WIRE_INTEGER",
    "canonical_json",
    "es6_number",
    "parse_json",
    "utf16_sort_key",
    "validate_i_json",
]

_SCALARS = frozenset({str, int, bool, type(None)})
_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_Fragment: Any = getattr(orjson, "Fragment", None)


def _orjson_spells_floats_as_ecmascript() -> bool:
    """True when orjson writes non-integral floats in [1e-5, 1e16) and beyond
    [1e-6, 1e21) as ECMAScript does (orjson 3.9 to 3.13 do); checked once."""
    probes = (
        0.5,
        0.1,
        123.456,
        1e-5,
        1.5e-5,
        1e-7,
        -2.5e-8,
        5e-324,
        1e21,
        1.5e300,
        1.7976931348623157e308,
    )
    return all(orjson.dumps(probe) == es6_number(probe).encode() for probe in probes)


_NATIVE_FLOATS = _orjson_spells_floats_as_ecmascript()


class _Handback(Exception):
    """The fast path cannot decide this document; the walk will."""


def _utf16_misordered(names: dict[str, Any]) -> bool:
    """True when the names' UTF-16 order is not their code point order."""
    if len(names) < 2:
        return False
    joined = "".join(names)
    if joined.isascii() or max(joined) <= "\uffff":
        return False
    high = [name for name in names if name and max(name) >= "\ue000"]
    if len(high) < 2:
        return False
    high.sort()
    return high != sorted(high, key=utf16_sort_key)


def _utf16_object(value: dict[str, Any]) -> Any:
    """``value`` (members prepared) written in UTF-16 member order, as a fragment."""
    members = (
        orjson.dumps(name) + b":" + orjson.dumps(value[name], option=_SORTED)
        for name in sorted(value, key=utf16_sort_key)
    )
    return _Fragment(b"{" + b",".join(members) + b"}")


class _Scan:
    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def value(self, value: Any) -> Any:
        return value if type(value) in _SCALARS else self.child(value)

    def number(self, value: float) -> Any:
        if not math.isfinite(value):
            raise DurableError(NOT_I_JSON, f"{self.what} is not a finite JSON number")
        magnitude = abs(value)
        if value.is_integer():
            if magnitude < EXACT_FLOAT_INTEGERS:
                return int(value)
            if magnitude >= 1e21 and _NATIVE_FLOATS:
                return value
        elif _NATIVE_FLOATS and (magnitude >= 1e-5 or magnitude < 1e-6):
            return value
        return _Fragment(es6_number(value).encode("ascii"))

    def child(self, item: Any) -> Any:
        kind = type(item)
        if kind is dict:
            return self.mapping(item)
        if kind is list or kind is tuple:
            return self.sequence(item)
        if kind is float:
            return self.number(item)
        raise _Handback

    def mapping(self, value: dict[Any, Any]) -> Any:
        prepared = value
        if not _SCALARS.issuperset(map(type, value.values())):
            changed: dict[str, Any] | None = None
            for key, item in value.items():
                if type(item) in _SCALARS:
                    continue
                new = self.child(item)
                if new is not item:
                    if changed is None:
                        changed = dict(value)
                    changed[key] = new
            prepared = value if changed is None else changed
        # A name that is not a str fails the join here, or orjson's key check.
        return _utf16_object(prepared) if _utf16_misordered(value) else prepared

    def sequence(self, value: list[Any] | tuple[Any, ...]) -> Any:
        if _SCALARS.issuperset(map(type, value)):
            return value
        changed: list[Any] | None = None
        for index, item in enumerate(value):
            if type(item) in _SCALARS:
                continue
            new = self.child(item)
            if new is not item:
                if changed is None:
                    changed = list(value)
                changed[index] = new
        return value if changed is None else changed


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
    if _Fragment is None:
        return canonical_by_walk(value, what)
    try:
        return orjson.dumps(_Scan(what).value(value), option=_SORTED)
    except (_Handback, RecursionError, TypeError):
        return canonical_by_walk(value, what)


def validate_i_json(value: object, what: str) -> None:
    """Raise as :func:`canonical_json` would; return None when ``value`` is I-JSON."""
    canonical_json(value, what=what)
