"""``DurableCheckpoint``: the durable record of one run (the original's checkpoint v2).

Its wire form is one JSON object of 26 fields plus any unknown top-level
members, which are kept on every round trip. Messages, cycles, shared state
and budget usage are carried as JSON for the runtime that owns their shape.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentflow.durable.enums import CheckpointStatus, OperationKind, parse_enum
from agentflow.durable.errors import DurableError
from agentflow.durable.run.config import DEFAULT_MAX_EXTENSION_STATE_BYTES
from agentflow.durable.run.definition import RUN_DEFINITION_SCHEMA, run_definition_digest
from agentflow.durable.run.definition import validate_run_definition as _validate_definition
from agentflow.durable.run.events import EventCursor, EventOutboxEntry
from agentflow.durable.run.extensions import ExtensionStateEntry, validate_extension_state_size
from agentflow.durable.run.journal import OperationJournalEntry
from agentflow.durable.run.journals import ambiguous_in
from agentflow.durable.run.record_codec import CHECKPOINT_V2_SCHEMA, KNOWN_FIELDS, record_fields
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER, canonical_json, parse_json
from agentflow.durable.wire.validators import (
    is_blank,
    validate_checkpoint_key,
    validate_extension_namespace,
    validate_sha256,
)

__all__ = [
    "CHECKPOINT_V2_SCHEMA",
    "KNOWN_FIELDS",
    "OPERATOR_ABORT_CODE",
    "DurableCheckpoint",
    "evolve",
]

#: The terminal error code of a run an operator aborted with an outcome still unknown.
OPERATOR_ABORT_CODE = "operator_abort_with_unknown_outcome"
_STATUS = "checkpoint_status_invalid"
_CLAIM = "checkpoint_claim_invalid"
_LIVE = frozenset({CheckpointStatus.RUNNING, CheckpointStatus.RECONCILIATION_REQUIRED})


@dataclass
class DurableCheckpoint:
    """One run's durable state. A store owns ``revision`` and the claim fields."""

    run_definition: dict[str, Any]
    checkpoint_key: str
    task_id: str
    root_run_id: str
    trace_id: str
    run_definition_digest: str
    resume_attempt: int = 1
    cycle_index: int = 0
    status: CheckpointStatus = CheckpointStatus.RUNNING
    messages: list[Any] = field(default_factory=list)
    cycles: list[Any] = field(default_factory=list)
    shared_state: dict[str, Any] = field(default_factory=dict)
    budget_usage: Any = None
    event_cursor: EventCursor | None = None
    event_outbox: list[EventOutboxEntry] = field(default_factory=list)
    extension_state: dict[str, ExtensionStateEntry] = field(default_factory=dict)
    #: A list, or a :class:`~agentflow.durable.run.journals.Journal` (what writes make).
    model_call_journal: Sequence[OperationJournalEntry] = field(default_factory=list)
    tool_journal: Sequence[OperationJournalEntry] = field(default_factory=list)
    revision: int = 0
    claim_token: str | None = None
    claimed_cycle: int | None = None
    lease_expires_at_ms: int | None = None
    terminal_result: dict[str, Any] | None = None
    terminal_acknowledged: bool = False
    unknown_fields: dict[str, Any] = field(default_factory=dict)
    schema_version: str = CHECKPOINT_V2_SCHEMA
    run_definition_schema: str = RUN_DEFINITION_SCHEMA

    @classmethod
    def new(
        cls,
        run_definition: dict[str, Any],
        checkpoint_key: str,
        *,
        task_id: str,
        root_run_id: str,
        trace_id: str,
        **fields: Any,
    ) -> DurableCheckpoint:
        """A fresh record for ``run_definition``, its digest computed."""
        return cls(
            run_definition=run_definition,
            checkpoint_key=checkpoint_key,
            task_id=task_id,
            root_run_id=root_run_id,
            trace_id=trace_id,
            run_definition_digest=run_definition_digest(run_definition),
            **fields,
        )

    # -- derived -------------------------------------------------------------

    def journal(self, kind: OperationKind) -> Sequence[OperationJournalEntry]:
        return self.model_call_journal if kind is OperationKind.MODEL else self.tool_journal

    def active_cycle(self) -> int:
        """The cycle journal entries belong to: the claimed one, else the next."""
        cycle = self.claimed_cycle if self.claimed_cycle is not None else self.cycle_index + 1
        if not 0 < cycle <= MAX_WIRE_INTEGER:
            raise DurableError(
                "checkpoint_cycle_invalid", "active cycle is outside the JSON-safe range"
            )
        return cycle

    def has_ambiguous_operation(self) -> bool:
        """Whether a journal entry is ambiguous (O(1) on a written record's journals)."""
        return ambiguous_in(self.model_call_journal) or ambiguous_in(self.tool_journal)

    def is_operator_abort_terminal(self) -> bool:
        """True for a terminal an operator chose while an outcome was still unknown."""
        result = self.terminal_result
        if not isinstance(result, Mapping):
            return False
        return result.get("error_code") == OPERATOR_ABORT_CODE or (
            result.get("resume_observation") is not None
        )

    # -- validation ------------------------------------------------------------

    def validate(self) -> None:
        """Raise the original's code for the first inconsistency, in its order."""
        if self.schema_version != CHECKPOINT_V2_SCHEMA:
            raise DurableError(
                "checkpoint_schema_unsupported", "checkpoint schema_version is unsupported"
            )
        if self.run_definition_schema != RUN_DEFINITION_SCHEMA:
            raise DurableError(
                "checkpoint_definition_schema_unsupported",
                "run_definition_schema is missing or unsupported",
            )
        _validate_definition(self.run_definition)
        try:
            validate_sha256(self.run_definition_digest, "run_definition_digest")
        except DurableError as exc:
            raise DurableError("checkpoint_definition_digest_invalid", exc.message) from exc
        if run_definition_digest(self.run_definition) != self.run_definition_digest:
            raise DurableError(
                "checkpoint_definition_mismatch",
                "run_definition_digest does not match embedded run_definition",
            )
        validate_checkpoint_key(self.checkpoint_key)
        for name in ("task_id", "root_run_id", "trace_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or is_blank(value):
                raise DurableError("checkpoint_value_invalid", f"{name} must be non-empty")
        if not _wire_int(self.resume_attempt) or self.resume_attempt == 0:
            raise DurableError(
                "checkpoint_resume_attempt_invalid", "resume_attempt must be positive and JSON-safe"
            )
        if not _wire_int(self.cycle_index) or not _wire_int(self.revision):
            raise DurableError(
                "checkpoint_integer_invalid", "checkpoint integer is outside the JSON-safe range"
            )
        self._validate_claim()
        self._validate_status()
        self._validate_journals()
        for namespace, entry in self.extension_state.items():
            validate_extension_namespace(namespace)
            entry.validate()
        validate_extension_state_size(self.extension_state)
        if self.event_cursor is not None:
            self.event_cursor.validate()
        seen: set[str] = set()
        for outbox_entry in self.event_outbox:
            outbox_entry.validate()
            if outbox_entry.event_id in seen:
                raise DurableError(
                    "event_identity_conflict", "event outbox event ids must be unique"
                )
            seen.add(outbox_entry.event_id)
        for what, value in (
            ("messages", self.messages),
            ("cycles", self.cycles),
            ("shared_state", self.shared_state),
            ("budget_usage", self.budget_usage),
        ):
            canonical_json(value, what=what)
        for name, value in self.unknown_fields.items():
            if name in KNOWN_FIELDS:
                raise DurableError(
                    "checkpoint_unknown_field_invalid",
                    f"known field {name} cannot be stored as unknown",
                )
            canonical_json(value, what=f"unknown field {name}")
        self._validate_terminal()

    def _validate_claim(self) -> None:
        present = (
            self.claim_token is not None,
            self.claimed_cycle is not None,
            self.lease_expires_at_ms is not None,
        )
        if any(present) and not all(present):
            raise DurableError(_CLAIM, "claim fields must be all present or all null")
        if self.claim_token is None:
            return
        if not isinstance(self.claim_token, str) or is_blank(self.claim_token):
            raise DurableError(_CLAIM, "claim_token must be non-empty")
        if not _wire_int(self.claimed_cycle) or self.claimed_cycle != self.cycle_index + 1:
            raise DurableError(_CLAIM, "claimed_cycle must equal cycle_index + 1")
        if not _wire_int(self.lease_expires_at_ms):
            raise DurableError(_CLAIM, "lease expiry is outside the JSON-safe range")

    def _validate_status(self) -> None:
        terminal = self.terminal_result is not None
        if terminal and self.claim_token is not None:
            raise DurableError(_STATUS, "terminal checkpoint cannot have an active claim")
        if self.terminal_acknowledged and not terminal:
            raise DurableError(_STATUS, "terminal acknowledgement requires a terminal result")
        if not terminal and self.status not in _LIVE:
            raise DurableError(
                _STATUS, "non-terminal checkpoint must be running or reconciliation_required"
            )
        if terminal and not self.status.is_terminal:
            raise DurableError(_STATUS, "terminal_result requires a terminal checkpoint status")

    def _validate_journals(self) -> None:
        active = self.active_cycle()
        for entry in (*self.model_call_journal, *self.tool_journal):
            entry.validate()
            if entry.cycle_index != active:
                raise DurableError(
                    "checkpoint_journal_cycle_invalid",
                    "journal cycle_index must equal the active cycle",
                )
        if any(e.kind is not OperationKind.MODEL for e in self.model_call_journal) or any(
            e.kind is not OperationKind.TOOL for e in self.tool_journal
        ):
            raise DurableError(
                "checkpoint_journal_kind_invalid",
                "journal arrays contain an entry of the wrong kind",
            )
        for journal in (self.model_call_journal, self.tool_journal):
            if len({entry.operation_id for entry in journal}) != len(journal):
                raise DurableError(
                    "checkpoint_journal_integrity_mismatch", "journal operation ids must be unique"
                )

    def _validate_terminal(self) -> None:
        ambiguous = self.has_ambiguous_operation()
        if self.status is CheckpointStatus.RECONCILIATION_REQUIRED and (
            not ambiguous or self.claim_token is not None
        ):
            raise DurableError(
                _STATUS, "reconciliation_required needs an ambiguous journal and no claim"
            )
        if self.status is CheckpointStatus.RUNNING and ambiguous and self.claim_token is None:
            raise DurableError(
                _STATUS, "running checkpoint with ambiguity needs an active recovery claim"
            )
        result = self.terminal_result
        if result is None:
            return
        if (self.model_call_journal or self.tool_journal) and not self.is_operator_abort_terminal():
            raise DurableError(_STATUS, "terminal checkpoint cannot retain active journals")
        canonical_json(result, what="terminal_result")
        if not isinstance(result, Mapping) or result.get("status") != self.status.value:
            raise DurableError(_STATUS, "terminal result status must match checkpoint status")

    # -- wire form -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The 26-field wire object plus unknown members (not validated here)."""
        cursor = self.event_cursor
        return {
            **self.unknown_fields,
            "schema_version": self.schema_version,
            "run_definition_schema": self.run_definition_schema,
            "run_definition": self.run_definition,
            "checkpoint_key": self.checkpoint_key,
            "task_id": self.task_id,
            "root_run_id": self.root_run_id,
            "trace_id": self.trace_id,
            "run_definition_digest": self.run_definition_digest,
            "resume_attempt": self.resume_attempt,
            "cycle_index": self.cycle_index,
            "status": self.status.value,
            "messages": self.messages,
            "cycles": self.cycles,
            "shared_state": self.shared_state,
            "budget_usage": self.budget_usage,
            "event_cursor": None if cursor is None else cursor.to_dict(),
            "event_outbox": [entry.to_dict() for entry in self.event_outbox],
            "extension_state": {ns: entry.to_dict() for ns, entry in self.extension_state.items()},
            "model_call_journal": [entry.to_dict() for entry in self.model_call_journal],
            "tool_journal": [entry.to_dict() for entry in self.tool_journal],
            "revision": self.revision,
            "claim_token": self.claim_token,
            "claimed_cycle": self.claimed_cycle,
            "lease_expires_at_ms": self.lease_expires_at_ms,
            "terminal_result": self.terminal_result,
            "terminal_acknowledged": self.terminal_acknowledged,
        }

    def to_json(self, max_extension_state_bytes: int = DEFAULT_MAX_EXTENSION_STATE_BYTES) -> bytes:
        """Validate and return the canonical bytes of the wire form."""
        self.validate()
        validate_extension_state_size(self.extension_state, max_extension_state_bytes)
        return canonical_json(self.to_dict(), what="checkpoint v2")

    @classmethod
    def from_json(
        cls,
        data: bytes | str,
        max_extension_state_bytes: int = DEFAULT_MAX_EXTENSION_STATE_BYTES,
    ) -> DurableCheckpoint:
        """Strictly parse and validate a wire document (see :func:`parse_json`)."""
        return cls.from_dict(parse_json(data), max_extension_state_bytes)

    @classmethod
    def from_dict(
        cls,
        payload: object,
        max_extension_state_bytes: int = DEFAULT_MAX_EXTENSION_STATE_BYTES,
    ) -> DurableCheckpoint:
        """Read and validate the wire object, with the original's codes and order."""
        record = cls(**record_fields(payload))
        record.validate()
        validate_extension_state_size(record.extension_state, max_extension_state_bytes)
        return record


def _wire_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_WIRE_INTEGER


def parse_status(value: object) -> CheckpointStatus:
    return parse_enum(CheckpointStatus, value, _STATUS, "checkpoint status")


def evolve(record: DurableCheckpoint, **changes: Any) -> DurableCheckpoint:
    """``dataclasses.replace`` for a record (a plain dataclass whose ``__init__``
    only assigns): the same shallow copy, without building the call of every
    field, on the paths that copy a record per journaled call."""
    evolved = copy.copy(record)
    evolved.__dict__.update(changes)
    return evolved
