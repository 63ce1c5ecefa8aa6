"""The per-node canonical walk: the path for documents the fast path hands back.

It checks every node in Python and lets the C encoder of :mod:`json` write
the bytes: integral floats become ints with the same digits, floats below
1e-4 become placeholders holding a lone surrogate (which no accepted string
can contain) replaced after encoding, and objects whose keys need UTF-16
order are rebuilt in that order. It handles what the fast path does not:
subclasses of the JSON types, nesting deeper than orjson allows, and the
precise error for a value that is not I-JSON.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from agentflow.durable.errors import DurableError
from agentflow.durable.wire.canonical_numbers import (
    EXACT_FLOAT_INTEGERS,
    MAX_WIRE_INTEGER,
    NOT_CANONICAL,
    NOT_I_JSON,
    es6_number,
    utf16_sort_key,
)

__all__ = ["canonical_by_walk", "utf16_ordered"]

_MARK = "\ud800"
_PLACEHOLDER = re.compile(f'"{_MARK}(\\d+){_MARK}"')


def _safe(number: int) -> bool:
    return -MAX_WIRE_INTEGER <= number <= MAX_WIRE_INTEGER


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
            raise DurableError(NOT_I_JSON, f"{self.what} is outside the JSON-safe integer range")
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
            NOT_CANONICAL, f"{self.what} holds a {type(value).__name__}, which is not JSON"
        )

    def number(self, value: float) -> Any:
        if not math.isfinite(value):
            raise DurableError(NOT_I_JSON, f"{self.what} is not a finite JSON number")
        if value.is_integer():
            if -EXACT_FLOAT_INTEGERS < value < EXACT_FLOAT_INTEGERS:
                return int(value)
            if -1e21 < value < 1e21:
                return int(es6_number(value))
            return value
        if value >= 1e-4 or value <= -1e-4:
            return value
        self.floats.append(es6_number(value))
        return f"{_MARK}{len(self.floats) - 1}{_MARK}"

    def mapping(self, value: dict[Any, Any]) -> dict[str, Any]:
        changed: dict[str, Any] | None = None
        high: list[str] | None = None
        for raw_key, item in value.items():
            key = raw_key
            if type(raw_key) is not str:
                if not isinstance(raw_key, str):
                    raise DurableError(
                        NOT_CANONICAL, f"{self.what} has a {type(raw_key).__name__} object key"
                    )
                changed = changed if changed is not None else dict(value)
                del changed[raw_key]
                key = str(raw_key)
            if not key.isascii() and max(key) >= "\ue000":
                high = high or []
                high.append(key)
            kind = type(item)
            if kind is str or kind is bool or item is None or (kind is int and _safe(item)):
                new = item
            else:
                new = self.value(item)
            if new is not item or changed is not None:
                if changed is None:
                    changed = dict(value)
                changed[key] = new
        # Code point and UTF-16 order differ only between two keys that both
        # hold a character at U+E000 or above, so only those are compared.
        if high is not None and len(high) > 1 and not self.reorder:
            self.reorder = sorted(high) != sorted(high, key=utf16_sort_key)
        return value if changed is None else changed

    def sequence(self, value: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
        changed: list[Any] | None = None
        for index, item in enumerate(value):
            kind = type(item)
            if kind is str or kind is bool or item is None:
                continue
            if kind is int and -MAX_WIRE_INTEGER <= item <= MAX_WIRE_INTEGER:
                continue
            new = self.value(item)
            if new is not item:
                if changed is None:
                    changed = list(value)
                changed[index] = new
        return value if changed is None else changed


def _not_json(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


_C_ENCODERS = (
    None
    if c_make_encoder is None
    else {
        sort: c_make_encoder(None, _not_json, encode_basestring, None, ":", ",", sort, False, False)
        for sort in (False, True)
    }
)


def _encode(prepared: Any, *, sort_keys: bool) -> str:
    """The compact JSON text of a checked document (the C encoder, built once)."""
    if _C_ENCODERS is None:
        return json.dumps(
            prepared,
            ensure_ascii=False,
            separators=(",", ":"),
            sort_keys=sort_keys,
            allow_nan=False,
            check_circular=False,
        )
    return "".join(_C_ENCODERS[sort_keys](prepared, 0))


def utf16_ordered(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: utf16_ordered(value[key]) for key in sorted(value, key=utf16_sort_key)}
    if isinstance(value, list | tuple):
        return [utf16_ordered(item) for item in value]
    return value


def canonical_by_walk(value: object, what: str) -> bytes:
    """RFC 8785 bytes of ``value`` by the per-node walk; raises as ``canonical_json``."""
    walk = _Walk(what)
    try:
        prepared = walk.value(value)
        if walk.reorder:
            prepared = utf16_ordered(prepared)
        text = _encode(prepared, sort_keys=not walk.reorder)
    except RecursionError as exc:
        raise DurableError(NOT_CANONICAL, f"{what} is nested too deeply or cyclic") from exc
    if walk.floats:
        floats = walk.floats
        text = _PLACEHOLDER.sub(lambda match: floats[int(match.group(1))], text)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DurableError(NOT_CANONICAL, f"{what} holds a lone surrogate") from exc
