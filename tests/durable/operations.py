"""Every operation of a durable store and its event store, called once in a run's order.

The backend tests that count what each operation sends (statements,
commands, scripts) drive this one sequence through their own recorder and
assert their own counts.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace
from typing import Protocol, TypeVar

import pytest

from agentflow.durable import EventCursor, EventOutboxEntry, event_payload_digest
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import RevisionConflict
from agentflow.durable.store import DurableEventStore, DurableStore
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS, take
from agentflow.durable.wire.validators import CapabilityRef

T = TypeVar("T")


class Recorder(Protocol):
    """``op(name, call)``: await ``call``, recording what it sent under ``name``."""

    def __call__(self, name: str, call: Awaitable[T], /) -> Awaitable[T]: ...


async def every_operation(
    store: DurableStore, events: DurableEventStore, op: Recorder, events_ref: str
) -> None:
    """Each operation once, recorded under its name: create, claim, renew, record_operation,
    refused (a stale progress), progress, finalize_claimed, record_event_delivery (of an
    event stored in ``events_ref``), acknowledge_terminal, load, list_runs (a page of two
    of four running runs), delete, append_once, append_once again, replay."""
    pending = EventOutboxEntry.pending("evt-1", {"type": "run_completed"})
    await op("create", store.create(make_record(event_outbox=[pending])))
    record = await op("claim", take(store, "owner-a"))
    await op("renew", store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS))
    entry = make_tool_entry("run-1", 1)
    record = await op(
        "record_operation", store.record_operation(record, entry, claim_token="owner-a")
    )
    with pytest.raises(RevisionConflict):
        await op("refused", store.progress(replace(record, revision=1), claim_token="owner-a"))
    record = await op("progress", store.progress(record, claim_token="owner-a"))
    terminal = replace(
        record, status=CheckpointStatus.COMPLETED, terminal_result={"status": "completed"}
    )
    record = await op("finalize_claimed", store.finalize_claimed(terminal, claim_token="owner-a"))
    cursor = EventCursor(CapabilityRef(events_ref, "1"), {"sequence": 1}, "evt-1")
    record = await op(
        "record_event_delivery",
        store.record_event_delivery(
            record,
            claim_token=None,
            event_id="evt-1",
            payload_digest=pending.payload_digest,
            cursor=cursor,
        ),
    )
    await op("acknowledge_terminal", store.acknowledge_terminal(record))
    await op("load", store.load("run-1"))
    for key in ("run-2", "run-3", "run-4"):
        await store.create(make_record(key))
    await op("list_runs", store.list_runs(status=CheckpointStatus.RUNNING, limit=2))
    await op("delete", store.delete("run-1"))
    event = {"type": "step", "run_id": "run-1", "parent_run_id": "root"}
    digest = event_payload_digest(event)
    await op("append_once", events.append_once("e", digest, event))
    await op("append_once again", events.append_once("e", digest, event))
    await op("replay", events.replay("run-1", include_children=True))
