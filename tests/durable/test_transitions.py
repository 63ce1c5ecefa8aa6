from __future__ import annotations

from dataclasses import replace

import pytest

from agentflow.checkpoint.claims import claim_refusal, claimed_head, renew_refusal
from agentflow.checkpoint.plans import (
    JournalPut,
    plan_acknowledge,
    plan_commit,
    plan_progress,
    plan_record_operation,
    refusal,
)
from agentflow.checkpoint.rows import RunHead, decode_row, encode_row, head_of
from agentflow.durable import (
    CheckpointNotFound,
    CheckpointStatus,
    ClaimActive,
    ClaimMode,
    CycleConflict,
    DurableCheckpoint,
    DurableConflict,
    DurableCorrupted,
    DurableError,
    LeaseLost,
    OperationError,
    RecoveryRequired,
    RevisionConflict,
    TerminalImmutable,
)
from agentflow.durable.testing import make_record, make_tool_entry


def claimed_record() -> DurableCheckpoint:
    return replace(
        make_record(), claim_token="a", claimed_cycle=1, lease_expires_at_ms=1_000, revision=1
    )


def head(**changes: object) -> RunHead:
    return replace(head_of(make_record()), **changes)  # type: ignore[arg-type]


def test_claim_precedence() -> None:
    cases = [
        (None, 1, 0, ClaimMode.RECOVERY, CheckpointNotFound),
        (
            head(terminal=True, status=CheckpointStatus.COMPLETED),
            1,
            0,
            ClaimMode.RECOVERY,
            TerminalImmutable,
        ),
        (head(), 2, 0, ClaimMode.RECOVERY, CycleConflict),
        (
            head(claim_token="a", claimed_cycle=1, lease_expires_at_ms=500),
            1,
            499,
            ClaimMode.RECOVERY,
            ClaimActive,
        ),
        (
            head(claim_token="a", claimed_cycle=1, lease_expires_at_ms=500),
            1,
            500,
            ClaimMode.CONTINUE,
            RecoveryRequired,
        ),
        (head(ambiguous=True), 1, 0, ClaimMode.CONTINUE, RecoveryRequired),
        (
            head(status=CheckpointStatus.RECONCILIATION_REQUIRED),
            1,
            0,
            ClaimMode.CONTINUE,
            RecoveryRequired,
        ),
    ]
    for row_head, cycle, now, mode, error in cases:
        assert type(claim_refusal(row_head, cycle, now, mode)) is error
    assert (
        claim_refusal(
            head(claim_token="a", claimed_cycle=1, lease_expires_at_ms=500),
            1,
            500,
            ClaimMode.RECOVERY,
        )
        is None
    )
    assert claim_refusal(head(), 1, 0, ClaimMode.CONTINUE) is None


def test_claimed_head_counts_resumes_only_for_recovery() -> None:
    base = head(revision=5)
    cont = claimed_head(base, 1, "t", now_ms=100, lease_ms=50, mode=ClaimMode.CONTINUE)
    rec = claimed_head(base, 1, "t", now_ms=100, lease_ms=50, mode=ClaimMode.RECOVERY)
    assert (cont.revision, cont.resume_attempt, cont.lease_expires_at_ms) == (6, 1, 150)
    assert rec.resume_attempt == 2 and rec.status is CheckpointStatus.RUNNING
    with pytest.raises(DurableError):
        claimed_head(base, 1, "t", now_ms=2**53 - 10, lease_ms=50, mode=ClaimMode.CONTINUE)


def test_renewal_refusals() -> None:
    live = head(claim_token="a", claimed_cycle=1, lease_expires_at_ms=500)
    assert renew_refusal(live, "a", 499) is None
    assert type(renew_refusal(live, "b", 0)) is LeaseLost
    assert type(renew_refusal(live, "a", 500)) is LeaseLost
    assert type(renew_refusal(None, "a", 0)) is CheckpointNotFound


def test_refusal_explains_a_failed_guard() -> None:
    write = plan_progress(claimed_record(), "a")
    stored = head_of(claimed_record())
    assert write.guard.holds(stored)
    assert type(refusal(None, write.guard)) is CheckpointNotFound
    assert type(refusal(replace(stored, claim_token="b"), write.guard)) is LeaseLost
    assert type(refusal(replace(stored, revision=2), write.guard)) is RevisionConflict
    assert (
        refusal(replace(stored, identity="x"), write.guard).code == "checkpoint_definition_mismatch"
    )
    assert type(refusal(stored, write.guard)) is DurableConflict
    ack = plan_acknowledge(
        replace(
            make_record(),
            status=CheckpointStatus.COMPLETED,
            terminal_result={"status": "completed"},
        )
    )
    assert type(refusal(replace(head(), claim_token="c"), ack.guard)) is ClaimActive


def test_progress_keeps_the_stored_lease() -> None:
    write = plan_progress(claimed_record(), "a")
    assert write.keep_lease and write.record.revision == 2 and write.head.claim_token == "a"


def test_a_journal_write_is_one_entry() -> None:
    record = claimed_record()
    entry = make_tool_entry("run-1", 1)
    write = plan_record_operation(record, entry.start(), "a")
    assert write.body is None and write.keep_lease
    assert isinstance(write.journal, tuple)
    (put,) = write.journal
    assert isinstance(put, JournalPut) and (put.index, put.kind.value) == (0, "tool")
    after = write.record
    nxt = plan_record_operation(after, after.tool_journal[0].mark_ambiguous(), "a")
    assert nxt.head.ambiguous and nxt.record.revision == 3
    retry = nxt.record.tool_journal[0].retry()
    assert plan_record_operation(nxt.record, retry, "a").record.tool_journal[0].attempt == 2
    with pytest.raises(DurableError) as caught:
        plan_record_operation(record, replace(entry, attempt=2), "a")
    assert caught.value.code == "operation_transition_invalid"
    # a call whose outcome is written with its start: one new entry, already settled
    settled = plan_record_operation(record, entry.start().succeed({"x": 1}), "a")
    assert settled.record.tool_journal[0].receipt == {"x": 1}
    failed = plan_record_operation(record, entry.fail(OperationError("local", "no card")), "a")
    assert failed.record.tool_journal[0].error is not None
    skipped = replace(after.tool_journal[0], attempt=5)
    with pytest.raises(DurableError):
        plan_record_operation(after, skipped, "a")


def test_commit_needs_the_claimed_cycle() -> None:
    with pytest.raises(CycleConflict):
        plan_commit(claimed_record(), "a")
    write = plan_commit(replace(claimed_record(), cycle_index=1, claimed_cycle=1), "a")
    assert write.head.claim_token is None and write.head.cycle_index == 1


def test_rows_round_trip_and_fail_closed() -> None:
    record = replace(claimed_record(), tool_journal=[make_tool_entry("run-1", 1).start()])
    row = encode_row(record)
    assert b"claim_token" not in row.body and b"tool_journal" not in row.body
    assert decode_row(row) == record
    for broken in (
        replace(row, body=b"{"),
        replace(row, head=replace(row.head, terminal=True)),
        replace(row, head=replace(row.head, cycle_index=3)),
        replace(row, tool_journal=(b'{"kind":"tool"}',)),
        replace(row, key="other"),
    ):
        with pytest.raises(DurableCorrupted):
            decode_row(broken)
