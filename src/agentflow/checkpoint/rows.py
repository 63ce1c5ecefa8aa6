"""How every backend lays out one run: a small head, a body, and journal entries.

A record is split so each store operation is one small conditional write:

* the **head** (:class:`RunHead`) holds what writes compare and what small
  writes change: revision, status, cycle, resume attempt, the claim tuple and
  lease, the terminal and acknowledgement flags, whether any journal entry is
  ambiguous, and an *identity* digest of the fields that never change after
  ``create``. A backend keeps each as a column, hash field or document field,
  so a guard is a plain comparison and a lease renewal touches one field;
* the **body** is the canonical JSON of every other record field except the
  journals; it is rewritten by progress, suspend, commit, finalize and event
  delivery, never by a claim, a renewal, a journal write or an acknowledgement;
* each **journal entry** is its own canonical JSON, in an ordered list per
  kind, so recording one transition writes one entry.

:func:`encode_row` and :func:`decode_row` convert between this layout and a
:class:`DurableCheckpoint`; decoding validates, and a row that fails raises
:class:`DurableCorrupted` (never reads as missing).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agentflow.durable.enums import CheckpointStatus, OperationKind
from agentflow.durable.errors import DurableCorrupted, DurableError
from agentflow.durable.run.journal import OperationJournalEntry
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.canonical import canonical_json, parse_json

__all__ = [
    "BODY_EXCLUDED_FIELDS",
    "RunHead",
    "RunRow",
    "summary_of",
    "decode_row",
    "encode_body",
    "encode_entry",
    "encode_row",
    "head_of",
    "identity_of",
]

#: Record fields a row keeps outside the body (in the head or as entries).
BODY_EXCLUDED_FIELDS = frozenset(
    {
        "revision",
        "status",
        "cycle_index",
        "resume_attempt",
        "claim_token",
        "claimed_cycle",
        "lease_expires_at_ms",
        "terminal_acknowledged",
        "model_call_journal",
        "tool_journal",
    }
)
_IDENTITY_FIELDS = (
    "schema_version",
    "run_definition_schema",
    "checkpoint_key",
    "task_id",
    "root_run_id",
    "trace_id",
    "run_definition_digest",
)


@dataclass(frozen=True, slots=True)
class RunHead:
    """The compared and cheaply updated fields of one run."""

    revision: int
    status: CheckpointStatus
    cycle_index: int
    resume_attempt: int
    claim_token: str | None
    claimed_cycle: int | None
    lease_expires_at_ms: int | None
    terminal: bool
    terminal_acknowledged: bool
    ambiguous: bool
    identity: str


@dataclass(frozen=True, slots=True)
class RunRow:
    """One run as a backend stores it."""

    key: str
    head: RunHead
    body: bytes
    model_journal: tuple[bytes, ...]
    tool_journal: tuple[bytes, ...]

    def journal(self, kind: OperationKind) -> tuple[bytes, ...]:
        return self.model_journal if kind is OperationKind.MODEL else self.tool_journal


def summary_of(key: str, head: RunHead) -> RunSummary:
    """The listing line of the run ``key`` whose stored head is ``head``."""
    return RunSummary(
        key=key,
        status=head.status,
        revision=head.revision,
        cycle_index=head.cycle_index,
        resume_attempt=head.resume_attempt,
        claimed=head.claim_token is not None,
        lease_expires_at_ms=head.lease_expires_at_ms,
        terminal=head.terminal,
        terminal_acknowledged=head.terminal_acknowledged,
        ambiguous=head.ambiguous,
    )


def _identity(*values: Any) -> str:
    fields = dict(zip(_IDENTITY_FIELDS, values, strict=True))
    return hashlib.sha256(canonical_json(fields, what="record identity")).hexdigest()


#: Every write of a run computes its identity from the same values: memoized
#: (``typed``, so ``1`` and ``True`` or ``1.0`` are told apart as canonical JSON does).
_cached_identity = lru_cache(maxsize=1024, typed=True)(_identity)


def identity_of(record: DurableCheckpoint) -> str:
    """Digest of the fields fixed at ``create``; a write whose snapshot differs is refused."""
    values = tuple(getattr(record, name) for name in _IDENTITY_FIELDS)
    try:
        return _cached_identity(*values)
    except TypeError:  # an unhashable (so invalid) field: canonical_json decides
        return _identity(*values)


def head_of(record: DurableCheckpoint, *, identity: str | None = None) -> RunHead:
    """The head a row holding ``record`` has (``identity``: its :func:`identity_of`,
    when the caller has it already)."""
    return RunHead(
        revision=record.revision,
        status=record.status,
        cycle_index=record.cycle_index,
        resume_attempt=record.resume_attempt,
        claim_token=record.claim_token,
        claimed_cycle=record.claimed_cycle,
        lease_expires_at_ms=record.lease_expires_at_ms,
        terminal=record.terminal_result is not None,
        terminal_acknowledged=record.terminal_acknowledged,
        ambiguous=record.has_ambiguous_operation(),  # O(1) on a written record
        identity=identity_of(record) if identity is None else identity,
    )


def encode_entry(entry: OperationJournalEntry) -> bytes:
    """The stored bytes of one journal entry."""
    return canonical_json(entry.to_dict(), what="operation journal entry")


def encode_body(record: DurableCheckpoint) -> bytes:
    """The stored bytes of a record's body (no head fields, no journals)."""
    wire = record.to_dict()
    body = {name: value for name, value in wire.items() if name not in BODY_EXCLUDED_FIELDS}
    return canonical_json(body, what="checkpoint body")


def encode_row(record: DurableCheckpoint) -> RunRow:
    """Validate ``record`` and lay it out as a row."""
    record.validate()
    return RunRow(
        key=record.checkpoint_key,
        head=head_of(record),
        body=encode_body(record),
        model_journal=tuple(encode_entry(entry) for entry in record.model_call_journal),
        tool_journal=tuple(encode_entry(entry) for entry in record.tool_journal),
    )


def _head_fields(head: RunHead) -> dict[str, Any]:
    return {
        "revision": head.revision,
        "status": head.status.value,
        "cycle_index": head.cycle_index,
        "resume_attempt": head.resume_attempt,
        "claim_token": head.claim_token,
        "claimed_cycle": head.claimed_cycle,
        "lease_expires_at_ms": head.lease_expires_at_ms,
        "terminal_acknowledged": head.terminal_acknowledged,
    }


def decode_row(row: RunRow) -> DurableCheckpoint:
    """Rebuild and validate the record a row holds; :class:`DurableCorrupted` if it cannot."""
    try:
        body = parse_json(row.body)
        if not isinstance(body, dict) or not BODY_EXCLUDED_FIELDS.isdisjoint(body):
            raise DurableError("checkpoint_payload_invalid", "stored body has the wrong shape")
        wire = {
            **body,
            **_head_fields(row.head),
            "model_call_journal": [parse_json(item) for item in row.model_journal],
            "tool_journal": [parse_json(item) for item in row.tool_journal],
        }
        record = DurableCheckpoint.from_dict(wire, max_extension_state_bytes=(1 << 53) - 1)
        if record.checkpoint_key != row.key or head_of(record) != row.head:
            raise DurableError(
                "checkpoint_row_invalid", "stored head disagrees with the stored body"
            )
    except DurableError as exc:
        raise DurableCorrupted(
            exc.code, f"stored record {row.key!r} is corrupted: {exc.message}"
        ) from exc
    return record
