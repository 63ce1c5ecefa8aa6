"""A record's outbox on its way into the event log: queued by a write, delivered once.

Every store queues events by the write that carries them (``events=`` of
``record_operations`` and ``commit_step``, the outbox of a whole-record
write), and marks several delivered in one write
(``record_event_deliveries``, all or none). A store whose
``delivers_in_step`` is True (SQLite, PostgreSQL) also appends the events
pending after a ``commit_step`` or ``start_run`` to its log and records them
delivered in that same transaction; the others leave them pending, for the
caller to deliver. Either way the log ends with each id once.
"""

from __future__ import annotations

import pytest

from agentflow.checkpoint.store import Store
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.durable.enums import ClaimMode, OperationState
from agentflow.durable.errors import DurableError, RevisionConflict
from agentflow.durable.run.events import EventCursor, EventDelivery, EventOutboxEntry
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.testing.claims import LIVE_MS
from agentflow.durable.testing.harness import make_record, make_tool_entry

__all__ = ["OutboxConformance"]


def _event(run: str, n: int, note: str = "first") -> EventOutboxEntry:
    event = {"event_id": f"evt-{run}-{n}", "run_id": run, "type": "checkpoint_created"}
    return EventOutboxEntry.pending(f"evt-{run}-{n}", {**event, "note": note})


def _delivers(store: Store) -> bool:
    return bool(getattr(store, "delivers_in_step", False))


async def _claimed(store: Store, key: str) -> DurableCheckpoint:
    await store.put(make_checkpoint(key, 0))
    await store.create(make_record(key))
    return await store.claim(
        key, cycle_index=1, claim_token="owner-a", lease_ms=LIVE_MS, mode=ClaimMode.CONTINUE
    )


async def _logged(store: Store, run: str) -> list[tuple[str, str]]:
    page = await store.replay(run, limit=100)
    return [(event.event_id, event.event["note"]) for event in page.events]


async def _deliver(store: Store, record: DurableCheckpoint) -> DurableCheckpoint:
    """What a caller does with the events a write left pending: append each, then
    record them delivered in one write."""
    deliveries = []
    for entry in record.event_outbox:
        if entry.state == "pending":
            appended = await store.append_once(entry.event_id, entry.payload_digest, entry.event)
            cursor = EventCursor(store.store_ref, appended.cursor, entry.event_id)
            deliveries.append(EventDelivery(entry.event_id, entry.payload_digest, cursor))
    return await store.record_event_deliveries(record, deliveries, claim_token=record.claim_token)


