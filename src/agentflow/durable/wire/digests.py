"""SHA-256 digests over canonical JSON: the identities the journal and outbox rely on.

A digest is lowercase hex of SHA-256 over :func:`canonical_json` bytes, so the
same value has the same digest in Python and in the Rust original.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final, overload

from agentflow.durable.enums import OperationKind, parse_enum
from agentflow.durable.errors import DurableError
from agentflow.durable.wire.canonical import canonical_json
from agentflow.durable.wire.validators import require_non_empty

__all__ = [
    "OPERATION_REQUEST_SCHEMA",
    "event_payload_digest",
    "model_request_digest",
    "operation_request_digest",
    "run_event_identity",
    "sha256_canonical",
    "tool_request",
    "tool_request_digest",
]

OPERATION_REQUEST_SCHEMA = "vv-agent.operation-request.v1"
_REQUEST = "operation_request_invalid"
_REQUEST_FIELDS = {
    OperationKind.MODEL: frozenset(
        {"model", "messages", "settings", "tools", "output_schema", "idempotency_key"}
    ),
    OperationKind.TOOL: frozenset({"tool_call_id", "tool_name", "arguments", "idempotency_key"}),
}
_ENVELOPE = frozenset({"schema_version", "kind", "request"})
#: Marks "no second positional argument" in :func:`operation_request_digest`.
_UNSET: Final = object()


def sha256_canonical(value: object, what: str) -> str:
    """Hex SHA-256 of the canonical bytes of ``value``."""
    return hashlib.sha256(canonical_json(value, what=what)).hexdigest()


def event_payload_digest(event: object) -> str:
    """The accepted-once identity digest of an event; the event must be an object."""
    if not isinstance(event, Mapping):
        raise DurableError("event_payload_invalid", "event payload must be an object")
    return sha256_canonical(event, "event payload")


@overload
def operation_request_digest(
    request: object, /, *, kind: OperationKind | str | None = None
) -> str: ...


@overload
def operation_request_digest(kind: OperationKind | str, request: object, /) -> str: ...


def operation_request_digest(
    first: object, second: object = _UNSET, /, *, kind: OperationKind | str | None = None
) -> str:
    """Digest of a closed ``{schema_version, kind, request}`` operation request.

    Called as ``operation_request_digest(request, kind=...)`` or, in the
    original's argument order, ``operation_request_digest(kind, request)``.
    The envelope must have exactly those three members, the request schema
    ``vv-agent.operation-request.v1``, and a request object with exactly the
    members of its kind (model: model, messages, settings, tools,
    output_schema, idempotency_key; tool: tool_call_id, tool_name, arguments,
    idempotency_key). When ``kind`` is given it must match the envelope's.
    Codes: ``operation_request_invalid``, ``operation_request_schema_unsupported``,
    ``operation_request_not_i_json``.
    """
    if second is _UNSET:
        request = first
    elif kind is None and isinstance(first, str):
        kind, request = first, second
    else:
        raise TypeError("operation_request_digest takes (request, *, kind=) or (kind, request)")
    if not isinstance(request, Mapping):
        raise DurableError(_REQUEST, "operation request must be an object")
    if set(request) != _ENVELOPE:
        raise DurableError(_REQUEST, "operation request has missing or unknown fields")
    if request["schema_version"] != OPERATION_REQUEST_SCHEMA:
        raise DurableError(
            "operation_request_schema_unsupported", "operation request schema is unsupported"
        )
    actual = request["kind"]
    if not isinstance(actual, str):
        raise DurableError(_REQUEST, "operation request kind is invalid")
    expected = parse_enum(OperationKind, actual if kind is None else kind, _REQUEST, "kind")
    if actual != expected.value:
        raise DurableError(_REQUEST, "operation request kind does not match the journal operation")
    payload = request["request"]
    if not isinstance(payload, Mapping):
        raise DurableError(_REQUEST, "operation request payload must be an object")
    if set(payload) != _REQUEST_FIELDS[expected]:
        raise DurableError(_REQUEST, "operation request payload has missing or unknown fields")
    try:
        data = canonical_json(request, what="operation request")
    except DurableError as exc:
        if exc.code == "checkpoint_definition_not_i_json":
            raise DurableError("operation_request_not_i_json", exc.message) from exc
        raise
    return hashlib.sha256(data).hexdigest()


def run_event_identity(event: object) -> tuple[str, str]:
    """The accepted-once identity of a run event: its own ``event_id`` and its digest.

    What the original's ``RunEventStore::append`` hands to ``append_once``:
    an event carries its id, so a plain append of the same event twice is
    accepted once.
    """
    event_id = event.get("event_id") if isinstance(event, Mapping) else None
    if not isinstance(event_id, str):
        raise DurableError("event_payload_invalid", "a run event is an object with an event_id")
    return event_id, event_payload_digest(event)


def model_request_digest(request: object) -> str:
    """Digest of a model operation request (see :func:`operation_request_digest`)."""
    return operation_request_digest(request, kind=OperationKind.MODEL)


def tool_request(
    tool_call_id: str, tool_name: str, arguments: Mapping[str, Any], idempotency_key: str
) -> dict[str, Any]:
    """The closed request projection of one tool call."""
    require_non_empty(tool_call_id, "tool_call_id")
    require_non_empty(tool_name, "tool_name")
    require_non_empty(idempotency_key, "idempotency_key")
    if not isinstance(arguments, Mapping):
        raise DurableError(_REQUEST, "tool arguments must be an object")
    return {
        "schema_version": OPERATION_REQUEST_SCHEMA,
        "kind": OperationKind.TOOL.value,
        "request": {
            "tool_call_id": tool_call_id,
            "tool_name": tool_name,
            "arguments": arguments,
            "idempotency_key": idempotency_key,
        },
    }


def tool_request_digest(
    tool_call_id: str, tool_name: str, arguments: Mapping[str, Any], idempotency_key: str
) -> str:
    """Digest of one tool call's request projection."""
    return operation_request_digest(
        tool_request(tool_call_id, tool_name, arguments, idempotency_key), kind=OperationKind.TOOL
    )
