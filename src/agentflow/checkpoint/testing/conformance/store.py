"""The store as one thing: the operations that cross checkpoints, records and events."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentflow.checkpoint.base import Checkpointer
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.durable.enums import CheckpointStatus, ClaimMode, OperationKind
from agentflow.durable.errors import CheckpointAlreadyExists, ClaimActive, DurableError, LeaseLost
from agentflow.durable.run.record import OPERATOR_ABORT_CODE, DurableCheckpoint
from agentflow.durable.store import DurableEventStore, DurableStore
from agentflow.durable.testing.claims import LAPSED_MS, LIVE_MS, lapse
from agentflow.durable.testing.harness import make_record, make_tool_entry
from agentflow.durable.wire.digests import event_payload_digest
from agentflow.errors import CheckpointConflict, InvalidCursor

__all__ = ["StoreConformance"]


async def _claimed(
    store: Store, key: str, *, token: str = "owner-a", lease_ms: int = LIVE_MS
) -> DurableCheckpoint:
    await store.create(make_record(key))
    return await store.claim(
        key, cycle_index=1, claim_token=token, lease_ms=lease_ms, mode=ClaimMode.CONTINUE
    )


async def _append(store: Store, event_id: str, run_id: str) -> None:
    event = {"event_id": event_id, "run_id": run_id, "type": "checkpoint_created"}
    await store.append_once(event_id, event_payload_digest(event), event)


async def _event_ids(store: Store, run_id: str) -> list[str]:
    page = await store.replay(run_id, limit=100)
    return [event.event_id for event in page.events]


@pytest.mark.asyncio
class StoreConformance:
    """What every :class:`~agentflow.checkpoint.store.Store` does with a thread whole."""

    async def test_a_store_is_a_checkpointer_a_durable_store_and_an_event_log(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open(namespace="tenant-a") as store, harness.open() as other:
            for protocol in (Store, Checkpointer, DurableStore, DurableEventStore):
                assert isinstance(store, protocol)
            assert store.namespace == "tenant-a" and other.namespace is None
            assert store.database == other.database and store.database
            assert "***" not in store.database

    async def test_start_run_stores_the_first_step_and_the_claimed_record(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            record = make_record("t")
            claimed = await store.start_run(
                make_checkpoint("t", 0), record, claim_token="owner-a", lease_ms=LIVE_MS
            )
            assert (claimed.claim_token, claimed.claimed_cycle) == ("owner-a", 1)
            assert claimed.revision == 1 and claimed.lease_expires_at_ms is not None
            step = await store.get("t")
            loaded = await store.load("t")
            assert step is not None and (step.step, step.revision) == (0, 1)
            assert loaded is not None and loaded.claim_token == "owner-a"
            written = await store.commit_step(
                make_checkpoint("t", 1), claimed, [], claim_token="owner-a"
            )
            assert written.revision == 2

    async def test_start_run_refuses_a_thread_that_exists(self, harness: BackendHarness) -> None:
        async with harness.open() as store:
            await store.put(make_checkpoint("stepped", 0, state={"first": True}))
            with pytest.raises(CheckpointConflict):
                await store.start_run(
                    make_checkpoint("stepped", 0),
                    make_record("stepped"),
                    claim_token="owner-a",
                    lease_ms=LIVE_MS,
                )
            kept = await store.get("stepped")
            assert kept is not None and kept.state == {"first": True}
            assert await store.load("stepped") is None
            await store.create(make_record("recorded"))
            with pytest.raises(CheckpointAlreadyExists):
                await store.start_run(
                    make_checkpoint("recorded", 0),
                    make_record("recorded", trace_id="another"),
                    claim_token="owner-a",
                    lease_ms=LIVE_MS,
                )
            held = await store.load("recorded")
            assert held is not None and held.trace_id == "trace-1" and held.claim_token is None
            if harness.atomic_steps:
                assert await store.get("recorded") is None

    async def test_commit_step_stores_the_step_and_the_receipts_together(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            await store.put(make_checkpoint("t", 0))
            record = await _claimed(store, "t")
            started = make_tool_entry("t", 1).start()
            record = await store.record_operations(record, [started], claim_token="owner-a")
            settled = started.succeed({"charged": 12})
            stored = await store.commit_step(
                make_checkpoint("t", 1), record, [settled], claim_token="owner-a"
            )
            assert stored.revision == record.revision + 1
            assert stored.lease_expires_at_ms is not None
            step = await store.get("t")
            loaded = await store.load("t")
        assert step is not None and step.step == 1 and step.revision == 1
        assert loaded is not None and loaded.revision == stored.revision
        assert [entry.receipt for entry in loaded.tool_journal] == [{"charged": 12}]
        assert loaded.claim_token == "owner-a"

    async def test_a_receipt_and_the_next_start_ride_one_write(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            record = await _claimed(store, "t")
            first = make_tool_entry("t", 1, 1).start()
            record = await store.record_operations(record, [first], claim_token="owner-a")
            second = make_tool_entry("t", 1, 2).start()
            written = await store.record_operations(
                record, [first.succeed({"n": 1}), second], claim_token="owner-a"
            )
            loaded = await store.load("t")
        assert written.revision == record.revision + 1
        assert loaded is not None
        assert [(e.operation_id, e.state.value) for e in loaded.tool_journal] == [
            (first.operation_id, "succeeded"),
            (second.operation_id, "started"),
        ]

    async def test_a_fenced_holder_commits_no_step(self, harness: BackendHarness) -> None:
        async with harness.open() as store:
            await store.put(make_checkpoint("t", 0))
            stale = await _claimed(store, "t", lease_ms=LAPSED_MS)
            await lapse()
            await store.claim(
                "t", cycle_index=1, claim_token="owner-b", lease_ms=LIVE_MS, mode=ClaimMode.RECOVERY
            )
            with pytest.raises(LeaseLost):
                await store.commit_step(make_checkpoint("t", 1), stale, [], claim_token="owner-a")
            assert await store.get("t", 1) is None
            latest = await store.get("t")
        assert latest is not None and latest.step == 0

    async def test_commit_step_refuses_a_step_that_exists(self, harness: BackendHarness) -> None:
        async with harness.open() as store:
            await store.put(make_checkpoint("t", 0))
            await store.put(make_checkpoint("t", 1, state={"first": True}))
            record = await _claimed(store, "t")
            with pytest.raises(CheckpointConflict):
                await store.commit_step(make_checkpoint("t", 1), record, [], claim_token="owner-a")
            kept = await store.get("t", 1)
            loaded = await store.load("t")
        assert kept is not None and kept.state == {"first": True} and kept.revision == 1
        assert loaded is not None
        if harness.atomic_steps:
            assert loaded.revision == record.revision

    async def test_delete_thread_removes_checkpoints_record_and_events(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store, harness.open(namespace="other") as other:
            for step in range(3):
                await store.put(make_checkpoint("gone", step))
            await store.put(make_checkpoint("stays", 0))
            await store.create(make_record("gone"))
            await store.create(make_record("stays"))
            await _append(store, "e-gone", "gone")
            await _append(store, "e-stays", "stays")
            await other.put(make_checkpoint("gone", 0))
            await other.create(make_record("gone"))
            await _append(other, "e-other", "gone")
            await store.delete_thread("gone")
            assert await store.get("gone") is None
            assert await store.load("gone") is None
            assert await _event_ids(store, "gone") == []
            assert await store.load("stays") is not None
            assert await _event_ids(store, "stays") == ["e-stays"]
            assert await other.load("gone") is not None
            assert await _event_ids(other, "gone") == ["e-other"]
            await store.create(make_record("gone"))  # the id can be run again
            await _append(store, "e-gone", "gone")
            assert await _event_ids(store, "gone") == ["e-gone"]
            assert await store.delete("gone") is True
            assert await store.delete("gone") is False

    async def test_delete_is_refused_while_a_lease_is_live(self, harness: BackendHarness) -> None:
        async with harness.open() as store:
            await store.put(make_checkpoint("held", 0))
            await _claimed(store, "held")
            await _append(store, "e-held", "held")
            with pytest.raises(ClaimActive):
                await store.delete_thread("held")
            with pytest.raises(ClaimActive):
                await store.delete("held")
            assert await store.get("held") is not None
            assert await store.load("held") is not None
            assert await _event_ids(store, "held") == ["e-held"]
            await store.delete_thread("held", force=True)
            assert await store.get("held") is None and await store.load("held") is None

    async def test_a_lapsed_lease_does_not_stop_a_delete(self, harness: BackendHarness) -> None:
        async with harness.open() as store:
            await store.put(make_checkpoint("lapsed", 0))
            await _claimed(store, "lapsed", lease_ms=LAPSED_MS)
            await lapse()
            await store.delete_thread("lapsed")
            assert await store.load("lapsed") is None and await store.get("lapsed") is None

    async def test_a_prune_of_every_step_removes_the_thread_whole(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            for step in range(3):
                await store.put(make_checkpoint("t", step))
            await store.create(make_record("t"))
            await _append(store, "e-t", "t")
            assert await store.prune("t", before_step=2) == 2
            assert await store.load("t") is not None
            assert await store.prune("t", before_step=3) == 1
            assert await store.get("t") is None and await store.load("t") is None
            assert await _event_ids(store, "t") == []
            await store.create(make_record("t"))

    async def test_a_whole_prune_is_refused_while_a_lease_is_live(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            await store.put(make_checkpoint("t", 0))
            await _claimed(store, "t")
            with pytest.raises(ClaimActive):
                await store.prune("t", before_step=1)
            assert await store.get("t") is not None and await store.load("t") is not None

    async def test_a_thread_takes_its_status_from_its_record(self, harness: BackendHarness) -> None:
        async with harness.open() as store:
            await store.put(make_checkpoint("ambiguous", 0, next=("charge",)))
            await store.put(make_checkpoint("fine", 0, next=("charge",)))
            record = await _claimed(store, "ambiguous")
            entry = make_tool_entry("ambiguous", 1).start()
            record = await store.record_operations(
                record, [entry, entry.mark_ambiguous()], claim_token="owner-a"
            )
            record = await store.suspend(record, claim_token="owner-a")

            async def listed(status: str | None) -> dict[str, str]:
                page = await store.list_threads_page(status=status)  # type: ignore[arg-type]
                return {info.thread: info.status for info in page.threads}

            assert await listed(None) == {
                "ambiguous": "reconciliation_required",
                "fine": "running",
            }
            assert await listed("reconciliation_required") == {
                "ambiguous": "reconciliation_required"
            }
            assert await listed("running") == {"fine": "running"}
            await store.put(make_checkpoint("ambiguous", 0, next=("charge",)))  # a put keeps it
            assert await listed("reconciliation_required") == {
                "ambiguous": "reconciliation_required"
            }
            claimed = await store.claim(
                "ambiguous",
                cycle_index=1,
                claim_token="owner-b",
                lease_ms=LIVE_MS,
                mode=ClaimMode.RECOVERY,
            )
            assert await listed("running") == {"ambiguous": "running", "fine": "running"}
            claimed.status = CheckpointStatus.FAILED  # an operator's abort keeps the ambiguity
            claimed.terminal_result = {"status": "failed", "error_code": OPERATOR_ABORT_CODE}
            await store.finalize_claimed(claimed, claim_token="owner-b")
            assert await listed("failed") == {"ambiguous": "failed"}
            assert await listed("running") == {"fine": "running"}
            await store.delete_thread("ambiguous")
            assert await listed(None) == {"fine": "running"}

    async def test_a_run_with_a_call_that_may_have_acted_cannot_be_finalized(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as store:
            record = await _claimed(store, "t")
            started = make_tool_entry("t", 1).start()
            record = await store.record_operations(record, [started], claim_token="owner-a")
            for entry in (started, started.mark_ambiguous()):
                if entry is not started:
                    record = await store.record_operations(record, [entry], claim_token="owner-a")
                done = replace(
                    record,
                    status=CheckpointStatus.COMPLETED,
                    terminal_result={"status": "completed"},
                )
                with pytest.raises(DurableError) as refused:
                    await store.finalize_claimed(done, claim_token="owner-a")
                assert refused.value.code == "checkpoint_journal_unsettled"
                loaded = await store.load("t")
                assert loaded is not None and loaded.terminal_result is None
                assert loaded.tool_journal[0].state is entry.state

    async def test_records_and_events_stay_in_their_namespace(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open(namespace="a") as a, harness.open(namespace="b") as b:
            await a.create(make_record("run"))
            await _append(a, "e1", "run")
            assert await b.load("run") is None
            assert await _event_ids(b, "run") == []
            await b.create(make_record("run"))  # the same id is another run there
            assert (await b.list_runs()).runs[0].key == "run"

    async def test_cursors_are_bound_to_their_store_and_namespace(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open(namespace="a") as a, harness.open(namespace="b") as b:
            for key in ("r1", "r2"):
                await a.create(make_record(key))
                await b.create(make_record(key))
                await _append(a, f"e-{key}", "run")
            page = await a.list_runs(limit=1)
            assert page.next_cursor is not None
            with pytest.raises(InvalidCursor):
                await b.list_runs(limit=1, cursor=page.next_cursor)
            events = await a.replay("run", limit=1)
            assert events.next_after is not None
            with pytest.raises(InvalidCursor):
                await b.replay("run", after=events.next_after)
            with pytest.raises(InvalidCursor):
                await a.replay("run", after={"sequence": 1})
            resumed = await a.replay("run", after=events.next_after)
            assert [event.event_id for event in resumed.events] == ["e-r2"]

    async def test_the_kind_of_a_journal_entry_is_kept(self, harness: BackendHarness) -> None:
        async with harness.open() as store:
            record = await _claimed(store, "t")
            tool = make_tool_entry("t", 1).start()
            written = await store.record_operations(record, [tool], claim_token="owner-a")
            assert written.journal(OperationKind.TOOL)[0].operation_id == tool.operation_id
            assert written.journal(OperationKind.MODEL) == []
