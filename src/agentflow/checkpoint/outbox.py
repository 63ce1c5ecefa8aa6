"""A record's outbox on its way into the store's event log: the delivery writes,
and what a step's transaction needs to deliver it in place.

A record queues an event as ``pending`` in the write that causes it; the
event is then appended to the event log (``append_once``) and the outbox
entry marked ``delivered`` with the log's cursor, by one more write
(:func:`plan_event_deliveries`, or :func:`plan_event_delivery` for one).
SQLite and PostgreSQL skip that write for the events pending after a
``commit_step`` or ``start_run``: the same transaction appends them
(:class:`Delivery`) and writes the record with them delivered
(:func:`delivered`), so a step, its receipts and its events commit together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agentflow.checkpoint.envelope import BODY, RunParts
from agentflow.checkpoint.plans import Guard, Write, next_revision
from agentflow.checkpoint.rows import encode_body, head_of, identity_of
from agentflow.durable.errors import DurableError
from agentflow.durable.run.events import (
    EventCursor,
    EventDelivery,
    EventOutboxEntry,
    run_member,
)
from agentflow.durable.run.record import DurableCheckpoint, evolve
from agentflow.durable.wire.canonical import canonical_json
from agentflow.durable.wire.validators import CapabilityRef, is_blank, validate_sha256

__all__ = [
    "Delivery",
    "EventRow",
    "delivered",
    "event_rows",
    "pending_of",
    "plan_event_deliveries",
    "plan_event_delivery",
]


def pending_of(record: DurableCheckpoint) -> list[EventOutboxEntry]:
    """The outbox entries of ``record`` not yet delivered, in queue order."""
    return [entry for entry in record.event_outbox if entry.state == "pending"]


@dataclass(frozen=True, slots=True)
class EventRow:
    """One event as an event log row holds it: its id, digest, runs and stored bytes."""

    event_id: str
    payload_digest: str
    run_id: str | None
    parent_run_id: str | None
    stored: bytes


def event_rows(parts: RunParts, entries: Sequence[EventOutboxEntry]) -> list[EventRow]:
    """The log rows of pending ``entries``, each checked against its digest first
    (``event_identity_conflict``: an outbox entry edited in the store is not sent)."""
    rows = []
    for entry in entries:
        entry.verify_payload()
        data = canonical_json(entry.event, what="event payload")
        rows.append(
            EventRow(
                entry.event_id,
                entry.payload_digest,
                run_member(entry.event, "run_id"),
                run_member(entry.event, "parent_run_id"),
                parts.seal_event(entry.event_id, data),
            )
        )
    return rows


def delivered(
    record: DurableCheckpoint, store_ref: CapabilityRef, cursors: Sequence[dict[str, Any]]
) -> DurableCheckpoint:
    """``record`` with its pending outbox entries delivered at ``cursors`` (the log's
    cursors of each, in order) and ``event_cursor`` the last: what the write that
    appended them in its own transaction stores (its revision, not one more)."""
    pending = iter(cursors)
    outbox: list[EventOutboxEntry] = []
    last: EventCursor | None = record.event_cursor
    for entry in record.event_outbox:
        if entry.state != "pending":
            outbox.append(entry)
            continue
        last = EventCursor(store_ref, next(pending), entry.event_id)
        outbox.append(replace(entry, state="delivered", cursor=last.to_dict()))
    return evolve(record, event_outbox=outbox, event_cursor=last)


@dataclass(frozen=True, slots=True)
class Delivery:
    """What a transaction needs to deliver a record's pending events itself: their
    rows (encoded and sealed before it), the store's cursor signer and reference,
    and its parts (to seal the record's new body)."""

    rows: Sequence[EventRow]
    sign: Callable[[int], dict[str, Any]]
    store_ref: CapabilityRef
    parts: RunParts

    def done(
        self, record: DurableCheckpoint, sequences: Sequence[int]
    ) -> tuple[DurableCheckpoint, bytes]:
        """``record`` with its events delivered, the log having accepted them (or their
        ids before) at ``sequences``, and its stored body."""
        done = delivered(record, self.store_ref, [self.sign(n) for n in sequences])
        return done, self.parts.seal(done.checkpoint_key, BODY, encode_body(done))


def plan_event_delivery(
    snapshot: DurableCheckpoint,
    claim_token: str | None,
    event_id: str,
    payload_digest: str,
    cursor: EventCursor,
) -> Write:
    """Mark one pending outbox entry delivered at ``cursor``; claim and terminal stay.

    ``claim_token`` is the stored claim (None for an unclaimed or terminal record).
    """
    delivery = EventDelivery(event_id, payload_digest, cursor)
    return plan_event_deliveries(snapshot, claim_token, (delivery,))


def plan_event_deliveries(
    snapshot: DurableCheckpoint, claim_token: str | None, deliveries: Sequence[EventDelivery]
) -> Write:
    """Mark several pending outbox entries delivered, in order, as one write (each as
    :func:`plan_event_delivery`); the record's ``event_cursor`` becomes the last cursor.
    Only the head and the body are written (the journals stay as stored)."""
    if not deliveries:
        raise DurableError("checkpoint_event_outbox_invalid", "nothing to deliver")
    outbox = list(snapshot.event_outbox)
    places = {entry.event_id: i for i, entry in enumerate(outbox)}
    for delivery in deliveries:
        event_id, cursor = delivery.event_id, delivery.cursor
        if not isinstance(event_id, str) or is_blank(event_id):
            raise DurableError("checkpoint_event_outbox_invalid", "event_id must be non-empty")
        validate_sha256(delivery.payload_digest, "event_outbox.payload_digest")
        cursor.validate()
        if cursor.last_event_id != event_id:
            raise DurableError(
                "checkpoint_event_cursor_invalid",
                "event cursor last_event_id must match the delivered event",
            )
        index = places.get(event_id)
        if index is None or outbox[index].state != "pending":
            raise DurableError(
                "checkpoint_event_outbox_invalid", f"no pending outbox entry {event_id!r}"
            )
        if outbox[index].payload_digest != delivery.payload_digest:
            raise DurableError(
                "event_identity_conflict", f"outbox entry {event_id!r} has another digest"
            )
        outbox[index] = replace(outbox[index], state="delivered", cursor=cursor.to_dict())
    guard = Guard(
        revision=snapshot.revision,
        claim_token=claim_token,
        terminal=snapshot.terminal_result is not None,
        identity=identity_of(snapshot),
        claimed_cycle=snapshot.claimed_cycle,
    )
    record = evolve(
        snapshot,
        event_outbox=outbox,
        event_cursor=deliveries[-1].cursor,
        claim_token=claim_token,
        revision=next_revision(snapshot.revision),
    )
    record.validate()
    head = head_of(record, identity=guard.identity)
    return Write(record.checkpoint_key, guard, head, True, encode_body(record), None, record)
