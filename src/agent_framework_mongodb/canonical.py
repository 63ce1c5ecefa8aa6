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
the whole object graph, so it refuses mapping subclasses, classes whose
hooks loading or saving could run, copyreg extension codes, dict keys and
set members that are not primitive values, cycles, non-finite floats and
unsupported values before any byte is pickled or any MongoDB call is made.
Every value's class is vetted before anything of the value itself is read.
The mapping guard runs before every other type handler, so an
``OrderedDict``, or a class that is both a mapping and an enum, is refused
even when listed. A class held as a value is a reference, not a mapping:
``dict`` itself is a permitted value, and so are the type hints of
:mod:`~agent_framework_mongodb.typeforms` (``dict[str, int]``, ``str | None``).
"""

from __future__ import annotations

import datetime
import decimal
import enum
import hashlib
import math
import struct
import types
import uuid
from collections.abc import Callable
from typing import Any

from agent_framework_mongodb.classrules import hashable
from agent_framework_mongodb.errors import MongoDBMappingError, MongoDBSerializationError
from agent_framework_mongodb.typeforms import FORM_TYPES
from agent_framework_mongodb.typepolicy import TypePolicy, type_key

__all__ = ["CANONICAL_HASH_VERSION", "canonical_bytes", "canonical_hash"]

#: Version of this encoding, stored as ``idempotency_hash_version``.
CANONICAL_HASH_VERSION = 2
_DOMAIN = b"agentflow.af-checkpoint.canonical/v2\n"
_FLOAT = struct.Struct(">d")
#: How many bytes of already encoded shared references one walk may repeat.
_MAX_EXPANSION = 64 << 20
#: Containers and objects the memo-free first walk may visit (a 10 KB
#: checkpoint has a few hundred; a larger one walks a little slower with the memo).
_FAST_VISITS = 10_000


def canonical_hash(value: Any, policy: TypePolicy) -> str:
    """SHA-256 hex digest of :func:`canonical_bytes`."""
    return hashlib.sha256(canonical_bytes(value, policy)).hexdigest()


def canonical_bytes(
    value: Any, policy: TypePolicy, strings: dict[str, bytes] | None = None
) -> bytes:
    """The canonical encoding of ``value``, or a mapping/serialization error.

    ``strings`` memoizes the encoding of exact ``str`` values (a pure function
    of the value); one save passes the same dict to both of its walks.

    The first walk remembers nothing: real state shares few objects, and
    remembering every container would cost a quarter of the walk. It may
    visit ``_FAST_VISITS`` containers and objects; beyond that (a graph that
    shares sub-structures can reach each one exponentially often) the walk
    starts over remembering finished ones, which makes it linear in the
    number of distinct objects. Neither keeps a set of visited containers: a
    cycle can only make them recurse until ``RecursionError``. Then, and for
    state nested that deeply, the walk is repeated with cycle tracking, which
    names the cycle (or the depth) in a ``MongoDBMappingError``. All walks
    produce the same bytes for every acyclic value.
    """
    memo = {} if strings is None else strings
    try:
        try:
            return _DOMAIN + _walker(policy, memo, share=False, track=False)(value)
        except _ManyVisits:
            return _DOMAIN + _walker(policy, memo, share=True, track=False)(value)
    except RecursionError:
        pass
    try:
        return _DOMAIN + _walker(policy, memo, share=True, track=True)(value)
    except RecursionError as exc:
        raise MongoDBMappingError("checkpoint state is nested too deeply to encode") from exc


class _ManyVisits(Exception):
    """The memo-free walk visited more objects than real, unshared state holds."""


def _sized(tag: bytes, data: bytes) -> bytes:
    return b"%s%d:%s" % (tag, len(data), data)


def _float(value: float) -> bytes:
    if not math.isfinite(value):
        raise MongoDBMappingError("checkpoint state contains a non-finite float (NaN or inf)")
    return b"f" + _FLOAT.pack(value)


_STANDARD: dict[type, Callable[[Any], bytes]] = {}  # filled below the encoders


def _cycle() -> MongoDBMappingError:
    return MongoDBMappingError("checkpoint state contains a reference cycle")


# "<count>:" for the item counts of almost every real container.
_COUNTS = [b"%d:" % n for n in range(256)]


def _walker(
    policy: TypePolicy, strings: dict[str, bytes], *, share: bool, track: bool
) -> Callable[[Any], bytes]:
    """One depth-first walk as closures (locals are the walk's main cost).

    With ``track``, ``path`` holds the ids of the containers being visited
    and a revisit raises the cycle error. Strings, ints, bools, dicts and
    lists, which dominate real state, are dispatched inline by the container
    loops; the bytes are exactly what ``encode`` returns for them. Each
    container's bytes are joined once, with its header as the first part.

    With ``share``, a container or object reached again (a shared
    reference) is not walked again: ``done`` maps the ids of finished ones to
    their bytes. The encoding itself still spells every reference out, as
    identity must not depend on sharing, so the bytes reused that way are
    counted against ``_MAX_EXPANSION``. Temporaries the walk creates (object
    state) are kept alive in ``pinned`` so that their ids are never reused
    while ``done`` may hold them. Without ``share`` (and so without
    ``track``, which needs it), nothing is remembered and ``visits`` counts finished
    containers down to ``_ManyVisits``.
    """
    path: set[int] = set()
    enter, leave = path.add, path.discard
    done: dict[int, bytes] = {}
    finished, remember = done.get, done.__setitem__
    pinned: list[Any] = []
    check = policy.check_value_type
    check_reference = policy.check_class_reference
    memo = strings
    get = memo.get
    counts = _COUNTS
    expanded = 0
    visits = math.inf if share else _FAST_VISITS

    def arrive(ident: int) -> bytes | None:
        """With ``share``: the bytes of a finished object reached again, or None (entering it)."""
        nonlocal expanded
        encoded = finished(ident)
        if encoded is not None:
            expanded += len(encoded)
            if expanded > _MAX_EXPANSION:
                raise MongoDBMappingError(
                    "checkpoint state repeats shared references too often to encode "
                    f"(more than {_MAX_EXPANSION >> 20} MiB); store the shared data once"
                )
            return encoded
        if track:
            if ident in path:
                raise _cycle()
            enter(ident)
        return None

    def depart(ident: int, encoded: bytes) -> bytes:
        if track:
            leave(ident)
        remember(ident, encoded)
        return encoded

    def text(value: str) -> bytes:
        encoded = memo.get(value)
        if encoded is None:
            data = value.encode("utf-8", "surrogatepass")
            encoded = memo[value] = b"s%d:%s" % (len(data), data)
        return encoded

    def header(tag: bytes, count: int) -> bytes:
        # Called once per finished container: the memo-free walk's visit budget.
        nonlocal visits
        visits -= 1
        if visits < 0:
            raise _ManyVisits
        return tag + (counts[count] if count < 256 else b"%d:" % count)

    def key_of(value: Any) -> bytes:
        if not hashable(value):
            raise _unhashable(value)
        return encode(value)

    def mapping(value: dict[Any, Any]) -> bytes:
        if share:
            reached = arrive(id(value))
            if reached is not None:
                return reached
        parts: list[bytes] = []
        append = parts.append
        for k, v in value.items():
            key = (get(k) or text(k)) if type(k) is str else key_of(k)
            cls = type(v)
            if cls is str:
                append(key + (get(v) or text(v)))
            elif cls is dict:
                append(key + mapping(v))
            elif cls is int:
                append(key + b"i%d;" % v)
            elif cls is list:
                append(key + sequence(v, b"l"))
            elif cls is bool:
                append(key + (b"T" if v else b"F"))
            else:
                append(key + encode(v))
        if len(parts) > 1:
            parts.sort()
        parts.insert(0, header(b"d", len(parts)))
        encoded = b"".join(parts)
        return depart(id(value), encoded) if share else encoded

    def sequence(value: list[Any] | tuple[Any, ...], tag: bytes) -> bytes:
        if share:
            reached = arrive(id(value))
            if reached is not None:
                return reached
        parts = [
            (get(v) or text(v)) if type(v) is str else encode(v)
            for v in value
        ]  # fmt: skip
        parts.insert(0, header(tag, len(parts)))
        encoded = b"".join(parts)
        return depart(id(value), encoded) if share else encoded

    def members(value: set[Any] | frozenset[Any], tag: bytes) -> bytes:
        if share:
            reached = arrive(id(value))
            if reached is not None:
                return reached
        parts = sorted([key_of(v) for v in value])
        parts.insert(0, header(tag, len(parts)))
        encoded = b"".join(parts)
        return depart(id(value), encoded) if share else encoded

    def instance(value: Any, cls: type) -> bytes:
        if share:
            reached = arrive(id(value))
            if reached is not None:
                return reached
        state = object_state(value)
        encoded = b"%s1:%s" % (_sized(b"o", type_key(cls).encode()), encode(state))
        if not share:
            return encoded
        pinned.append(state)
        return depart(id(value), encoded)

    def encode(value: Any) -> bytes:
        cls = type(value)
        # The mapping guard comes first: exact dict is accepted; the exact
        # built-in scalars and sequences below are known non-mappings; every
        # other class is checked by the policy (mapping guard first) before
        # any standard, enum, class or object handler runs, and before any
        # attribute of the value itself is read.
        if cls is dict:
            return mapping(value)
        if cls is str:
            return text(value)
        if cls is int:
            return b"i%d;" % value
        if cls is list:
            return sequence(value, b"l")
        if cls is bool:
            return b"T" if value else b"F"
        if value is None:
            return b"N"
        if cls is float:
            return _float(value)
        if cls is tuple:
            return sequence(value, b"t")
        if cls is bytes:
            return _sized(b"b", value)
        if cls is bytearray:
            return _sized(b"y", bytes(value))
        if issubclass(cls, type):
            return class_reference(value)
        if cls in FORM_TYPES:
            return type_form(value)
        check(cls)
        standard = _STANDARD.get(cls)
        if standard is not None:
            for nested in _nested_standard_types(value):
                check(nested)
            return standard(value)
        if cls is set:
            return members(value, b"S")
        if cls is frozenset:
            return members(value, b"z")
        if issubclass(cls, enum.Enum):
            return _sized(b"e", type_key(cls).encode()) + encode(value._value_)
        return instance(value, cls)

    def class_reference(cls: type) -> bytes:
        if cls is type(None):
            raise MongoDBMappingError(
                f"class reference {type_key(cls)} cannot be checkpointed; store plain data"
            )
        check_reference(cls)
        return _sized(b"c", type_key(cls).encode())

    def type_form(value: Any) -> bytes:
        """A type hint: its kind, then its origin (a generic alias) and arguments."""
        args = value.__args__
        if type(value) is types.GenericAlias:
            origin = value.__origin__
            if not isinstance(origin, type):
                raise MongoDBSerializationError("a generic alias is stored only over a class")
            return b"g" + class_reference(origin) + hint_arguments(args)
        # A union's NoneType is stored (and rebuilt) as None, as typeforms does.
        tag = b"|" if type(value) is types.UnionType else b"U"
        return tag + hint_arguments(tuple(None if a is type(None) else a for a in args))

    def hint_arguments(args: tuple[Any, ...]) -> bytes:
        parts = [header(b"t", len(args))]
        for arg in args:
            if arg is None:
                parts.append(b"N")
            elif arg is Ellipsis:
                parts.append(b"E")
            elif issubclass(type(arg), type):
                parts.append(class_reference(arg))
            elif type(arg) in FORM_TYPES:
                parts.append(type_form(arg))
            else:
                raise MongoDBSerializationError(
                    f"a type hint argument of type {type_key(type(arg))} is not a class or "
                    "a type hint; only builtin generics, unions and Optional of classes are "
                    "supported"
                )
        return b"".join(parts)

    return encode


def _nested_standard_types(value: Any) -> tuple[type, ...]:
    """The standard classes pickle writes inside ``value``'s own reduction."""
    cls = type(value)
    if cls is datetime.timezone:
        return (datetime.timedelta,)
    if (cls is datetime.datetime or cls is datetime.time) and value.tzinfo is not None:
        return (datetime.timezone, datetime.timedelta)
    return ()


def _unhashable(value: Any) -> MongoDBSerializationError:
    while type(value) in (tuple, frozenset):  # name the part that is not primitive
        value = next(item for item in value if not hashable(item))
    return MongoDBSerializationError(
        f"a dict key or set member of type {type_key(type(value))} is not a primitive "
        "value; keys and members must be str, int, float, bool, None, bytes, date/time "
        "values, Decimal, UUID, or tuples/frozensets of them"
    )


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


_STANDARD.update(
    {
        datetime.datetime: _datetime,
        datetime.date: lambda v: _sized(b"D", v.isoformat().encode()),
        datetime.time: _time,
        datetime.timedelta: lambda v: b"R%d,%d,%d;" % (v.days, v.seconds, v.microseconds),
        datetime.timezone: lambda v: _sized(b"Z", repr(v).encode()),
        decimal.Decimal: lambda v: _sized(b"m", str(v).encode()),
        uuid.UUID: lambda v: _sized(b"u", v.hex.encode()),
    }
)
