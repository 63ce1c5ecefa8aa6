"""The seed's spellings beside the Pythonic ones: code ported from the original reads the same."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from agentflow.checkpoint.events import EventsBase
from agentflow.durable import (
    OPERATION_REQUEST_SCHEMA,
    AmbiguousModelPolicy,
    CheckpointConfig,
    CheckpointStatus,
    ClaimMode,
    DurableError,
    ErrorCode,
    LeaseLost,
    OperationKind,
    ToolIdempotency,
    event_payload_digest,
    operation_request_digest,
    run_event_identity,
    tool_request,
)
from agentflow.durable.testing import DurableHarness


def test_the_digest_takes_the_originals_argument_order_too() -> None:
    request = tool_request("call-1", "charge", {"cents": 5}, "idem_1")
    expected = operation_request_digest(request, kind=OperationKind.TOOL)
    assert operation_request_digest(OperationKind.TOOL, request) == expected
    assert operation_request_digest("tool", request) == expected
    with pytest.raises(DurableError) as caught:
        operation_request_digest(OperationKind.MODEL, request)
    assert caught.value.code == "operation_request_invalid"
    with pytest.raises(TypeError):
        operation_request_digest("tool", request, kind="tool")  # type: ignore[call-overload]
    model = {
        "schema_version": OPERATION_REQUEST_SCHEMA,
        "kind": "model",
        "request": {
            "model": "m",
            "messages": [],
            "settings": {},
            "tools": [],
            "output_schema": None,
            "idempotency_key": None,
        },
    }
    assert operation_request_digest("model", model) == operation_request_digest(model)


def test_config_new_and_with_store() -> None:
    store = object()
    for made in (CheckpointConfig.new(store), CheckpointConfig.with_store(store)):
        assert made.store is store and made == CheckpointConfig(store=store)
        made.validate()


def test_every_enum_has_as_str() -> None:
    assert CheckpointStatus.RECONCILIATION_REQUIRED.as_str() == "reconciliation_required"
    assert type(ClaimMode.RECOVERY.as_str()) is str
    for enum in (AmbiguousModelPolicy, ToolIdempotency, OperationKind):
        assert [member.as_str() for member in enum] == [member.value for member in enum]


def test_code_reads_as_an_attribute_and_as_the_originals_methods() -> None:
    errors: list[DurableError] = [DurableError("checkpoint_key_invalid", "m"), LeaseLost("gone")]
    for error in errors:
        assert isinstance(error.code, ErrorCode)
        assert error.code() == error.error_code() == error.code
        assert type(error.code()) is str and type(error.error_code()) is str
        again = pickle.loads(pickle.dumps(error))
        assert again.code() == error.code and str(again) == str(error)
    assert str(errors[0]) == "checkpoint_key_invalid: m"


def test_a_run_event_names_its_own_identity() -> None:
    event: dict[str, Any] = {"event_id": "evt-1", "run_id": "run-a", "type": "step"}
    assert run_event_identity(event) == ("evt-1", event_payload_digest(event))
    for bad in ({"run_id": "run-a"}, {"event_id": 3}, ["evt-1"]):
        with pytest.raises(DurableError) as caught:
            run_event_identity(bad)
        assert caught.value.code == "event_payload_invalid"


async def test_append_returns_the_cursor_once_per_event(durable_harness: DurableHarness) -> None:
    first: dict[str, Any] = {"event_id": "evt-1", "run_id": "run-a", "n": 1}
    second: dict[str, Any] = {"event_id": "evt-2", "run_id": "run-a", "n": 2}
    async with durable_harness.events() as store:
        assert isinstance(store, EventsBase)  # every backend's event log
        cursor = await store.append(first)
        assert await store.append(dict(first)) == cursor  # a repeat: the first cursor
        await store.append(second)
        page = await store.replay("run-a")
        after = await store.replay("run-a", after=cursor)
        with pytest.raises(DurableError) as caught:
            await store.append({**first, "n": 9})
    assert [event.event_id for event in page.events] == ["evt-1", "evt-2"]
    assert [event.event_id for event in after.events] == ["evt-2"]
    assert caught.value.code == "event_identity_conflict"
