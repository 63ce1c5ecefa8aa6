"""LangGraph values inside agentflow's JSON records, exactly.

A value that JSON represents exactly (``dict`` with ``str`` keys, ``list``,
``str``, 64-bit ``int``, finite ``float``, ``bool``, None, and nothing that
merely looks like them, such as a tuple or an enum) is stored as itself, so
``agentflow history`` shows it and no second encoding is paid. Anything else
is encoded by the serializer (LangGraph's msgpack) and stored as
``[type, base64]`` beside the JSON part, under the same key.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Mapping
from typing import Any, Final, Protocol

import orjson
import ormsgpack

from agentflow.errors import CheckpointCorrupted, CheckpointNotSerializable

__all__ = ["ValueCodec", "is_exact_json"]

_MIN_INT: Final = -(2**63)
_MAX_INT: Final = 2**64


class Serde(Protocol):
    """LangGraph's ``SerializerProtocol``."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]: ...

    def loads_typed(self, data: tuple[str, bytes]) -> Any: ...


def _refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


#: ormsgpack refuses, through ``_refuse``, every type JSON would not give back.
_PRECHECK: Final = (
    ormsgpack.OPT_PASSTHROUGH_BIG_INT
    | ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME
    | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_SUBCLASS
    | ormsgpack.OPT_PASSTHROUGH_TUPLE
    | ormsgpack.OPT_PASSTHROUGH_UUID
)
#: What a float64 NaN or infinity looks like in msgpack (or bytes that only look so).
_MAYBE_NON_FINITE: Final = re.compile(rb"\xcb[\x7f\xff][\xf0-\xff]")


def is_exact_json(value: Any) -> bool:
    """True when a JSON round trip gives back an equal value of the same types.

    It runs on every value written, so the walk is done in C: ormsgpack with
    every passthrough option refuses tuples, enums, UUIDs, datetimes,
    dataclasses, subclasses, big ints and non-str keys; of what it packs, only
    bytes-likes are not JSON, so orjson (which refuses them) runs only when the
    output holds a byte of msgpack's bin headers (0xc4-0xc6; floats and
    non-ASCII text may hold them too). NaN and infinities pack too, so output
    that may hold one is walked in Python, which answers exactly.
    """
    try:
        packed = ormsgpack.packb(value, default=_refuse, option=_PRECHECK)
        if b"\xcb" in packed and _MAYBE_NON_FINITE.search(packed):
            return _walk(value)
        if b"\xc4" in packed or b"\xc5" in packed or b"\xc6" in packed:
            orjson.dumps(value, default=_refuse)
    except (TypeError, ormsgpack.MsgpackEncodeError, orjson.JSONEncodeError):
        return False
    return True


def _walk(value: Any) -> bool:
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            extend(item.values())
        elif kind is list:
            extend(item)
        elif kind is int:
            if not _MIN_INT <= item < _MAX_INT:
                return False
        elif kind is not float or not math.isfinite(item):
            return False
    return True


class ValueCodec:
    """Splits mappings into a JSON part and a packed part, and joins them back.

    With ``verify`` (the default) every packed value is decoded once as it is
    written, so a type the serializer would refuse on read (not on its
    allowlist) fails the write, naming the type, instead of the resume.
    """

    __slots__ = ("serde", "verify")

    def __init__(self, serde: Serde, *, verify: bool = True) -> None:
        self.serde = serde
        self.verify = verify

    def pack(self, value: Any) -> list[str]:
        """``[type, base64]`` of one value."""
        try:
            kind, blob = self.serde.dumps_typed(value)
        except CheckpointNotSerializable:
            raise
        except Exception as exc:
            raise CheckpointNotSerializable(
                f"a {type(value).__name__} value cannot be stored: {exc}"
            ) from exc
        if self.verify:
            try:
                self.serde.loads_typed((kind, blob))
            except CheckpointCorrupted as exc:
                raise CheckpointNotSerializable(
                    f"a {type(value).__name__} value would not read back: {exc}"
                ) from exc
        return [kind, base64.b64encode(blob).decode("ascii")]

    def unpack(self, packed: Any) -> Any:
        """The value of one ``[type, base64]`` pair (``[]`` is None)."""
        if packed == []:
            return None
        if (
            type(packed) is not list
            or len(packed) != 2
            or not all(type(part) is str for part in packed)
        ):
            raise CheckpointCorrupted("a packed LangGraph value is malformed")
        try:
            blob = base64.b64decode(packed[1], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise CheckpointCorrupted("a packed LangGraph value is not base64") from exc
        return self.serde.loads_typed((packed[0], blob))

    def split(self, mapping: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
        """``(exact JSON entries, packed entries)`` of a mapping with str keys."""
        plain: dict[str, Any] = {}
        packed: dict[str, list[str]] = {}
        for key, value in mapping.items():
            if type(key) is not str:
                raise CheckpointNotSerializable(f"a LangGraph key {key!r} is not a str")
            # A top-level None is stored as []: a JSON null (or the word "null"
            # anywhere) makes agentflow's codec walk the whole record for NaN.
            if value is None:
                packed[key] = []
            else:
                plain[key] = value
        if is_exact_json(plain):  # the common case: one check for the whole mapping
            return plain, packed
        for key in [key for key, value in plain.items() if not is_exact_json(value)]:
            packed[key] = self.pack(plain.pop(key))
        return plain, packed

    def join(self, plain: Any, packed: Any) -> dict[str, Any]:
        """The mapping :meth:`split` was given."""
        if type(plain) is not dict or type(packed) is not dict:
            raise CheckpointCorrupted("a stored LangGraph mapping is malformed")
        joined = dict(plain)
        for key, value in packed.items():
            joined[key] = self.unpack(value)
        return joined

    def entry(self, value: Any) -> list[Any]:
        """One value as ``["n"]`` (None), ``["j", value]`` or ``["m", type, base64]``."""
        if value is None:
            return ["n"]
        if is_exact_json(value):
            return ["j", value]
        return ["m", *self.pack(value)]

    def from_entry(self, entry: Any) -> Any:
        """The value of :meth:`entry`."""
        if entry == ["n"]:
            return None
        if type(entry) is list and len(entry) == 2 and entry[0] == "j":
            return entry[1]
        if type(entry) is list and len(entry) == 3 and entry[0] == "m":
            return self.unpack(entry[1:])
        raise CheckpointCorrupted("a stored LangGraph write is malformed")
