"""Accepted-once events: the outbox entry, the cursor, and the append rules.

A run queues each event in its record's outbox (``pending``) in the same
write as the state change that caused it, then appends it to an event store
with ``append_once(event_id, payload_digest, event)`` and records the
delivery (``delivered`` + cursor). A crash in between re-sends the same id
and digest, which the store accepts once: the second append answers
``inserted=False`` with the first cursor. A different payload under an
accepted id is an identity conflict and is refused, never overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentflow.durable.errors import DurableConflict, DurableError
from agentflow.durable.wire.canonical import validate_i_json
from agentflow.durable.wire.digests import event_payload_digest
from agentflow.durable.wire.validators import (
    CapabilityRef,
    is_blank,
    require_non_empty,
    validate_sha256,
)
from agentflow.errors import InvalidCursor

__all__ = [
    "EVENT_CURSOR_SCHEMA",
    "LIFECYCLE_EVENT_TYPES",
    "RUN_EVENT_VERSION",
    "AcceptedEvent",
    "AppendOnceResult",
    "EventCursor",
    "EventDelivery",
    "EventOutboxEntry",
    "EventPage",
    "check_append",
    "run_event",
    "repeated_append",
    "resolve_append",
    "run_member",
    "sequence_of",
]

EVENT_CURSOR_SCHEMA = "vv-agent.event-cursor.v1"
#: The wire version of a run event (the original's ``RunEventVersion::v1``).
RUN_EVENT_VERSION = "v1"
#: The lifecycle events a durable run emits, by the original's wire names.
LIFECYCLE_EVENT_TYPES = (
    "checkpoint_created",
    "checkpoint_resumed",
    "operation_ambiguous",
    "operation_replayed",
    "reconciliation_required",
    "reconciliation_resolved",
    "model_retry_duplicate_risk",
)
_OUTBOX = "checkpoint_event_outbox_invalid"
_CURSOR = "checkpoint_event_cursor_invalid"


@dataclass(frozen=True, slots=True)
class EventCursor:
    """Where a delivered event landed: the store's reference and its cursor value."""

    store_ref: CapabilityRef
    value: Any
    last_event_id: str | None = None
    schema_version: str = EVENT_CURSOR_SCHEMA

    def validate(self) -> None:
        if self.schema_version != EVENT_CURSOR_SCHEMA:
            raise DurableError(
                "checkpoint_event_cursor_schema_unsupported",
                "unsupported event cursor schema_version",
            )
        self.store_ref.validate("event cursor store_ref")
        validate_i_json(self.value, "event cursor value")
        if self.last_event_id is not None and (
            not isinstance(self.last_event_id, str) or is_blank(self.last_event_id)
        ):
            raise DurableError(_CURSOR, "last_event_id must be non-empty when present")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "store_ref": self.store_ref.to_dict(),
            "value": self.value,
            "last_event_id": self.last_event_id,
        }

    @classmethod
    def from_dict(cls, value: object) -> EventCursor:
        if not isinstance(value, Mapping) or set(value) != {
            "schema_version",
            "store_ref",
            "value",
            "last_event_id",
        }:
            raise DurableError(
                _CURSOR, "event cursor must be {schema_version, store_ref, value, last_event_id}"
            )
        cursor = cls(
            store_ref=CapabilityRef.from_dict(value["store_ref"], "event cursor store_ref"),
            value=value["value"],
            last_event_id=value["last_event_id"],
            schema_version=value["schema_version"],
        )
        cursor.validate()
        return cursor


@dataclass(frozen=True, slots=True)
class EventDelivery:
    """Where one outbox entry (its id and digest) landed: what a record's delivery
    write marks it ``delivered`` with."""

    event_id: str
    payload_digest: str
    cursor: EventCursor


def run_event(
    event_type: str,
    *,
    event_id: str,
    run_id: str,
    trace_id: str,
    cycle_index: int,
    agent_name: str,
    created_at: float,
    **payload: Any,
) -> dict[str, Any]:
    """A run event as the original serializes its ``RunEvent``: the payload's members
    and ``type`` beside ``version``, ``event_id``, ``run_id``, ``trace_id``,
    ``created_at`` (seconds, microsecond precision), ``cycle_index`` and
    ``agent_name`` (no session, parent or metadata members: a durable run's
    lifecycle events have none)."""
    for name, value in (("event_id", event_id), ("run_id", run_id), ("trace_id", trace_id)):
        require_non_empty(value, name)
    return {
        **payload,
        "type": event_type,
        "version": RUN_EVENT_VERSION,
        "event_id": event_id,
        "run_id": run_id,
        "trace_id": trace_id,
        "created_at": created_at,
        "cycle_index": cycle_index,
        "agent_name": agent_name,
    }


@dataclass(frozen=True, slots=True)
class AppendOnceResult:
    """``inserted`` is False when the event was accepted before; ``cursor`` is the first one."""

    inserted: bool
    cursor: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AcceptedEvent:
    """One event as an event store holds it."""

    event_id: str
    payload_digest: str
    event: dict[str, Any]
    cursor: dict[str, Any]


