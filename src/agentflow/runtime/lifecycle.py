"""A durable run's lifecycle events, as the original emits them, and their delivery.

Seven events, each with the original's wire name, ``evt_`` id coordinates
(:func:`~agentflow.durable.stable_event_id`) and payload
(:func:`~agentflow.durable.run.events.run_event`):

=============================  =======================  =====================================
event                          id coordinates           emitted when
=============================  =======================  =====================================
``checkpoint_created``         ``["0"]``                a thread's record is created
``checkpoint_resumed``         ``[resume_attempt]``     a recovery claim takes the run
``operation_ambiguous``        ``[operation, attempt]`` a call's outcome is unknown
``reconciliation_required``    ``[operation, attempt]`` the run waits for a decision on it
``model_retry_duplicate_risk`` ``[operation, attempt+1]`` the model policy retries it
``reconciliation_resolved``    ``[operation, attempt]`` a decision settled it (not an abort)
``operation_replayed``         ``[operation, attempt]`` a call is answered from its receipt
=============================  =======================  =====================================

Each is queued in the record's outbox by the write that stores its cause
(the lease carries it to that write) and delivered from there into the
store's accepted-once event log (:func:`deliver`): by the step's own
transaction on SQLite and PostgreSQL, otherwise by an ``append_once`` per
event and one write marking them delivered, at least once, so a process
that dies in between leaves them pending for the next holder, and the log
accepts each id once. A fact emitted again (a call found ambiguous by two
recoveries) keeps its first event.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from agentflow.checkpoint.store import Store
from agentflow.durable import (
    MODEL_RISK,
    TOOL_RISK,
    DurableCheckpoint,
    DurableEventStore,
    DurableStore,
    EventCursor,
    EventOutboxEntry,
    OperationJournalEntry,
    OperationKind,
    ReconciliationDecisionKind,
    ResumeObservation,
    stable_event_id,
)
from agentflow.durable.errors import DurableError
from agentflow.durable.run.events import EventDelivery, run_event
from agentflow.durable.wire.validators import CapabilityRef

__all__ = [
    "INTERRUPTION_REASON",
    "ambiguous",
    "created",
    "deliver",
    "duplicate_risk",
    "replayed",
    "required",
    "resolved",
    "resumed",
]

#: Why a run waiting for a decision stopped (the original's interruption reason).
INTERRUPTION_REASON = "resume_requires_reconciliation"
#: Where an outbox entry is recorded delivered to without an event log (the original's).
_RAW_SINK = CapabilityRef("events.raw-sink", "1")


def _event(
    record: DurableCheckpoint,
    event_type: str,
    coordinates: Sequence[str],
    cycle_index: int,
    **payload: Any,
) -> EventOutboxEntry:
    """The pending outbox entry of one lifecycle event of ``record``'s run."""
    key = record.checkpoint_key
    event_id = stable_event_id(key, event_type, coordinates)
    agent = record.run_definition.get("agent")
    name = agent.get("name") if isinstance(agent, dict) else None
    event = run_event(
        event_type,
        event_id=event_id,
        run_id=record.root_run_id,
        trace_id=record.trace_id,
        cycle_index=cycle_index,
        agent_name=name if isinstance(name, str) else key,
        created_at=time.time_ns() // 1000 / 1e6,
        checkpoint_key=key,
        **payload,
    )
    return EventOutboxEntry.pending(event_id, event)


def _operation(entry: OperationJournalEntry) -> dict[str, Any]:
    return {"operation_id": entry.operation_id, "operation_kind": entry.kind.value}


def created(record: DurableCheckpoint) -> EventOutboxEntry:
    """``checkpoint_created``: the record of a new run (cycle 0, attempt 1)."""
    return _event(record, "checkpoint_created", ["0"], 0, resume_attempt=1)


def resumed(record: DurableCheckpoint) -> EventOutboxEntry:
    """``checkpoint_resumed``: a recovery claim of ``record`` (as claimed)."""
    attempt = record.resume_attempt
    return _event(
        record, "checkpoint_resumed", [str(attempt)], record.cycle_index, resume_attempt=attempt
    )


