"""A run and an event holding a known secret, stored through the public protocols,
for the tests that look at (and damage) the bytes each backend keeps."""

from __future__ import annotations

import os

from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable import ClaimMode, DurableCheckpoint, DurableEventStore, DurableStore
from agentflow.durable.run.events import AcceptedEvent
from agentflow.durable.testing.harness import make_record, make_tool_entry
from agentflow.durable.wire.digests import event_payload_digest

SECRET = "s3cr3t-ledger-note"
TOKEN = "owner#1"
#: The parts a stored run and event have, as the harness's part hooks name them.
PARTS = ("body", "tool.0", "event")


def ring(*ids: str, current: str | None = None, retired: tuple[str, ...] = ()) -> KeyRing:
    """A key ring of fresh random keys."""
    return KeyRing({i: os.urandom(32) for i in ids}, current=current or ids[0], retired=retired)


async def stored_run(store: DurableStore, key: str) -> DurableCheckpoint:
    """A run whose body and one tool journal entry hold ``SECRET``."""
    record = make_record(key, shared_state={"note": SECRET, "amount": 100, "approved": False})
    await store.create(record)
    claimed = await store.claim(
        key, cycle_index=1, claim_token=TOKEN, lease_ms=3_600_000, mode=ClaimMode.CONTINUE
    )
    entry = make_tool_entry(key, 1, arguments={"amount": 100, "memo": SECRET})
    return await store.record_operation(claimed, entry, claim_token=TOKEN)


async def stored_event(events: DurableEventStore, event_id: str, run_id: str) -> None:
    """An accepted event of ``run_id`` whose payload holds ``SECRET``."""
    event = {"run_id": run_id, "type": "note", "note": SECRET, "amount": 100}
    result = await events.append_once(event_id, event_payload_digest(event), event)
    assert result.inserted


async def replayed(events: DurableEventStore, run_id: str) -> list[AcceptedEvent]:
    return list((await events.replay(run_id)).events)