@pytest.mark.asyncio
class OutboxConformance:
    """How every :class:`~agentflow.checkpoint.store.Store` carries events out of a record."""

    async def test_commit_step_queues_events_and_the_sql_stores_deliver_them_in_it(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            record = await _claimed(store, "t")
            events = [_event("t", 1), _event("t", 2)]
            written = await store.commit_step(
                make_checkpoint("t", 1), record, [], claim_token="owner-a", events=events
            )
            loaded = await store.load("t")
            assert loaded is not None and loaded.event_outbox == written.event_outbox
            assert [entry.event_id for entry in written.event_outbox] == ["evt-t-1", "evt-t-2"]
            if _delivers(store):
                assert [entry.state for entry in written.event_outbox] == ["delivered"] * 2
                assert await _logged(store, "t") == [("evt-t-1", "first"), ("evt-t-2", "first")]
                cursor = written.event_cursor
                assert cursor is not None and cursor.last_event_id == "evt-t-2"
                [after_first] = (await store.replay("t", after=None, limit=1)).events
                assert (
                    written.event_outbox[0].cursor
                    == EventCursor(store.store_ref, after_first.cursor, "evt-t-1").to_dict()
                )
            else:
                assert [entry.state for entry in written.event_outbox] == ["pending"] * 2
                assert await _logged(store, "t") == []
                written = await _deliver(store, written)
            stored = await store.load("t")
            assert stored is not None and stored.revision == written.revision
            assert [entry.state for entry in written.event_outbox] == ["delivered"] * 2
            assert await _logged(store, "t") == [("evt-t-1", "first"), ("evt-t-2", "first")]

    async def test_a_refused_commit_step_queues_and_appends_nothing(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            record = await _claimed(store, "t")
            moved = await store.record_operations(
                record, [make_tool_entry("t", 1).start()], claim_token="owner-a"
            )
            with pytest.raises(RevisionConflict):  # the stale snapshot
                await store.commit_step(
                    make_checkpoint("t", 1),
                    record,
                    [],
                    claim_token="owner-a",
                    events=[_event("t", 1)],
                )
            loaded = await store.load("t")
            assert loaded is not None and loaded.revision == moved.revision
            assert loaded.event_outbox == [] and await _logged(store, "t") == []

    async def test_start_run_delivers_the_new_records_events_on_the_sql_stores(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            record = make_record("t", event_outbox=[_event("t", 0)])
            claimed = await store.start_run(
                make_checkpoint("t", 0), record, claim_token="owner-a", lease_ms=LIVE_MS
            )
            loaded = await store.load("t")
            assert loaded is not None and loaded.event_outbox == claimed.event_outbox
            [entry] = claimed.event_outbox
            if _delivers(store):
                assert entry.state == "delivered" and claimed.event_cursor is not None
                assert await _logged(store, "t") == [("evt-t-0", "first")]
            else:
                assert entry.state == "pending" and await _logged(store, "t") == []
            assert claimed.claim_token == "owner-a" and claimed.revision == loaded.revision

    async def test_record_operations_queues_an_id_once_and_delivers_nothing(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            record = await _claimed(store, "t")
            started = make_tool_entry("t", 1).start()
            record = await store.record_operations(
                record, [started], claim_token="owner-a", events=[_event("t", 1)]
            )
            again = _event("t", 1, note="emitted again")
            record = await store.record_operations(
                record, [started.succeed({})], claim_token="owner-a", events=[again, _event("t", 2)]
            )
            loaded = await store.load("t")
            assert loaded is not None and loaded.event_outbox == record.event_outbox
            assert [(e.event_id, e.state, e.event["note"]) for e in loaded.event_outbox] == [
                ("evt-t-1", "pending", "first"),
                ("evt-t-2", "pending", "first"),
            ]
            assert [e.state for e in loaded.tool_journal] == [OperationState.SUCCEEDED]
            assert await _logged(store, "t") == []

    async def test_deliveries_are_one_write_all_or_none(self, harness: BackendHarness) -> None:
        async with harness.open() as store:
            record = await _claimed(store, "t")
            record = await store.record_operations(
                record, [], claim_token="owner-a", events=[_event("t", 1), _event("t", 2)]
            )
            first, second = record.event_outbox
            appended = [
                await store.append_once(e.event_id, e.payload_digest, e.event)
                for e in (first, second)
            ]
            deliveries = [
                EventDelivery(
                    e.event_id, e.payload_digest, EventCursor(store.store_ref, a.cursor, e.event_id)
                )
                for e, a in zip((first, second), appended, strict=True)
            ]
            nowhere = EventCursor(store.store_ref, appended[0].cursor, "evt-none")
            unknown = EventDelivery("evt-none", first.payload_digest, nowhere)
            with pytest.raises(DurableError) as refused:
                await store.record_event_deliveries(
                    record, [deliveries[0], unknown], claim_token="owner-a"
                )
            assert refused.value.code == "checkpoint_event_outbox_invalid"
            other = EventDelivery(first.event_id, second.payload_digest, deliveries[0].cursor)
            with pytest.raises(DurableError) as conflicting:
                await store.record_event_deliveries(record, [other], claim_token="owner-a")
            assert conflicting.value.code == "event_identity_conflict"
            assert (await store.load("t")) == record  # nothing written
            done = await store.record_event_deliveries(record, deliveries, claim_token="owner-a")
            assert done.revision == record.revision + 1
            assert [e.state for e in done.event_outbox] == ["delivered", "delivered"]
            assert done.event_cursor == deliveries[1].cursor and await store.load("t") == done
            with pytest.raises(RevisionConflict):
                await store.record_event_deliveries(record, deliveries[:1], claim_token="owner-a")

    async def test_an_id_the_log_accepted_before_keeps_its_first_event(
        self, harness: BackendHarness
    ) -> None:
        """A lifecycle fact emitted again after its first event left the outbox (with
        its cycle) is delivered as the first acceptance, never twice."""
        async with harness.open() as store:
            first = _event("t", 1)
            before = await store.append_once(first.event_id, first.payload_digest, first.event)
            record = await _claimed(store, "t")
            written = await store.commit_step(
                make_checkpoint("t", 1),
                record,
                [],
                claim_token="owner-a",
                events=[_event("t", 1, note="emitted again")],
            )
            if not _delivers(store):
                with pytest.raises(DurableError) as refused:
                    entry = written.event_outbox[0]
                    await store.append_once(entry.event_id, entry.payload_digest, entry.event)
                assert refused.value.code == "event_identity_conflict"
            else:
                [entry] = written.event_outbox
                assert entry.state == "delivered" and entry.cursor is not None
                assert entry.cursor["value"] == before.cursor
            assert await _logged(store, "t") == [("evt-t-1", "first")]
