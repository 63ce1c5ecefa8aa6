"""Encoding of checkpoints to bytes and back, apart from any storage.

Backends store the bytes from :func:`encode` plus the few columns in
:class:`EncodedCheckpoint` that they index on; they never look inside the
payload. This is the seam where a sealing codec (encryption bound to
namespace, thread and step) will sit later.

Encoding uses orjson because decoding must be faster than the standard
library (a 2,000-step history is decoded in well under the time ``json.loads``
takes). orjson is stricter than ``json`` where it matters: non-string keys and
integers beyond 64 bits are refused instead of silently converted. It writes
NaN and infinities as ``null``; :func:`encode` refuses them instead, walking
the state only when the output holds a ``null`` that no top-level None field
explains, so the common case stays fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from agentflow.checkpoint.base import Checkpoint, Redactor
from agentflow.errors import (
    CheckpointCorrupted,
    CheckpointNotSerializable,
    InvalidArgument,
    InvalidThreadId,
)

__all__ = [
    "PAYLOAD_VERSION",
    "EncodedCheckpoint",
    "decode",
    "encode",
    "parse_instant",
    "utc_now_iso",
    "validate_namespace",
    "validate_step",
    "validate_thread",
]

#: Version of the payload layout, stored in every payload as ``"v"``.
PAYLOAD_VERSION = 1

_ORJSON_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


@dataclass(frozen=True, slots=True)
class EncodedCheckpoint:
    """A checkpoint ready for storage: the payload bytes and indexable fields."""

    thread: str
    step: int
    payload: bytes
    ts: str
    #: ``ts`` as microseconds since the epoch, so stores compare instants.
    ts_us: int
    interrupted: bool
    done: bool
    wake_at: str | None


def utc_now_iso() -> str:
    """The current time as ISO-8601 UTC with microseconds and a ``+00:00`` offset."""
    return datetime.now(UTC).isoformat()


def parse_instant(value: str, *, what: str = "timestamp") -> int:
    """Parse an ISO-8601 timestamp to microseconds since the epoch.

    A timestamp without an offset is taken as UTC. Raises
    :class:`~agentflow.errors.InvalidArgument` for anything unparseable.
    """
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be an ISO-8601 string, got {type(value).__name__}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidArgument(f"{what} {value!r} is not an ISO-8601 timestamp") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    delta = parsed - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _is_unicode(text: str) -> bool:
    """False for a lone surrogate, which no store can keep as UTF-8 text."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def validate_thread(thread: object) -> str:
    """Return ``thread`` if it is a usable thread id, else raise InvalidThreadId."""
    if not isinstance(thread, str) or not thread or "\x00" in thread or not _is_unicode(thread):
        raise InvalidThreadId(
            f"thread id must be a non-empty Unicode string without NUL, got {thread!r}"
        )
    return thread


def validate_step(step: object) -> int:
    """Return ``step`` if it is a non-negative int (not a bool), else raise."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidArgument(f"step must be a non-negative int, got {step!r}")
    if step >= 2**63:
        raise InvalidArgument(f"step {step} does not fit in 64 bits")
    return step


def validate_namespace(namespace: object) -> str:
    """Map the constructor's ``namespace`` to its stored form ("" for None)."""
    if namespace is None:
        return ""
    if (
        not isinstance(namespace, str)
        or not namespace
        or "\x00" in namespace
        or not _is_unicode(namespace)
    ):
        raise InvalidArgument(
            f"namespace must be None or a non-empty string without NUL, got {namespace!r}"
        )
    return namespace


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_non_finite(v) for v in value)
    return False


def _top_level_nulls(payload: dict[str, Any]) -> int:
    return sum(value is None for value in payload.values())


def _refuse(value: Any) -> Any:
    raise TypeError(f"type {type(value).__name__} is not JSON")


def encode(cp: Checkpoint, redact: Redactor) -> EncodedCheckpoint:
    """Validate, redact and encode ``cp``. Raises before anything is stored."""
    thread = validate_thread(cp.thread)
    step = validate_step(cp.step)
    ts = cp.ts or utc_now_iso()
    ts_us = parse_instant(ts, what=f"checkpoint ts of thread {thread!r}")
    if cp.wake_at is not None:
        parse_instant(cp.wake_at, what=f"wake_at of thread {thread!r}")
    payload = {
        "v": PAYLOAD_VERSION,
        "thread": thread,
        "step": step,
        "state": redact(cp.state),
        "next": cp.next,
        "parent": cp.parent,
        "ts": ts,
        "interrupted": cp.interrupted,
        "interrupt_node": cp.interrupt_node,
        "interrupt_payload": redact(cp.interrupt_payload),
        "wake_at": cp.wake_at,
        "extra": redact(cp.extra),
    }
    try:
        blob = orjson.dumps(payload, default=_refuse, option=_ORJSON_OPTIONS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise CheckpointNotSerializable(
            f"checkpoint of thread {thread!r} step {step} is not JSON-serializable: {exc}"
        ) from exc
    # orjson writes NaN and infinities as null: only when the output holds more
    # nulls than the top-level None fields account for can one hide in there.
    if blob.count(b"null") > _top_level_nulls(payload) and _has_non_finite(payload):
        raise CheckpointNotSerializable(
            f"checkpoint of thread {thread!r} step {step} holds NaN or infinity, "
            "which JSON cannot represent"
        )
    return EncodedCheckpoint(
        thread=thread,
        step=step,
        payload=blob,
        ts=ts,
        ts_us=ts_us,
        interrupted=bool(cp.interrupted),
        done=not cp.next and not cp.interrupted,
        wake_at=cp.wake_at,
    )


def decode(blob: bytes | bytearray | memoryview | str, revision: int) -> Checkpoint:
    """Decode stored bytes into a :class:`Checkpoint` carrying ``revision``.

    Raises :class:`~agentflow.errors.CheckpointCorrupted` for anything that is
    not a payload this module wrote.
    """
    try:
        data = orjson.loads(blob)
        if not isinstance(data, dict):
            raise TypeError("payload is not a JSON object")
        if data.get("v") != PAYLOAD_VERSION:
            raise ValueError(f"unknown payload version {data.get('v')!r}")
        if not isinstance(data["state"], dict) or not isinstance(data["step"], int):
            raise TypeError("payload state or step has the wrong type")
        return Checkpoint(
            thread=data["thread"],
            step=data["step"],
            state=data["state"],
            next=tuple(data["next"]),
            parent=data["parent"],
            ts=data["ts"],
            interrupted=data["interrupted"],
            interrupt_node=data["interrupt_node"],
            interrupt_payload=data["interrupt_payload"],
            wake_at=data["wake_at"],
            extra=data["extra"],
            revision=revision,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointCorrupted(f"stored checkpoint cannot be decoded: {exc}") from exc
