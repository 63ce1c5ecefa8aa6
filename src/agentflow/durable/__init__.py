"""Durable execution: journaled external calls, leases with fencing, reconciliation.

Wire-compatible with the Rust original (vv-agent's checkpoint v2): the same
canonical JSON and digests, the same record and journal shapes, the same
error codes. See docs/durable.md for the model and its guarantees.
"""

from typing import TYPE_CHECKING, Any

from agentflow.durable.enums import (
    AmbiguousModelPolicy,
    AmbiguousToolPolicy,
    CheckpointStatus,
    ClaimMode,
    OperationKind,
    OperationState,
    ReconciliationDecisionKind,
    ResumePolicy,
    ToolIdempotency,
    WireEnum,
)
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    CheckpointNotFound,
    ClaimActive,
    CycleConflict,
    DurableConflict,
    DurableCorrupted,
    DurableError,
    ErrorCode,
    LeaseLost,
    RecoveryRequired,
    RevisionConflict,
    TerminalImmutable,
)
from agentflow.durable.policies.admission import Admission, admission
from agentflow.durable.policies.failures import (
    AMBIGUOUS_TOOL_ERROR_CODES,
    DEFINITIVE_MODEL_MARKERS,
    definitive_failure,
)
from agentflow.durable.policies.reconciliation import (
    MODEL_RISK,
    TOOL_RISK,
    ReconciliationDecision,
    ReconciliationError,
    ReconciliationProvider,
    ResumeObservation,
    policy_decision,
)
from agentflow.durable.policies.stability import (
    BEHAVIOR_METADATA_SLOT,
    RECONCILIATION_PROVIDER_SLOT,
    require_stable_producer,
)
from agentflow.durable.run.config import DEFAULT_MAX_EXTENSION_STATE_BYTES, CheckpointConfig
from agentflow.durable.run.credentials import (
    CREDENTIAL_REDACTED,
    KNOWN_CREDENTIAL_HEADERS,
    live_credentials,
    redact_run_definition,
    require_declared_credential_headers,
    validate_credential_slots,
)
from agentflow.durable.run.definition import (
    RUN_DEFINITION_FIELDS,
    RUN_DEFINITION_SCHEMA,
    canonical_run_definition_bytes,
    normalize_run_definition,
    run_definition_digest,
    validate_run_definition,
)
from agentflow.durable.run.events import (
    EVENT_CURSOR_SCHEMA,
    AcceptedEvent,
    AppendOnceResult,
    EventCursor,
    EventOutboxEntry,
    EventPage,
)
from agentflow.durable.run.extensions import (
    MAX_EXTENSION_ENTRY_BYTES,
    CheckpointExtension,
    ExtensionIdentity,
    ExtensionStateEntry,
    extension_identity,
    restore_extensions,
    snapshot_extensions,
    validate_extension_state_size,
)
from agentflow.durable.run.journal import (
    ALLOWED_TRANSITIONS,
    NULL_RECEIPT,
    OperationError,
    OperationJournalEntry,
)
from agentflow.durable.run.migration import (
    LEGACY_NON_TERMINAL,
    LEGACY_WAIT_USER,
    V1Migration,
    decode_checkpoint,
    migrate_v1,
)
from agentflow.durable.run.record import (
    CHECKPOINT_V2_SCHEMA,
    OPERATOR_ABORT_CODE,
    DurableCheckpoint,
)
from agentflow.durable.run.v1 import CheckpointV1
from agentflow.durable.store import DurableEventStore, DurableStore, RunPage, RunSummary
from agentflow.durable.wire.canonical import (
    MAX_WIRE_INTEGER,
    canonical_json,
    es6_number,
    parse_json,
    utf16_sort_key,
    validate_i_json,
)
from agentflow.durable.wire.digests import (
    OPERATION_REQUEST_SCHEMA,
    event_payload_digest,
    model_request_digest,
    operation_request_digest,
    run_event_identity,
    tool_request,
    tool_request_digest,
)
from agentflow.durable.wire.ids import (
    model_operation_id,
    new_checkpoint_key,
    new_claim_token,
    run_idempotency_key,
    stable_event_id,
    tool_idempotency_key,
    tool_operation_id,
)
from agentflow.durable.wire.pointers import resolve_json_pointer, set_json_pointer, validate_pointer
from agentflow.durable.wire.validators import (
    MAX_CHECKPOINT_KEY_BYTES,
    MAX_EXTENSION_NAMESPACE_BYTES,
    CapabilityRef,
    validate_capability_slot,
    validate_checkpoint_key,
    validate_extension_namespace,
    validate_sha256,
)

