"""Encoding of checkpoints to bytes and back, apart from any storage.

A store keeps the bytes a :class:`CheckpointCodec` gives it and never looks
inside them; it indexes only the few columns the base derives from the model.
Every backend takes ``codec=``, so a codec that seals records (encryption
bound to namespace, thread and step) plugs in without a backend knowing.
The codec receives the record's :class:`RecordKey` on both sides for that
binding. The base wraps whatever a codec returns in an integrity envelope
(:mod:`agentflow.checkpoint.envelope`) and checks it before ``decode``, so a
codec never sees damaged bytes of a record it wrote.

:class:`JsonCodec`, the default, uses orjson because decoding must be faster
than the standard library (a 2,000-step history is decoded in well under the
time ``json.loads`` takes). orjson is stricter than ``json`` where it matters:
non-string keys and integers beyond 64 bits are refused instead of silently
converted. It writes NaN and infinities as ``null``; the codec refuses them
instead, walking the state only when the output holds a ``null`` that no
top-level None field explains, so the common case stays fast.
"""

from __future__ import annotations

import math
from typing import Any, Final, NamedTuple, Protocol, runtime_checkable

import orjson

from agentflow.checkpoint.base import Checkpoint
from agentflow.errors import CheckpointCorrupted, CheckpointNotSerializable

__all__ = ["PAYLOAD_VERSION", "CheckpointCodec", "JsonCodec", "RecordKey"]

#: Version of the JSON payload layout, stored in every payload as ``"v"``.
PAYLOAD_VERSION: Final = 1

_ORJSON_OPTIONS: Final = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


class RecordKey(NamedTuple):
    """Where a record is stored: what a codec may bind its bytes to."""

    namespace: str
    thread: str
    step: int
    #: The store's identity (16 bytes, derived from its cursor secret) when the
    #: codec has a true ``binds_store`` attribute, else empty: a codec that binds
    #: it refuses a record copied in from another store.
    store: bytes = b""


@runtime_checkable
class CheckpointCodec(Protocol):
    """Turns a checked checkpoint into stored bytes and back.

    ``encode`` receives a checkpoint whose fields the base has checked, whose
    ``ts`` is set and whose values are already redacted; it raises
    :class:`~agentflow.errors.CheckpointNotSerializable` for a value it cannot
    encode. ``decode`` raises :class:`~agentflow.errors.CheckpointCorrupted`
    for bytes it did not write or that do not belong to ``key``, and never
    returns other data. Both must be safe to call from any thread.

    A codec whose ``binds_store`` attribute is true gets the store's identity
    in :attr:`RecordKey.store`; the base then reads the store's secret before
    the first encode or decode (which a store without it creates).
    """

    def encode(self, cp: Checkpoint, key: RecordKey) -> bytes: ...

    def decode(self, payload: bytes, key: RecordKey, revision: int) -> Checkpoint: ...


def _has_non_finite(value: Any) -> bool:
    """Whether ``value`` holds a NaN or an infinity anywhere orjson would write one.

    It runs on every put whose output holds a null no top-level field explains (a
    None in the state, as agent messages' optional fields are), so it is one loop
    over a stack that settles the exact JSON types by identity before asking
    ``isinstance`` about subclasses: three times faster than a call per value."""
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or item is None or kind is int or kind is bool:
            continue
        if kind is dict:
            extend(item.values())
        elif kind is list or kind is tuple:
            extend(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            extend(item.values())
        elif isinstance(item, list | tuple):
            extend(item)
    return False


def _refuse(value: Any) -> Any:
    raise TypeError(f"type {type(value).__name__} is not JSON")


class JsonCodec:
    """The default codec: the checkpoint as one JSON object (orjson)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "JsonCodec()"

    def encode(self, cp: Checkpoint, key: RecordKey) -> bytes:
        payload = {
            "v": PAYLOAD_VERSION,
            "thread": cp.thread,
            "step": cp.step,
            "state": cp.state,
            "next": cp.next,
            "parent": cp.parent,
            "ts": cp.ts,
            "interrupted": cp.interrupted,
            "interrupt_node": cp.interrupt_node,
            "interrupt_payload": cp.interrupt_payload,
            "wake_at": cp.wake_at,
            "extra": cp.extra,
        }
        try:
            blob = orjson.dumps(payload, default=_refuse, option=_ORJSON_OPTIONS)
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise CheckpointNotSerializable(
                f"checkpoint of thread {cp.thread!r} step {cp.step} is not JSON-serializable: {exc}"
            ) from exc
        # orjson writes NaN and infinities as null: only when the output holds more
        # nulls than the top-level None fields account for can one hide in there.
        nulls = (
            (cp.parent is None)
            + (cp.interrupt_node is None)
            + (cp.interrupt_payload is None)
            + (cp.wake_at is None)
        )
        if blob.count(b"null") > nulls and _has_non_finite(payload):
            raise CheckpointNotSerializable(
                f"checkpoint of thread {cp.thread!r} step {cp.step} holds NaN or infinity, "
                "which JSON cannot represent"
            )
        return blob

    def decode(self, payload: bytes, key: RecordKey, revision: int) -> Checkpoint:
        try:
            data = orjson.loads(payload)
            if not isinstance(data, dict):
                raise TypeError("payload is not a JSON object")
            if data.get("v") != PAYLOAD_VERSION:
                raise ValueError(f"unknown payload version {data.get('v')!r}")
            return Checkpoint(
                thread=_typed(data, "thread", str),
                step=_typed(data, "step", int),
                state=_typed(data, "state", dict),
                next=tuple(_names(data["next"])),
                parent=_optional(data, "parent"),
                ts=_typed(data, "ts", str),
                interrupted=_typed(data, "interrupted", bool),
                interrupt_node=_optional(data, "interrupt_node"),
                interrupt_payload=data["interrupt_payload"],
                wake_at=_optional(data, "wake_at"),
                extra=_typed(data, "extra", dict),
                revision=revision,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointCorrupted(
                f"stored checkpoint of thread {key.thread!r} step {key.step} cannot be decoded: "
                f"{type(exc).__name__}"
            ) from exc


def _typed(data: dict[str, Any], name: str, kind: type) -> Any:
    value = data[name]
    if type(value) is not kind:
        raise TypeError(f"field {name!r} is not {kind.__name__}")
    return value


def _optional(data: dict[str, Any], name: str) -> str | None:
    value = data[name]
    if value is not None and type(value) is not str:
        raise TypeError(f"field {name!r} is not a str or null")
    return value


def _names(value: Any) -> list[str]:
    if type(value) is not list or not all(type(name) is str for name in value):
        raise TypeError("field 'next' is not a list of str")
    return value
