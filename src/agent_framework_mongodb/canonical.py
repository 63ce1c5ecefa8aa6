"""The canonical logical encoding that checkpoint identity is hashed from.

Pickle bytes are not a stable identity: they depend on memo order, on the
insertion order of dicts and on the iteration order of sets (which moves with
``PYTHONHASHSEED``). The idempotency hash is therefore taken over this
encoding instead, in which

* every value carries an explicit type tag (``1``, ``1.0``, ``True`` and
  ``"1"`` differ; so do ``list`` and ``tuple``);
* exact ``dict`` entries and set members are sorted by their own encoding,
  because their meaning is key/value state and membership, not order;
* framework and application objects carry their ``module:qualname`` and
  their pickled state, enum members their class and value.

The walk is also the save-side validator: it is the one place that visits
the whole object graph, so it refuses mapping subclasses, pickle hooks,
copyreg extension codes, cycles, non-finite floats and unsupported values
before any byte is pickled or any MongoDB call is made. The mapping guard
runs before every other type handler, so an ``OrderedDict``, or a class that
is both a mapping and an enum, is refused even when listed.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import hashlib
import math
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from agent_framework_mongodb.errors import MongoDBMappingError, MongoDBSerializationError
from agent_framework_mongodb.typepolicy import TypePolicy, type_key

__all__ = ["CANONICAL_HASH_VERSION", "canonical_bytes", "canonical_hash"]

#: Version of this encoding, stored as ``idempotency_hash_version``.
CANONICAL_HASH_VERSION = 2
_DOMAIN = b"agentflow.af-checkpoint.canonical/v2\n"
_FLOAT = struct.Struct(">d")


def canonical_hash(value: Any, policy: TypePolicy) -> str:
    """SHA-256 hex digest of :func:`canonical_bytes`."""
    return hashlib.sha256(canonical_bytes(value, policy)).hexdigest()


def canonical_bytes(value: Any, policy: TypePolicy) -> bytes:
    """The canonical encoding of ``value``, or a mapping/serialization error."""
    try:
        return _DOMAIN + _Walker(policy).encode(value)
    except RecursionError as exc:
        raise MongoDBMappingError("checkpoint state is nested too deeply to encode") from exc


def _sized(tag: bytes, data: bytes) -> bytes:
    return b"%s%d:%s" % (tag, len(data), data)


def _text(value: str) -> bytes:
    data = value.encode("utf-8", "surrogatepass")
    return b"s%d:%s" % (len(data), data)


def _float(value: float) -> bytes:
    if not math.isfinite(value):
        raise MongoDBMappingError("checkpoint state contains a non-finite float (NaN or inf)")
    return b"f" + _FLOAT.pack(value)


#: Exact built-in types that are never mappings, so the mapping guard is
#: decided for them by this table; every other type meets ``isinstance``.
_NATIVE_SCALARS: dict[type, Callable[[Any], bytes]] = {
    str: _text,
    int: lambda v: b"i%d;" % v,
    bool: lambda v: b"T" if v else b"F",
    type(None): lambda _v: b"N",
    float: _float,
    bytes: lambda v: _sized(b"b", v),
    bytearray: lambda v: _sized(b"y", bytes(v)),
}


class _Walker:
    """One depth-first walk; ``_path`` holds the ids of the containers being visited."""

    def __init__(self, policy: TypePolicy) -> None:
        self._policy = policy
        self._path: set[int] = set()
        self._standard: dict[type, Callable[[Any], bytes]] = {
            datetime.datetime: _datetime,
            datetime.date: lambda v: _sized(b"D", v.isoformat().encode()),
            datetime.time: _time,
            datetime.timedelta: lambda v: b"R%d,%d,%d;" % (v.days, v.seconds, v.microseconds),
            datetime.timezone: lambda v: _sized(b"Z", repr(v).encode()),
            decimal.Decimal: lambda v: _sized(b"m", str(v).encode()),
            uuid.UUID: lambda v: _sized(b"u", v.hex.encode()),
        }

    def encode(self, value: Any) -> bytes:
        cls = type(value)
        # The mapping guard comes first: exact dict is accepted; exact native
        # scalars are known non-mappings; every other mapping is refused before
        # any standard, enum, class or object handler runs.
        if cls is dict:
            return self._container(value, b"d", self._dict_items)
        native = _NATIVE_SCALARS.get(cls)
        if native is not None:
            return native(value)
        if cls is list or cls is tuple:
            return self._container(value, b"l" if cls is list else b"t", self._sequence_items)
        if isinstance(value, Mapping | dict):
            raise MongoDBSerializationError(
                f"{type_key(cls)} is a mapping subclass; only exact dict is supported, "
                "migrate it to plain dict/list structures"
            )
        standard = self._standard.get(cls)
        if standard is not None:
            self._policy.check_value_type(cls)
            return standard(value)
        if cls is set or cls is frozenset:
            return self._container(value, b"S" if cls is set else b"z", self._set_items)
        if isinstance(value, enum.Enum):
            self._policy.check_value_type(cls)
            return _sized(b"e", type_key(cls).encode()) + self.encode(value._value_)
        if isinstance(value, type):
            return self._class_reference(value)
        self._policy.check_value_type(cls)
        return self._container(value, _sized(b"o", type_key(cls).encode()), self._object_state)

    def _container(self, value: Any, tag: bytes, items: Callable[[Any], list[bytes]]) -> bytes:
        marker = id(value)
        if marker in self._path:
            raise MongoDBMappingError("checkpoint state contains a reference cycle")
        self._path.add(marker)
        parts = items(value)
        self._path.discard(marker)
        return b"%s%d:%s" % (tag, len(parts), b"".join(parts))

    # Strings dominate real state, so the item loops encode them without the
    # general dispatch; the result is byte-for-byte what encode() returns.
    def _sequence_items(self, value: list[Any] | tuple[Any, ...]) -> list[bytes]:
        encode = self.encode
        return [_text(item) if type(item) is str else encode(item) for item in value]

    def _dict_items(self, value: dict[Any, Any]) -> list[bytes]:
        encode = self.encode
        return sorted(
            [
                (_text(k) if type(k) is str else encode(k))
                + (_text(v) if type(v) is str else encode(v))
                for k, v in value.items()
            ]
        )

    def _set_items(self, value: set[Any] | frozenset[Any]) -> list[bytes]:
        encode = self.encode
        return sorted([encode(item) for item in value])

    def _object_state(self, value: Any) -> list[bytes]:
        return [self.encode(object_state(value))]

    def _class_reference(self, cls: type) -> bytes:
        if cls is type(None):
            raise MongoDBMappingError(
                f"class reference {type_key(cls)} cannot be checkpointed; store plain data"
            )
        self._policy.check_value_type(cls)
        return _sized(b"c", type_key(cls).encode())


def object_state(value: Any) -> Any:
    """The state pickle stores for an object: its ``__getstate__()`` result.

    For application classes this is always ``object.__getstate__`` (hooks are
    refused), i.e. the instance dict and slots; framework classes may drop
    runtime-only fields through their own ``__getstate__``.
    """
    return value.__getstate__()


def _tz(value: datetime.tzinfo | None) -> bytes:
    if value is None:
        return b"-"
    if type(value) is not datetime.timezone:
        raise MongoDBMappingError(
            "only datetime.timezone tzinfo is supported in checkpoints; convert to UTC offsets"
        )
    return repr(value).encode()


def _datetime(value: datetime.datetime) -> bytes:
    text = value.replace(tzinfo=None).isoformat() + f"|{value.fold}|"
    return _sized(b"W", text.encode() + _tz(value.tzinfo))


def _time(value: datetime.time) -> bytes:
    text = value.replace(tzinfo=None).isoformat() + f"|{value.fold}|"
    return _sized(b"H", text.encode() + _tz(value.tzinfo))