def ambiguous(record: DurableCheckpoint, entry: OperationJournalEntry) -> EventOutboxEntry:
    """``operation_ambiguous``: the ambiguous ``entry`` (a tool's idempotency support
    is named; a model call's is null)."""
    support = entry.idempotency_support
    return _event(
        record,
        "operation_ambiguous",
        [entry.operation_id, str(entry.attempt)],
        entry.cycle_index,
        **_operation(entry),
        risk=MODEL_RISK if entry.kind is OperationKind.MODEL else TOOL_RISK,
        idempotency_support=None if support is None else support.value,
    )


def required(
    record: DurableCheckpoint, entry: OperationJournalEntry, observation: ResumeObservation
) -> EventOutboxEntry:
    """``reconciliation_required``: the run waits for a decision on ``entry``."""
    return _event(
        record,
        "reconciliation_required",
        [entry.operation_id, str(entry.attempt)],
        entry.cycle_index,
        **_operation(entry),
        interruption_reason=INTERRUPTION_REASON,
        resume_observation=observation.to_dict(),
    )


def duplicate_risk(record: DurableCheckpoint, entry: OperationJournalEntry) -> EventOutboxEntry:
    """``model_retry_duplicate_risk``: the model policy retries the ambiguous ``entry``
    (its id names the attempt the retry makes)."""
    return _event(
        record,
        "model_retry_duplicate_risk",
        [entry.operation_id, str(entry.attempt + 1)],
        entry.cycle_index,
        **_operation(entry),
        risk=MODEL_RISK,
    )


def resolved(
    record: DurableCheckpoint, entry: OperationJournalEntry, decision: ReconciliationDecisionKind
) -> EventOutboxEntry:
    """``reconciliation_resolved``: ``decision`` settled the ambiguous ``entry``."""
    return _event(
        record,
        "reconciliation_resolved",
        [entry.operation_id, str(entry.attempt)],
        entry.cycle_index,
        **_operation(entry),
        decision=decision.value,
    )


def replayed(record: DurableCheckpoint, entry: OperationJournalEntry) -> EventOutboxEntry:
    """``operation_replayed``: a call answered from its settled ``entry``, not made."""
    return _event(
        record,
        "operation_replayed",
        [entry.operation_id, str(entry.attempt)],
        entry.cycle_index,
        **_operation(entry),
        receipt_state=entry.state.value,
    )


async def _cursor(events: DurableEventStore, entry: EventOutboxEntry) -> EventCursor:
    """Append ``entry`` to the log; the cursor it is recorded delivered at."""
    try:
        appended = await events.append_once(entry.event_id, entry.payload_digest, entry.event)
    except DurableError as refused:
        if refused.code != "event_identity_conflict":
            raise
        # the log accepted this id with its first payload (the fact emitted again,
        # after its first outbox entry left with its cycle): the first one stands
        return EventCursor(events.store_ref, {"event_id": entry.event_id}, entry.event_id)
    return EventCursor(events.store_ref, appended.cursor, entry.event_id)


async def deliver(
    store: DurableStore, record: DurableCheckpoint, *, claim_token: str | None, batches: bool
) -> DurableCheckpoint:
    """Deliver ``record``'s pending outbox entries (as stored, under ``claim_token``,
    None for an unclaimed record): each appended once to the store's event log
    (a store without one takes the original's raw-sink cursor), then all recorded
    delivered by one write (``batches``: an agentflow store; else one write each).
    Returns the record as stored."""
    pending = [entry for entry in record.event_outbox if entry.state == "pending"]
    if not pending:
        return record
    deliveries = []
    for entry in pending:
        entry.verify_payload()
        if isinstance(store, DurableEventStore):
            cursor = await _cursor(store, entry)
        else:
            cursor = EventCursor(_RAW_SINK, {"event_id": entry.event_id}, entry.event_id)
        deliveries.append(EventDelivery(entry.event_id, entry.payload_digest, cursor))
    if batches:
        return await cast(Store, store).record_event_deliveries(
            record, deliveries, claim_token=claim_token
        )
    for delivery in deliveries:
        record = await store.record_event_delivery(
            record,
            claim_token=claim_token,
            event_id=delivery.event_id,
            payload_digest=delivery.payload_digest,
            cursor=delivery.cursor,
        )
    return record
