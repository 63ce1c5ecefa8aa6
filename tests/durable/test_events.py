from __future__ import annotations

import pytest

from agentflow.durable import (
    CapabilityRef,
    DurableError,
    EventCursor,
    EventOutboxEntry,
    event_payload_digest,
)
from agentflow.durable.run.events import check_append, resolve_append

EVENT = {"type": "run_completed", "run_id": "r1"}
DIGEST = event_payload_digest(EVENT)


def test_cursor_rules_and_wire_form() -> None:
    cursor = EventCursor(CapabilityRef("events.pg", "1"), {"sequence": 3}, "evt-3")
    cursor.validate()
    assert EventCursor.from_dict(cursor.to_dict()) == cursor
    for bad, code in (
        (
            EventCursor(CapabilityRef("e", "1"), {}, None, "vv-agent.event-cursor.v9"),
            "checkpoint_event_cursor_schema_unsupported",
        ),
        (EventCursor(CapabilityRef("", "1"), {}), "checkpoint_capability_ref_invalid"),
        (
            EventCursor(CapabilityRef("e", "1"), {"n": float("nan")}),
            "checkpoint_definition_not_i_json",
        ),
        (EventCursor(CapabilityRef("e", "1"), {}, " "), "checkpoint_event_cursor_invalid"),
    ):
        with pytest.raises(DurableError) as caught:
            bad.validate()
        assert caught.value.code == code


def test_outbox_entries() -> None:
    entry = EventOutboxEntry.pending("evt-1", EVENT)
    assert entry.payload_digest == DIGEST and entry.state == "pending"
    entry.verify_payload()
    assert EventOutboxEntry.from_dict(entry.to_dict()) == entry
    forged = EventOutboxEntry("evt-1", "a" * 64, EVENT)
    with pytest.raises(DurableError) as caught:
        forged.verify_payload()
    assert caught.value.code == "event_identity_conflict"
    for wire in (
        {**entry.to_dict(), "state": "sent"},
        {**entry.to_dict(), "cursor": {"sequence": 1}},
        {**entry.to_dict(), "state": "delivered"},
        {**entry.to_dict(), "event_id": ""},
    ):
        with pytest.raises(DurableError) as bad:
            EventOutboxEntry.from_dict(wire)
        assert bad.value.code == "checkpoint_event_outbox_invalid"


def test_append_rules_satisfy_both_orders() -> None:
    assert check_append("evt-1", DIGEST, EVENT) == DIGEST
    assert resolve_append(DIGEST, DIGEST, None) == "insert"
    assert resolve_append(DIGEST, DIGEST, DIGEST) == "duplicate"
    cases = [
        ((DIGEST, DIGEST, "b" * 64), "event_identity_conflict"),
        (("b" * 64, DIGEST, DIGEST), "event_identity_conflict"),  # the contract's case
        (("b" * 64, DIGEST, None), "event_payload_digest_mismatch"),  # the original's check
        ((DIGEST, "c" * 64, DIGEST), "event_payload_digest_mismatch"),
    ]
    for args, code in cases:
        with pytest.raises(DurableError) as caught:
            resolve_append(*args)
        assert caught.value.code == code