@dataclass(frozen=True, slots=True)
class EventPage:
    """A page of one run's events in acceptance order; ``next_after`` is None at the end."""

    events: list[AcceptedEvent]
    next_after: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class EventOutboxEntry:
    """An event waiting in (``pending``) or delivered from (``delivered``) a record's outbox."""

    event_id: str
    payload_digest: str
    event: dict[str, Any]
    state: Literal["pending", "delivered"] = "pending"
    cursor: dict[str, Any] | None = None

    @classmethod
    def pending(cls, event_id: str, event: dict[str, Any]) -> EventOutboxEntry:
        """A pending entry for ``event`` with its digest computed."""
        entry = cls(event_id, event_payload_digest(event), event)
        entry.validate()
        return entry

    def validate(self) -> None:
        if not isinstance(self.event_id, str) or is_blank(self.event_id):
            raise DurableError(_OUTBOX, "event_id must be non-empty")
        validate_sha256(self.payload_digest, "event_outbox.payload_digest")
        if self.state not in ("pending", "delivered"):
            raise DurableError(_OUTBOX, "outbox state must be pending or delivered")
        if not isinstance(self.event, Mapping):
            raise DurableError(_OUTBOX, "outbox event must be an object")
        if (self.state == "pending") != (self.cursor is None):
            raise DurableError(
                _OUTBOX, "pending entries have no cursor and delivered entries have one"
            )
        validate_i_json(self.event, "event outbox event")
        if self.cursor is not None:
            validate_i_json(self.cursor, "event outbox cursor")

    def verify_payload(self) -> None:
        """Refuse (``event_identity_conflict``) an entry whose digest does not match its event."""
        self.validate()
        if event_payload_digest(self.event) != self.payload_digest:
            raise DurableError(
                "event_identity_conflict", "outbox payload digest does not match event"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "payload_digest": self.payload_digest,
            "state": self.state,
            "event": self.event,
            "cursor": self.cursor,
        }

    @classmethod
    def from_dict(cls, value: object) -> EventOutboxEntry:
        """Read the wire form (shape only; :meth:`verify_payload` checks the digest)."""
        if not isinstance(value, Mapping):
            raise DurableError(_OUTBOX, "outbox entry must be an object")
        for name in ("event_id", "payload_digest", "state"):
            if not isinstance(value.get(name), str):
                raise DurableError(_OUTBOX, f"{name} must be a string")
        if "event" not in value:
            raise DurableError(_OUTBOX, "outbox event is required")
        entry = cls(
            event_id=value["event_id"],
            payload_digest=value["payload_digest"],
            event=value["event"],
            state=value["state"],
            cursor=value.get("cursor"),
        )
        entry.validate()
        return entry


def check_append(event_id: object, payload_digest: object, event: object) -> str:
    """Check an ``append_once`` call's arguments; return the event's true digest.

    Order (the original's): ``event_id`` non-blank (``checkpoint_value_invalid``),
    ``payload_digest`` lowercase SHA-256 (``checkpoint_digest_invalid``),
    ``event`` an object (``event_payload_invalid``).
    """
    require_non_empty(event_id, "event_id")
    validate_sha256(payload_digest, "payload_digest")
    return event_payload_digest(event)


def resolve_append(
    payload_digest: str, computed_digest: str, stored_digest: str | None
) -> Literal["insert", "duplicate"]:
    """Decide an ``append_once`` against what the store holds under the id.

    An id already accepted with another digest is an ``event_identity_conflict``
    (checked first, as the contract orders it); a ``payload_digest`` that is
    not the event's own is ``event_payload_digest_mismatch`` (the original's
    check, which decides every case the contract leaves open).
    """
    if stored_digest is not None and stored_digest != payload_digest:
        raise DurableError(
            "event_identity_conflict", "the event id was recorded with a different digest"
        )
    if computed_digest != payload_digest:
        raise DurableError(
            "event_payload_digest_mismatch", "payload_digest does not match the canonical event"
        )
    return "insert" if stored_digest is None else "duplicate"


def repeated_append(
    event_id: str, payload_digest: str, computed_digest: str, stored: tuple[str, int] | None
) -> AppendOnceResult:
    """The answer to an append that inserted nothing, from what the store holds under
    the id: ``stored`` = (digest, sequence) of a ``{"sequence": n}`` store, or None.

    A duplicate gets the first acceptance's cursor; otherwise
    :func:`resolve_append` raises its refusal, and an id the store neither
    accepted nor holds is a :class:`DurableConflict` (a re-read decides).
    """
    digest = None if stored is None else stored[0]
    if resolve_append(payload_digest, computed_digest, digest) == "insert" or stored is None:
        raise DurableConflict(f"event {event_id!r} was neither accepted nor found")
    return AppendOnceResult(False, {"sequence": stored[1]})


def run_member(event: Mapping[str, Any], member: str) -> str | None:
    """The run an event names in ``member`` (``run_id``, ``parent_run_id``), None for none.

    Only a non-empty string names a run; an event without one is accepted but
    belongs to no run's replay.
    """
    value = event.get(member)
    return value if isinstance(value, str) and value else None


def sequence_of(after: Mapping[str, Any] | None) -> int:
    """The sequence a ``{"sequence": n}`` event cursor resumes after (0 for None)."""
    if after is None:
        return 0
    value = after.get("sequence") if isinstance(after, Mapping) else None
    if (
        not isinstance(after, Mapping)
        or set(after) != {"sequence"}
        or isinstance(value, bool)
        or not isinstance(value, int)
        or value < 0
    ):
        raise InvalidCursor("an event cursor of this store is {'sequence': n}")
    return value
