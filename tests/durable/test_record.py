from __future__ import annotations

from dataclasses import replace

import pytest

from agentflow.durable import (
    OPERATOR_ABORT_CODE,
    CapabilityRef,
    CheckpointStatus,
    DurableCheckpoint,
    DurableError,
    EventCursor,
    EventOutboxEntry,
    ExtensionStateEntry,
    parse_json,
)
from agentflow.durable.testing import make_record, make_tool_entry


def full_record() -> DurableCheckpoint:
    entry = make_tool_entry("ledger/7", 2).start()
    return make_record(
        "ledger/7",
        cycle_index=1,
        resume_attempt=2,
        messages=[{"role": "user", "content": "pay"}],
        cycles=[{"index": 1}],
        shared_state={"amount": 12.5},
        budget_usage={"cycles": 1},
        event_cursor=EventCursor(CapabilityRef("events.x", "1"), {"sequence": 4}, "evt-4"),
        event_outbox=[EventOutboxEntry.pending("evt-5", {"type": "operation_started"})],
        extension_state={"com.example.audit": ExtensionStateEntry("1", True, {"n": 7})},
        tool_journal=[entry],
        revision=9,
        claim_token="claim_w7",
        claimed_cycle=2,
        lease_expires_at_ms=2_000_000_000_000,
        unknown_fields={"vendor_future": {"preserve": True}},
    )


def test_wire_round_trip_keeps_unknown_fields() -> None:
    record = full_record()
    data = record.to_json()
    again = DurableCheckpoint.from_json(data)
    assert again == record and again.to_json() == data
    assert parse_json(data)["vendor_future"] == {"preserve": True}
    assert len(record.to_dict()) == 27


def invalid(record: DurableCheckpoint) -> str:
    with pytest.raises(DurableError) as caught:
        record.validate()
    return caught.value.code


def test_record_rules() -> None:
    base = full_record()
    unclaimed = replace(base, claim_token=None, claimed_cycle=None, lease_expires_at_ms=None)
    assert (
        invalid(replace(base, schema_version="vv-agent.checkpoint.v3"))
        == "checkpoint_schema_unsupported"
    )
    assert (
        invalid(replace(base, run_definition_digest="a" * 64)) == "checkpoint_definition_mismatch"
    )
    assert (
        invalid(replace(base, run_definition_digest="A" * 64))
        == "checkpoint_definition_digest_invalid"
    )
    assert invalid(replace(base, task_id=" ")) == "checkpoint_value_invalid"
    assert invalid(replace(base, resume_attempt=0)) == "checkpoint_resume_attempt_invalid"
    assert invalid(replace(base, lease_expires_at_ms=None)) == "checkpoint_claim_invalid"
    assert invalid(replace(base, claimed_cycle=3)) == "checkpoint_claim_invalid"
    assert invalid(replace(base, status=CheckpointStatus.PENDING)) == "checkpoint_status_invalid"
    assert invalid(replace(base, terminal_acknowledged=True)) == "checkpoint_status_invalid"
    assert invalid(replace(unclaimed, cycle_index=2)) == "checkpoint_journal_cycle_invalid"
    assert (
        invalid(replace(base, model_call_journal=base.tool_journal))
        == "checkpoint_journal_kind_invalid"
    )
    assert (
        invalid(replace(base, unknown_fields={"status": 1})) == "checkpoint_unknown_field_invalid"
    )
    twice = [*base.event_outbox, *base.event_outbox]
    assert invalid(replace(base, event_outbox=twice)) == "event_identity_conflict"


def test_status_rules_around_ambiguity_and_terminals() -> None:
    base = full_record()
    ambiguous = [base.tool_journal[0].mark_ambiguous()]
    unclaimed = replace(base, claim_token=None, claimed_cycle=None, lease_expires_at_ms=None)
    waiting = replace(
        unclaimed, status=CheckpointStatus.RECONCILIATION_REQUIRED, tool_journal=ambiguous
    )
    waiting.validate()
    assert invalid(replace(waiting, tool_journal=[])) == "checkpoint_status_invalid"
    assert invalid(replace(unclaimed, tool_journal=ambiguous)) == "checkpoint_status_invalid"
    failed = {"status": "failed"}
    terminal = replace(unclaimed, status=CheckpointStatus.FAILED, terminal_result=failed)
    assert invalid(terminal) == "checkpoint_status_invalid"  # journals left behind
    aborted = replace(terminal, terminal_result={**failed, "error_code": OPERATOR_ABORT_CODE})
    aborted.validate()
    done = replace(terminal, tool_journal=[], terminal_result={"status": "completed"})
    assert invalid(done) == "checkpoint_status_invalid"
    assert invalid(
        replace(
            done, terminal_result=failed, claim_token="c", claimed_cycle=2, lease_expires_at_ms=1
        )
    ) == ("checkpoint_status_invalid")


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda w: w.pop("tool_journal"), "checkpoint_field_invalid"),
        (lambda w: w.pop("run_definition"), "checkpoint_definition_invalid"),
        (
            lambda w: w.update(run_definition_schema="v0"),
            "checkpoint_definition_schema_unsupported",
        ),
        (lambda w: w.update(schema_version=None), "checkpoint_schema_unsupported"),
        (lambda w: w.update(status="paused"), "checkpoint_status_invalid"),
        (lambda w: w.update(messages={}), "checkpoint_messages_invalid"),
        (lambda w: w.update(revision=-1), "checkpoint_revision_invalid"),
        (lambda w: w.update(claimed_cycle="2"), "checkpoint_integer_invalid"),
        (lambda w: w.update(terminal_acknowledged=0), "checkpoint_status_invalid"),
        (lambda w: w.update(event_cursor={"value": 1}), "checkpoint_field_invalid"),
        (lambda w: w.update(shared_state=[]), "checkpoint_shared_state_invalid"),
    ],
)
def test_decoding_refuses_bad_shapes(change: object, code: str) -> None:
    wire = full_record().to_dict()
    change(wire)  # type: ignore[operator]
    with pytest.raises(DurableError) as caught:
        DurableCheckpoint.from_dict(wire)
    assert caught.value.code == code


def test_extension_limit_applies_on_read() -> None:
    record = replace(
        full_record(), extension_state={"a.b": ExtensionStateEntry("1", False, "x" * 100)}
    )
    with pytest.raises(DurableError) as caught:
        DurableCheckpoint.from_json(record.to_json(), max_extension_state_bytes=100)
    assert caught.value.code == "checkpoint_extension_state_too_large"
    with pytest.raises(DurableError) as payload:
        DurableCheckpoint.from_dict([])
    assert payload.value.code == "checkpoint_payload_invalid"
