"""RFC 8785 canonical JSON with the I-JSON limits.

Every digest of the durable layer (run definitions, operation requests, event
payloads) is SHA-256 over these bytes, so they must equal the Rust original's
byte for byte: object members sorted by the UTF-16 code units of their names,
strings escaped as RFC 8785 prescribes (``"`` ``\\`` and the C0 controls only,
everything else raw UTF-8), numbers printed as ECMAScript's
``Number.prototype.toString``.

The fast path lets orjson write the bytes, which already escapes strings as
RFC 8785 does, sorts members by code point and refuses integers beyond 2**53,
lone surrogates and keys that are not ``str``. One pass in Python prepares
the document: it looks each element's exact type up in a table (anything not
in it hands the document on), replaces each float orjson spells differently
by its ECMAScript spelling, and copies only a container whose elements
changed. Code point order differs from UTF-16 order only between names that
hold both a character in U+E000..U+FFFF and one above U+FFFF, so an object is
looked at once with two regular expressions (all its names joined: one cheap
test, then, rarely, an exact one over the names sorted) and only an object
whose order really differs is written by hand, as a fragment of its own (the
rest of the document keeps orjson's sort). Anything else (subclasses of the
JSON types, very deep nesting, a value orjson refuses) goes to the per-node
walk of :mod:`agentflow.durable.wire.canonical_walk`, which also words the
error.
"""

from __future__ import annotations

import re
from codecs import utf_16_be_encode
from collections.abc import Callable
from typing import Any

import orjson

from agentflow.durable.wire.canonical_numbers import (
    EXACT_FLOAT_INTEGERS,
    MAX_WIRE_INTEGER,
    es6_number,
    es6_spelling,
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

_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_CONTAINERS = frozenset({dict, list, tuple})
_INFINITY = float("inf")
#: Two names sort differently by code point and by UTF-16 code units exactly
#: when, after a common prefix, one holds a character in U+E000..U+FFFF and
#: the other one above U+FFFF. Over the names each led by a NUL this matches
#: when they hold both kinds and two of them start with the two kinds or share
#: a first character (a NUL inside a name only adds matches): a cheap test
#: that never misses, run on every object whose names are not all ASCII.
_MAY_SORT_DIFFERENTLY = re.compile(
    "(?=.*[\U00010000-\U0010ffff])(?=.*[\ue000-\uffff]).*?\x00(?:"
    "[\ue000-\uffff].*\x00[\U00010000-\U0010ffff]"
    "|[\U00010000-\U0010ffff].*\x00[\ue000-\uffff]"
    "|([^\x00]).*\x00\\1)",
    re.S,
).match
#: The exact test, over the names in code point order each led by a lone
#: surrogate (no name that orjson accepts holds one): two neighbours whose
#: UTF-16 order is the other way. Neighbours suffice: a list sorted one way
#: whose every neighbouring pair is in order the other way is sorted both ways.
_NEIGHBOURS_SORT_DIFFERENTLY = re.compile(
    "\ud800([^\ud800]*)[\ue000-\uffff][^\ud800]*+\ud800\\1[\U00010000-\U0010ffff]"
).search


class _Handback(Exception):
    """The fast path cannot decide this document; the walk will."""


def _number(value: float) -> Any:
    """``value`` as orjson should write it: itself, an int or an ECMAScript fragment.

    orjson writes floats with their shortest digits, as ECMAScript does, but
    integral ones below 1e21 with ``.0`` or an exponent, and those from 1e-6
    to 1e-5 with an exponent; only those are respelled, from orjson's digits
    (``repr`` finds the same digits ~10x slower for large numbers).
    """
    if value.is_integer():
        if -EXACT_FLOAT_INTEGERS < value < EXACT_FLOAT_INTEGERS:
            return int(value)
        if not -1e21 < value < 1e21:
            return value
    elif not -1e-5 < value < 1e-5 or -1e-6 < value < 1e-6:
        if -_INFINITY < value < _INFINITY:
            return value
        raise _Handback  # NaN or an infinity: the walk names the error
    return orjson.Fragment(es6_spelling(orjson.dumps(value).decode("ascii")))


def _mapping(value: dict[Any, Any]) -> Any:
    changed: dict[Any, Any] | None = None
    for key, item in value.items():
        prepare = _PREPARE[type(item)]
        if prepare is not None:
            new = prepare(item)
            if new is not item:
                if changed is None:
                    changed = dict(value)
                changed[key] = new
    prepared = value if changed is None else changed
    if len(value) > 1:
        # A name that is not a str fails the join here, or orjson's key check.
        names = "\x00".join(["", *value])
        if (
            not names.isascii()
            and _MAY_SORT_DIFFERENTLY(names)
            and _NEIGHBOURS_SORT_DIFFERENTLY("\ud800".join(["", *sorted(value)]))
        ):
            return _utf16_object(prepared)
    return prepared


def _sequence(value: list[Any] | tuple[Any, ...]) -> Any:
    changed: list[Any] | None = None
    for index, item in enumerate(value):
        prepare = _PREPARE[type(item)]
        if prepare is not None:
            new = prepare(item)
            if new is not item:
                if changed is None:
                    changed = list(value)
                changed[index] = new
    return value if changed is None else changed


def _utf16_object(value: dict[str, Any]) -> Any:
    """``value`` (members prepared) written in UTF-16 member order, as a fragment.

    Without ``OPT_SORT_KEYS`` orjson keeps the order of insertion, so the
    members go in in UTF-16 order, each object or array among them written
    first, sorted, as a fragment of its own.
    """
    ordered: dict[str, Any] = {}
    for name in sorted(value, key=utf_16_be_encode):  # a lone surrogate raises
        item = value[name]
        if type(item) in _CONTAINERS:
            item = orjson.Fragment(orjson.dumps(item, option=_SORTED))
        ordered[name] = item
    return orjson.Fragment(orjson.dumps(ordered, option=orjson.OPT_STRICT_INTEGER))


#: How the fast path prepares each exact JSON type (None: as it is); any other
#: type is a KeyError, which hands the document to the walk.
_PREPARE: dict[type, Callable[[Any], Any] | None] = {
    str: None,
    int: None,
    bool: None,
    type(None): None,
    float: _number,
    dict: _mapping,
    list: _sequence,
    tuple: _sequence,
}


def _orjson_spells_floats_as_ecmascript() -> bool:
    """True when the fast path's floats come out as ECMAScript spells them:
    orjson writes shortest digits, and plainly where it is left to (orjson
    3.9 to 3.13 do); checked once, on floats from every range of
    :func:`_number`. Otherwise every document takes the walk."""
    probes = (
        *(0.0, -0.0, 1.0, -7.0, 2.0**53 - 1, 2.0**53, -(2.0**60), 1e16, 1.2345e20, 1e21),
        *(1.7976931348623157e308, 0.5, 0.1, 123.456, 1e-5, 1.5e-5, 1e-6, -9.5e-6, 1e-7),
        *(-2.5e-8, 5e-324, 1.5e300),
    )
    return all(orjson.dumps(_number(probe)) == es6_number(probe).encode() for probe in probes)


_FAST = _orjson_spells_floats_as_ecmascript()


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
    if _FAST:
        try:
            prepare = _PREPARE[type(value)]
            return orjson.dumps(value if prepare is None else prepare(value), option=_SORTED)
        except (_Handback, KeyError, RecursionError, TypeError, UnicodeEncodeError):
            pass
    return canonical_by_walk(value, what)


def validate_i_json(value: object, what: str) -> None:
    """Raise as :func:`canonical_json` would; return None when ``value`` is I-JSON."""
    canonical_json(value, what=what)