__all__ = [
    "ALLOWED_TRANSITIONS",
    "AMBIGUOUS_TOOL_ERROR_CODES",
    "BEHAVIOR_METADATA_SLOT",
    "CHECKPOINT_V2_SCHEMA",
    "CREDENTIAL_REDACTED",
    "DEFAULT_MAX_EXTENSION_STATE_BYTES",
    "DEFINITIVE_MODEL_MARKERS",
    "EVENT_CURSOR_SCHEMA",
    "KNOWN_CREDENTIAL_HEADERS",
    "LEGACY_NON_TERMINAL",
    "LEGACY_WAIT_USER",
    "MAX_CHECKPOINT_KEY_BYTES",
    "MAX_EXTENSION_ENTRY_BYTES",
    "MAX_EXTENSION_NAMESPACE_BYTES",
    "MAX_WIRE_INTEGER",
    "MODEL_RISK",
    "NULL_RECEIPT",
    "OPERATION_REQUEST_SCHEMA",
    "OPERATOR_ABORT_CODE",
    "RECONCILIATION_PROVIDER_SLOT",
    "RUN_DEFINITION_FIELDS",
    "RUN_DEFINITION_SCHEMA",
    "TOOL_RISK",
    "AcceptedEvent",
    "Admission",
    "AmbiguousModelPolicy",
    "AmbiguousToolPolicy",
    "AppendOnceResult",
    "CapabilityRef",
    "CheckpointAlreadyExists",
    "CheckpointConfig",
    "CheckpointExtension",
    "CheckpointNotFound",
    "CheckpointStatus",
    "CheckpointV1",
    "ClaimActive",
    "ClaimMode",
    "CycleConflict",
    "DurableCheckpoint",
    "DurableConflict",
    "DurableCorrupted",
    "DurableError",
    "DurableEventStore",
    "DurableStore",
    "ErrorCode",
    "EventCursor",
    "EventOutboxEntry",
    "EventPage",
    "ExtensionIdentity",
    "ExtensionStateEntry",
    "InMemoryRunEventStore",
    "LeaseLost",
    "OperationError",
    "OperationJournalEntry",
    "OperationKind",
    "OperationState",
    "ReconciliationDecision",
    "ReconciliationDecisionKind",
    "ReconciliationError",
    "ReconciliationProvider",
    "RecoveryRequired",
    "ResumeObservation",
    "ResumePolicy",
    "RevisionConflict",
    "RunPage",
    "RunSummary",
    "TerminalImmutable",
    "ToolIdempotency",
    "V1Migration",
    "WireEnum",
    "admission",
    "canonical_json",
    "canonical_run_definition_bytes",
    "decode_checkpoint",
    "definitive_failure",
    "es6_number",
    "event_payload_digest",
    "extension_identity",
    "live_credentials",
    "migrate_v1",
    "model_operation_id",
    "model_request_digest",
    "new_checkpoint_key",
    "new_claim_token",
    "normalize_run_definition",
    "operation_request_digest",
    "parse_json",
    "policy_decision",
    "redact_run_definition",
    "require_declared_credential_headers",
    "require_stable_producer",
    "resolve_json_pointer",
    "restore_extensions",
    "run_definition_digest",
    "run_event_identity",
    "set_json_pointer",
    "snapshot_extensions",
    "stable_event_id",
    "run_idempotency_key",
    "tool_idempotency_key",
    "tool_operation_id",
    "tool_request",
    "tool_request_digest",
    "utf16_sort_key",
    "validate_capability_slot",
    "validate_checkpoint_key",
    "validate_credential_slots",
    "validate_extension_namespace",
    "validate_extension_state_size",
    "validate_i_json",
    "validate_pointer",
    "validate_run_definition",
    "validate_sha256",
]


if TYPE_CHECKING:  # named for the checkers; imported at run time only when asked for
    from agentflow.checkpoint.memory import MemoryCheckpointer as InMemoryRunEventStore


def __getattr__(name: str) -> Any:
    # The original's in-memory event store is the memory backend, which is a
    # store of records and events as well; it is imported only when named.
    if name == "InMemoryRunEventStore":
        from agentflow.checkpoint.memory import MemoryCheckpointer

        return MemoryCheckpointer
    raise AttributeError(f"module 'agentflow.durable' has no attribute {name!r}")
