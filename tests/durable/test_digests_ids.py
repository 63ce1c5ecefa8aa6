from __future__ import annotations

import hashlib

import pytest

from agentflow.durable import (
    OPERATION_REQUEST_SCHEMA,
    DurableError,
    OperationKind,
    event_payload_digest,
    model_operation_id,
    model_request_digest,
    operation_request_digest,
    stable_event_id,
    tool_idempotency_key,
    tool_operation_id,
    tool_request,
    tool_request_digest,
)

CANONICAL_TOOL_REQUEST = (
    b'{"kind":"tool","request":{"arguments":{"amount":12,"currency":"EUR"},'
    b'"idempotency_key":"idem_x","tool_call_id":"call_9","tool_name":"charge"},'
    b'"schema_version":"vv-agent.operation-request.v1"}'
)


def model_request(**request: object) -> dict[str, object]:
    body: dict[str, object] = {
        "model": {"backend": "fake", "model_id": "m"},
        "messages": [{"role": "user", "content": "hi"}],
        "settings": {"temperature": 0},
        "tools": [],
        "output_schema": None,
        "idempotency_key": None,
    }
    body.update(request)
    return {"schema_version": OPERATION_REQUEST_SCHEMA, "kind": "model", "request": body}


def test_tool_request_digest_is_sha256_of_the_canonical_projection() -> None:
    expected = hashlib.sha256(CANONICAL_TOOL_REQUEST).hexdigest()
    arguments = {"currency": "EUR", "amount": 12}
    assert tool_request_digest("call_9", "charge", arguments, "idem_x") == expected
    request = tool_request("call_9", "charge", arguments, "idem_x")
    assert operation_request_digest(request) == expected
    assert operation_request_digest(request, kind=OperationKind.TOOL) == expected


def test_model_request_digest_changes_with_the_request() -> None:
    first = model_request_digest(model_request())
    assert first == operation_request_digest(model_request(), kind="model")
    assert model_request_digest(model_request(settings={"temperature": 1})) != first


@pytest.mark.parametrize(
    ("envelope", "code"),
    [
        ([], "operation_request_invalid"),
        (
            {"schema_version": OPERATION_REQUEST_SCHEMA, "kind": "model"},
            "operation_request_invalid",
        ),
        ({**model_request(), "extra": 1}, "operation_request_invalid"),
        ({**model_request(), "schema_version": "v0"}, "operation_request_schema_unsupported"),
        ({**model_request(), "kind": 7}, "operation_request_invalid"),
        ({**model_request(), "kind": "tool"}, "operation_request_invalid"),
        ({**model_request(), "request": []}, "operation_request_invalid"),
        (model_request(extra=1), "operation_request_invalid"),
        (model_request(settings={"seed": 2**53}), "operation_request_not_i_json"),
    ],
)
def test_operation_requests_are_closed(envelope: object, code: str) -> None:
    with pytest.raises(DurableError) as caught:
        operation_request_digest(envelope, kind=OperationKind.MODEL)
    assert caught.value.code == code


def test_tool_projection_refusals() -> None:
    with pytest.raises(DurableError) as blank:
        tool_request_digest(" ", "charge", {}, "idem")
    with pytest.raises(DurableError) as not_object:
        tool_request_digest("c", "charge", [], "idem")  # type: ignore[arg-type]
    assert (blank.value.code, not_object.value.code) == (
        "checkpoint_value_invalid",
        "operation_request_invalid",
    )


def test_event_payload_digest() -> None:
    event = {"type": "run_completed", "run_id": "r1"}
    expected = hashlib.sha256(b'{"run_id":"r1","type":"run_completed"}').hexdigest()
    assert event_payload_digest(event) == expected
    with pytest.raises(DurableError) as caught:
        event_payload_digest(["not", "an", "object"])
    assert caught.value.code == "event_payload_invalid"


def test_derived_ids() -> None:
    assert tool_idempotency_key("ledger/7", 3, "call_9") == "idem_acfafc196d32e31f957f6575436cc421"
    assert (
        stable_event_id("ledger/7", "checkpoint_resumed", ["2"])
        == "evt_f04589582902f31dfaa270ef895c0697"
    )
    assert model_operation_id(4, "planner") == "op_model_cycle_4_244b8435061420f6"
    assert tool_operation_id(2, 3) == "op_tool_cycle_2_call_3"
    assert tool_idempotency_key("ledger/7", 3, "call_9") != tool_idempotency_key(
        "ledger/7", 4, "call_9"
    )
    with pytest.raises(DurableError):
        tool_idempotency_key("bad\x00key", 1, "c")
