"""Reading a record's wire object, field by field, with the original's codes.

Decoding checks shapes only; :meth:`DurableCheckpoint.validate` then checks
the rules between fields. Both run on every read of a stored record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentflow.durable.enums import CheckpointStatus, parse_enum
from agentflow.durable.errors import DurableError
from agentflow.durable.run.definition import RUN_DEFINITION_SCHEMA
from agentflow.durable.run.events import EventCursor, EventOutboxEntry
from agentflow.durable.run.extensions import ExtensionStateEntry
from agentflow.durable.run.journal import OperationJournalEntry
from agentflow.durable.wire.validators import CapabilityRef

__all__ = ["CHECKPOINT_V2_SCHEMA", "KNOWN_FIELDS", "record_fields"]

CHECKPOINT_V2_SCHEMA = "vv-agent.checkpoint.v2"
KNOWN_FIELDS = (
    "schema_version",
    "run_definition_schema",
    "run_definition",
    "checkpoint_key",
    "task_id",
    "root_run_id",
    "trace_id",
    "run_definition_digest",
    "resume_attempt",
    "cycle_index",
    "status",
    "messages",
    "cycles",
    "shared_state",
    "budget_usage",
    "event_cursor",
    "event_outbox",
    "extension_state",
    "model_call_journal",
    "tool_journal",
    "revision",
    "claim_token",
    "claimed_cycle",
    "lease_expires_at_ms",
    "terminal_result",
    "terminal_acknowledged",
)
_FIELD = "checkpoint_field_invalid"


def _string(data: Mapping[str, Any], name: str, code: str) -> str:
    value = data[name]
    if not isinstance(value, str):
        raise DurableError(code, f"{name} must be a string")
    return value


def _unsigned(data: Mapping[str, Any], name: str, code: str) -> int:
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DurableError(code, f"{name} must be a non-negative integer")
    return value


def _optional_unsigned(data: Mapping[str, Any], name: str) -> int | None:
    return None if data[name] is None else _unsigned(data, name, "checkpoint_integer_invalid")


def _array(data: Mapping[str, Any], name: str, code: str = _FIELD) -> list[Any]:
    value = data[name]
    if not isinstance(value, list):
        raise DurableError(code, f"{name} must be an array")
    return value


def _objects(data: Mapping[str, Any], name: str, code: str) -> list[Any]:
    items = _array(data, name, code)
    if not all(isinstance(item, dict) for item in items):
        raise DurableError(code, f"every item of {name} must be an object")
    return items


def _event_cursor(value: Any) -> EventCursor | None:
    if value is None:
        return None
    reference = value.get("store_ref") if isinstance(value, Mapping) else None
    if (
        not isinstance(value, Mapping)
        or not isinstance(value.get("schema_version"), str)
        or "value" not in value
        or not isinstance(reference, Mapping)
        or not isinstance(reference.get("id"), str)
        or not isinstance(reference.get("version"), str)
        or not isinstance(value.get("last_event_id"), str | None)
    ):
        raise DurableError(_FIELD, "event_cursor must be an event cursor object")
    return EventCursor(
        store_ref=CapabilityRef(reference["id"], reference["version"]),
        value=value["value"],
        last_event_id=value.get("last_event_id"),
        schema_version=value["schema_version"],
    )


def _extensions(value: Any) -> dict[str, ExtensionStateEntry]:
    if not isinstance(value, Mapping):
        raise DurableError(
            "checkpoint_extension_state_invalid", "extension_state must be an object"
        )
    return {namespace: ExtensionStateEntry.from_dict(entry) for namespace, entry in value.items()}


def record_fields(payload: object) -> dict[str, Any]:
    """The fields of a record, read from its wire object; raises :class:`DurableError`."""
    if not isinstance(payload, Mapping):
        raise DurableError("checkpoint_payload_invalid", "checkpoint v2 payload must be an object")
    if payload.get("schema_version") != CHECKPOINT_V2_SCHEMA:
        raise DurableError(
            "checkpoint_schema_unsupported",
            "checkpoint schema_version is not vv-agent.checkpoint.v2",
        )
    if payload.get("run_definition_schema") != RUN_DEFINITION_SCHEMA:
        raise DurableError(
            "checkpoint_definition_schema_unsupported", "run_definition_schema is unsupported"
        )
    if "run_definition" not in payload:
        raise DurableError("checkpoint_definition_invalid", "run_definition is required")
    missing = next((name for name in KNOWN_FIELDS if name not in payload), None)
    if missing is not None:
        raise DurableError(_FIELD, f"required checkpoint field {missing} is missing")
    shared_state = payload["shared_state"]
    if not isinstance(shared_state, dict):
        raise DurableError("checkpoint_shared_state_invalid", "shared_state must be an object")
    claim_token = payload["claim_token"]
    if claim_token is not None and not isinstance(claim_token, str):
        raise DurableError("checkpoint_claim_invalid", "claim_token must be a string or null")
    acknowledged = payload["terminal_acknowledged"]
    if not isinstance(acknowledged, bool):
        raise DurableError("checkpoint_status_invalid", "terminal_acknowledged must be a boolean")
    return dict(
        schema_version=CHECKPOINT_V2_SCHEMA,
        run_definition_schema=RUN_DEFINITION_SCHEMA,
        run_definition=payload["run_definition"],
        checkpoint_key=_string(payload, "checkpoint_key", "checkpoint_key_invalid"),
        task_id=_string(payload, "task_id", "checkpoint_value_invalid"),
        root_run_id=_string(payload, "root_run_id", "checkpoint_value_invalid"),
        trace_id=_string(payload, "trace_id", "checkpoint_value_invalid"),
        run_definition_digest=_string(
            payload, "run_definition_digest", "checkpoint_digest_invalid"
        ),
        resume_attempt=_unsigned(payload, "resume_attempt", "checkpoint_resume_attempt_invalid"),
        cycle_index=_unsigned(payload, "cycle_index", "checkpoint_cycle_invalid"),
        status=parse_enum(
            CheckpointStatus, payload["status"], "checkpoint_status_invalid", "checkpoint status"
        ),
        messages=_objects(payload, "messages", "checkpoint_messages_invalid"),
        cycles=_objects(payload, "cycles", "checkpoint_cycles_invalid"),
        shared_state=shared_state,
        budget_usage=payload["budget_usage"],
        event_cursor=_event_cursor(payload["event_cursor"]),
        event_outbox=[EventOutboxEntry.from_dict(item) for item in _array(payload, "event_outbox")],
        extension_state=_extensions(payload["extension_state"]),
        model_call_journal=[
            OperationJournalEntry.from_dict(item) for item in _array(payload, "model_call_journal")
        ],
        tool_journal=[
            OperationJournalEntry.from_dict(item) for item in _array(payload, "tool_journal")
        ],
        revision=_unsigned(payload, "revision", "checkpoint_revision_invalid"),
        claim_token=claim_token,
        claimed_cycle=_optional_unsigned(payload, "claimed_cycle"),
        lease_expires_at_ms=_optional_unsigned(payload, "lease_expires_at_ms"),
        terminal_result=payload["terminal_result"],
        terminal_acknowledged=acknowledged,
        unknown_fields={name: value for name, value in payload.items() if name not in KNOWN_FIELDS},
    )
