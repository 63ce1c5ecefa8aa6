"""Conformance: journal writes, suspend, commit, finalize, event delivery, acknowledgement."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentflow.durable.enums import CheckpointStatus, ClaimMode, OperationState, ToolIdempotency
from agentflow.durable.errors import (
    ClaimActive,
    CycleConflict,
    DurableError,
    LeaseLost,
    RecoveryRequired,
    RevisionConflict,
    TerminalImmutable,
)
from agentflow.durable.run.events import EventCursor, EventOutboxEntry
from agentflow.durable.run.journal import OperationError
from agentflow.durable.run.record import OPERATOR_ABORT_CODE, DurableCheckpoint
from agentflow.durable.store import DurableStore
from agentflow.durable.testing.claims import LIVE_MS, claimed, take
from agentflow.durable.testing.harness import DurableHarness, make_record, make_tool_entry
from agentflow.durable.wire.validators import CapabilityRef

__all__ = ["WriteConformance"]

_EVENTS = CapabilityRef("events.test", "1")


async def _ambiguous(store: DurableStore) -> DurableCheckpoint:
    """A claimed run whose first tool call is ambiguous."""
    record = await claimed(store)
    entry = make_tool_entry("run-1", 1)
    record = await store.record_operation(record, entry.start(), claim_token="owner-a")
    return await store.record_operation(
        record, record.tool_journal[0].mark_ambiguous(), claim_token="owner-a"
    )


def _terminal(
    record: DurableCheckpoint, status: CheckpointStatus, **result: object
) -> DurableCheckpoint:
    return replace(record, status=status, terminal_result={"status": status.value, **result})


@pytest.mark.asyncio
class WriteConformance:
    async def test_journal_entries_move_one_write_at_a_time(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            entry = make_tool_entry("run-1", 1)
            record = await store.record_operation(record, entry, claim_token="owner-a")
            record = await store.record_operation(record, entry.start(), claim_token="owner-a")
            await store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS)
            receipt = {"ledger_row": 7}
            done = await store.record_operation(
                record, record.tool_journal[0].succeed(receipt), claim_token="owner-a"
            )
            loaded = await store.load("run-1")
        assert done.revision == 4
        assert loaded is not None and loaded.to_dict() == done.to_dict()
        assert [e.state for e in loaded.tool_journal] == [OperationState.SUCCEEDED]
        assert loaded.tool_journal[0].result == receipt

    async def test_new_entries_append_in_order(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            for position in (1, 2, 3):
                entry = make_tool_entry("run-1", 1, position).start()
                record = await store.record_operation(record, entry, claim_token="owner-a")
            loaded = await store.load("run-1")
        assert loaded is not None
        assert [e.operation_id for e in loaded.tool_journal] == [
            "op_tool_cycle_1_call_1",
            "op_tool_cycle_1_call_2",
            "op_tool_cycle_1_call_3",
        ]

    async def test_illegal_journal_moves_write_nothing(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            entry = make_tool_entry("run-1", 1)
            record = await store.record_operation(record, entry, claim_token="owner-a")
            skipping = replace(entry, state=OperationState.SUCCEEDED, result={"ok": True})
            other_call = replace(entry.start(), tool_name="refund")
            with pytest.raises(DurableError) as illegal:
                await store.record_operation(record, skipping, claim_token="owner-a")
            with pytest.raises(DurableError) as foreign:
                await store.record_operation(record, other_call, claim_token="owner-a")
            with pytest.raises(DurableError) as wrong_cycle:
                await store.record_operation(
                    record, make_tool_entry("run-1", 2, 2), claim_token="owner-a"
                )
            loaded = await store.load("run-1")
        assert illegal.value.code == "operation_transition_invalid"
        assert foreign.value.code == "checkpoint_journal_integrity_mismatch"
        assert wrong_cycle.value.code == "checkpoint_journal_cycle_invalid"
        assert loaded is not None and loaded.revision == record.revision

    async def test_journal_writes_are_fenced(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            with pytest.raises(LeaseLost):
                await store.record_operation(
                    record, make_tool_entry("run-1", 1), claim_token="owner-b"
                )
            ahead = await store.record_operation(
                record, make_tool_entry("run-1", 1), claim_token="owner-a"
            )
            with pytest.raises(RevisionConflict):
                await store.record_operation(
                    record, make_tool_entry("run-1", 1, 2), claim_token="owner-a"
                )
        assert ahead.revision == 2

    async def test_suspend_releases_the_claim_and_keeps_the_journal(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            record = await _ambiguous(store)
            suspended = await store.suspend(record, claim_token="owner-a")
            page = await store.list_runs(status=CheckpointStatus.RECONCILIATION_REQUIRED)
            with pytest.raises(RecoveryRequired):
                await take(store, "owner-b")
            resumed = await take(store, "owner-b", mode=ClaimMode.RECOVERY)
        assert suspended.status is CheckpointStatus.RECONCILIATION_REQUIRED
        assert (suspended.claim_token, suspended.lease_expires_at_ms) == (None, None)
        assert [e.state for e in suspended.tool_journal] == [OperationState.AMBIGUOUS]
        assert [run.key for run in page.runs] == ["run-1"]
        assert resumed.status is CheckpointStatus.RUNNING and resumed.resume_attempt == 2
        assert [e.state for e in resumed.tool_journal] == [OperationState.AMBIGUOUS]

    async def test_suspend_needs_an_ambiguous_entry(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            with pytest.raises(DurableError) as caught:
                await store.suspend(record, claim_token="owner-a")
        assert caught.value.code == "checkpoint_status_invalid"

    async def test_commit_advances_the_cycle_and_clears(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            record = await store.record_operation(
                record, make_tool_entry("run-1", 1).start(), claim_token="owner-a"
            )
            with pytest.raises(CycleConflict):
                await store.commit(record, claim_token="owner-a")
            committed = await store.commit(
                replace(record, cycle_index=1, claimed_cycle=1, shared_state={"done": 1}),
                claim_token="owner-a",
            )
            following = await take(store, "owner-a", cycle=2)
        assert (committed.cycle_index, committed.claim_token, committed.tool_journal) == (
            1,
            None,
            [],
        )
        assert following.claimed_cycle == 2 and following.shared_state == {"done": 1}

    async def test_finalize_claimed_is_terminal_and_immutable(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            final = await store.finalize_claimed(
                _terminal(record, CheckpointStatus.COMPLETED, final_answer="done"),
                claim_token="owner-a",
            )
            with pytest.raises(TerminalImmutable):
                await take(store, "owner-b", mode=ClaimMode.RECOVERY)
            with pytest.raises(LeaseLost):
                await store.progress(record, claim_token="owner-a")
            with pytest.raises(TerminalImmutable) as caught:
                await store.finalize(_terminal(final, CheckpointStatus.FAILED))
            loaded = await store.load("run-1")
        assert caught.value.code == "checkpoint_terminal_immutable"
        assert loaded is not None and loaded.to_dict() == final.to_dict()
        assert (loaded.status, loaded.claim_token) == (CheckpointStatus.COMPLETED, None)

    async def test_finalize_needs_a_terminal_result(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            with pytest.raises(DurableError) as missing:
                await store.finalize_claimed(
                    replace(record, status=CheckpointStatus.COMPLETED), claim_token="owner-a"
                )
        assert missing.value.code == "checkpoint_terminal_result_required"

    async def test_operator_abort_keeps_the_ambiguity(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            suspended = await store.suspend(await _ambiguous(store), claim_token="owner-a")
            aborted = await store.finalize(
                _terminal(suspended, CheckpointStatus.FAILED, error_code=OPERATOR_ABORT_CODE)
            )
            loaded = await store.load("run-1")
        assert loaded is not None and loaded.to_dict() == aborted.to_dict()
        assert [e.state for e in loaded.tool_journal] == [OperationState.AMBIGUOUS]

    async def test_unclaimed_finalize_meets_a_claim(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            record = make_record()
            await store.create(record)
            await take(store, "owner-a")
            with pytest.raises(ClaimActive):
                await store.finalize(_terminal(record, CheckpointStatus.FAILED))

    async def test_event_delivery_keeps_claim_and_terminal(
        self, durable_harness: DurableHarness
    ) -> None:
        pending = EventOutboxEntry.pending("evt-1", {"type": "checkpoint_created"})
        cursor = EventCursor(_EVENTS, {"sequence": 1}, "evt-1")
        async with durable_harness.store() as store:
            record = await claimed(store, event_outbox=[pending])
            with pytest.raises(DurableError) as conflict:
                await store.record_event_delivery(
                    record,
                    claim_token="owner-a",
                    event_id="evt-1",
                    payload_digest="b" * 64,
                    cursor=cursor,
                )
            with pytest.raises(DurableError) as mismatch:
                await store.record_event_delivery(
                    record,
                    claim_token="owner-a",
                    event_id="evt-1",
                    payload_digest=pending.payload_digest,
                    cursor=replace(cursor, last_event_id="evt-2"),
                )
            delivered = await store.record_event_delivery(
                record,
                claim_token="owner-a",
                event_id="evt-1",
                payload_digest=pending.payload_digest,
                cursor=cursor,
            )
            loaded = await store.load("run-1")
        assert conflict.value.code == "event_identity_conflict"
        assert mismatch.value.code == "checkpoint_event_cursor_invalid"
        assert loaded is not None and loaded.to_dict() == delivered.to_dict()
        assert loaded.claim_token == "owner-a" and loaded.event_cursor == cursor
        assert loaded.event_outbox[0].state == "delivered"

    async def test_terminal_delivery_then_acknowledgement(
        self, durable_harness: DurableHarness
    ) -> None:
        pending = EventOutboxEntry.pending("evt-end", {"type": "run_completed"})
        cursor = EventCursor(_EVENTS, {"sequence": 2}, "evt-end")
        async with durable_harness.store() as store:
            record = await claimed(store)
            final = await store.finalize_claimed(
                replace(_terminal(record, CheckpointStatus.COMPLETED), event_outbox=[pending]),
                claim_token="owner-a",
            )
            delivered = await store.record_event_delivery(
                final,
                claim_token=None,
                event_id="evt-end",
                payload_digest=pending.payload_digest,
                cursor=cursor,
            )
            acked = await store.acknowledge_terminal(delivered)
            with pytest.raises(RevisionConflict):
                await store.acknowledge_terminal(delivered)
            loaded = await store.load("run-1")
        assert acked.terminal_acknowledged and acked.revision == delivered.revision + 1
        assert loaded is not None and loaded.to_dict() == acked.to_dict()

    async def test_delete_is_explicit(self, durable_harness: DurableHarness) -> None:
        async with durable_harness.store() as store:
            await store.create(make_record())
            assert await store.delete("run-1") is True
            assert await store.delete("run-1") is False
            assert await store.load("run-1") is None
            await store.create(make_record())

    async def test_failed_receipt_and_idempotent_declaration_survive(
        self, durable_harness: DurableHarness
    ) -> None:
        async with durable_harness.store() as store:
            record = await claimed(store)
            entry = make_tool_entry("run-1", 1, support=ToolIdempotency.SUPPORTED)
            failed = entry.fail(OperationError("tool_rejected", "card declined"))
            record = await store.record_operation(record, failed, claim_token="owner-a")
            loaded = await store.load("run-1")
        assert loaded is not None and loaded.tool_journal == [failed]
