from __future__ import annotations

import itertools

import pytest

from agentflow.durable import (
    ALLOWED_TRANSITIONS,
    NULL_RECEIPT,
    DurableError,
    OperationError,
    OperationJournalEntry,
    OperationKind,
    OperationState,
    ToolIdempotency,
    model_request_digest,
)
from agentflow.durable.testing import make_tool_entry

S = OperationState
DIGEST = "c" * 64


def test_the_happy_path_of_a_tool_call() -> None:
    planned = make_tool_entry("ledger/7", 1)
    started = planned.start()
    done = started.succeed({"row": 3})
    assert [e.state for e in (planned, started, done)] == [S.PLANNED, S.STARTED, S.SUCCEEDED]
    assert done.result == {"row": 3} and done.response is None
    assert planned.idempotency_key == done.idempotency_key and done.same_call(planned)


def test_retry_keeps_identity_and_bumps_the_attempt() -> None:
    ambiguous = make_tool_entry("ledger/7", 1).start().mark_ambiguous()
    retried = ambiguous.retry()
    assert (retried.state, retried.attempt) == (S.PLANNED, 2)
    assert (retried.operation_id, retried.request_digest, retried.idempotency_key) == (
        ambiguous.operation_id,
        ambiguous.request_digest,
        ambiguous.idempotency_key,
    )
    with pytest.raises(DurableError) as caught:
        retried.retry()
    assert caught.value.code == "operation_transition_invalid"


def _in_state(state: OperationState) -> OperationJournalEntry:
    entry = make_tool_entry("k", 1)
    path = {
        S.PLANNED: [],
        S.STARTED: [S.STARTED],
        S.SUCCEEDED: [S.STARTED, S.SUCCEEDED],
        S.FAILED: [S.FAILED],
        S.AMBIGUOUS: [S.STARTED, S.AMBIGUOUS],
    }[state]
    for step in path:
        entry = entry.transition_to(step, receipt={"ok": 1}, error=OperationError("e", "m"))
    return entry


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)))
def test_only_the_allowed_transitions_pass(source: OperationState, target: OperationState) -> None:
    entry = _in_state(source)
    if (source, target) in ALLOWED_TRANSITIONS:
        moved = entry.transition_to(target, receipt={"ok": 1}, error=OperationError("e", "m"))
        assert moved.state is target
    else:
        with pytest.raises(DurableError) as caught:
            entry.transition_to(target, receipt={"ok": 1}, error=OperationError("e", "m"))
        assert caught.value.code == "operation_transition_invalid"
    assert len(ALLOWED_TRANSITIONS) == 8


def test_receipts_are_required_and_exclusive() -> None:
    started = make_tool_entry("k", 1).start()
    with pytest.raises(DurableError) as no_receipt:
        started.transition_to(S.SUCCEEDED)
    with pytest.raises(DurableError) as no_error:
        started.transition_to(S.FAILED)
    assert no_receipt.value.code == "operation_receipt_required"
    assert no_error.value.code == "operation_error_required"


def test_wire_form_round_trips_both_kinds() -> None:
    model = OperationJournalEntry.model("op_model_cycle_1_x", 1, DIGEST).start()
    model = model.succeed({"content": "hi", "tool_calls": []})
    tool = make_tool_entry("k", 2, support=ToolIdempotency.SUPPORTED).fail(
        OperationError("declined", "card declined", retryable=True)
    )
    for entry in (model, tool):
        assert OperationJournalEntry.from_dict(entry.to_dict()) == entry
    assert "tool_name" not in model.to_dict() and "response" not in tool.to_dict()


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"cycle_index": 0}, "operation_cycle_invalid"),
        ({"attempt": 0}, "operation_attempt_invalid"),
        ({"attempt": True}, "operation_attempt_invalid"),
        ({"request_digest": DIGEST.upper()}, "operation_request_digest_invalid"),
        ({"operation_id": "  "}, "operation_id_invalid"),
        ({"state": "done"}, "operation_journal_invalid"),
        ({"kind": "human"}, "operation_journal_invalid"),
        ({"tool_name": "x"}, "operation_kind_fields_invalid"),
        ({"state": "succeeded"}, "operation_receipt_required"),
        ({"state": "failed"}, "operation_error_required"),
        ({"response": {"early": True}}, "operation_receipt_unexpected"),
        ({"error": {"code": "", "message": "m", "retryable": False}}, "operation_error_invalid"),
    ],
)
def test_invalid_model_entries(changes: dict[str, object], code: str) -> None:
    wire = OperationJournalEntry.model("op", 1, DIGEST).to_dict()
    with pytest.raises(DurableError) as caught:
        OperationJournalEntry.from_dict({**wire, **changes})
    assert caught.value.code == code


def test_tool_entries_need_their_key_and_no_response() -> None:
    wire = make_tool_entry("k", 1).to_dict()
    for changes, code in (
        ({"idempotency_key": None}, "tool_idempotency_key_required"),
        ({"idempotency_support": None}, "tool_idempotency_key_required"),
        ({"arguments": "x"}, "operation_kind_fields_invalid"),
        ({"response": {"x": 1}}, "operation_kind_fields_invalid"),
    ):
        with pytest.raises(DurableError) as caught:
            OperationJournalEntry.from_dict({**wire, **changes})
        assert caught.value.code == code


def test_verify_request_refuses_another_request() -> None:
    request = {
        "schema_version": "vv-agent.operation-request.v1",
        "kind": "model",
        "request": {
            "model": {"backend": "b", "model_id": "m"},
            "messages": [],
            "settings": {},
            "tools": [],
            "output_schema": None,
            "idempotency_key": None,
        },
    }
    entry = OperationJournalEntry.model("op", 1, model_request_digest(request))
    entry.verify_request(request)
    changed = {**request, "request": {**request["request"], "messages": [{"role": "user"}]}}  # type: ignore[dict-item]
    with pytest.raises(DurableError) as caught:
        entry.verify_request(changed)
    assert caught.value.code == "checkpoint_journal_integrity_mismatch"
    assert entry.kind is OperationKind.MODEL


@pytest.mark.parametrize("kind", ["tool", "model"])
def test_a_null_receipt_is_a_receipt(kind: str) -> None:
    planned = (
        make_tool_entry("ledger/7", 1)
        if kind == "tool"
        else OperationJournalEntry.model("op_model_1", 1, DIGEST)
    )
    done = planned.start().succeed(None)
    stored = done.to_dict()
    assert stored["result" if kind == "tool" else "response"] == dict(NULL_RECEIPT)
    again = OperationJournalEntry.from_dict(stored)  # valid on the wire, for the original too
    assert (again.state, again.receipt) == (S.SUCCEEDED, None)
    marker_like = {"agentflow.receipt": "null"}
    echoed = OperationJournalEntry.from_dict(planned.start().succeed(marker_like).to_dict())
    assert echoed.receipt == marker_like  # a receipt shaped like the marker is kept apart
    assert OperationJournalEntry.from_dict(planned.start().succeed(0).to_dict()).receipt == 0


def test_succeeded_without_any_receipt_is_still_refused() -> None:
    started = make_tool_entry("ledger/7", 1).start()
    with pytest.raises(DurableError) as given_none:
        started.transition_to(S.SUCCEEDED)
    wire = {**started.to_dict(), "state": "succeeded", "result": None}
    with pytest.raises(DurableError) as null_member:
        OperationJournalEntry.from_dict(wire)  # the contract's succeeded_without_receipt
    assert given_none.value.code == null_member.value.code == "operation_receipt_required"
