"""Between a PostgreSQL store's record rows and the shared row layout.

Reads check every column before trusting it, and a journal's rows must be
exactly the places ``0..n-1`` of each kind: a damaged or missing row raises
:class:`~agentflow.durable.errors.DurableCorrupted`, never reads as missing
or as other data. Writes turn a planned
:class:`~agentflow.checkpoint.plans.Write` into its statement's shape and
parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from agentflow.checkpoint.backend import EncodedCheckpoint
from agentflow.checkpoint.envelope import RunParts
from agentflow.checkpoint.plans import JournalReplace, Write
from agentflow.checkpoint.postgres.runs_sql import HEAD_COLUMNS, WriteShape
from agentflow.checkpoint.rows import RunHead, RunRow
from agentflow.checkpoint.store_base import run_thread_status
from agentflow.durable.enums import CheckpointStatus, OperationKind
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER

__all__ = ["HEAD_WIDTH", "decode_run", "head_from", "row_params", "step_params", "write_params"]

HEAD_WIDTH: Final = len(HEAD_COLUMNS)
_ROW_INVALID: Final = "checkpoint_row_invalid"
_STATUSES: Final = frozenset(status.value for status in CheckpointStatus)
_KINDS: Final = {kind.value: kind for kind in OperationKind}


def _count(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_WIRE_INTEGER


def head_from(key: str, values: Sequence[Any]) -> RunHead:
    """The head stored in ``values`` (the columns of ``HEAD_COLUMNS``, in order)."""
    revision, status, cycle, attempt, token, claimed, lease, terminal, acked, ambiguous, ident = (
        values
    )
    if (
        all(_count(value) for value in (revision, cycle, attempt))
        and all(value is None or _count(value) for value in (claimed, lease))
        and all(type(value) is bool for value in (terminal, acked, ambiguous))
        and (token is None or isinstance(token, str))
        and isinstance(ident, str)
        and status in _STATUSES
    ):
        status = CheckpointStatus(status)
        flags = (terminal, acked, ambiguous)
        return RunHead(revision, status, cycle, attempt, token, claimed, lease, *flags, ident)
    raise DurableCorrupted(_ROW_INVALID, f"stored head of {key!r} has damaged columns")


def _journals(
    key: str, kinds: list[Any] | None, idxs: list[Any] | None, entries: list[Any] | None
) -> dict[OperationKind, list[bytes]]:
    """Each kind's entries, from the rows' kinds, places and entries (ordered by kind, place)."""
    journals: dict[OperationKind, list[bytes]] = {kind: [] for kind in OperationKind}
    for kind, idx, entry in zip(kinds or (), idxs or (), entries or (), strict=True):
        journal = journals[_KINDS[kind]] if kind in _KINDS else None
        if journal is None or idx != len(journal) or not isinstance(entry, bytes):
            raise DurableCorrupted(
                _ROW_INVALID, f"stored journal of {key!r} has a damaged or missing entry row"
            )
        journal.append(entry)
    return journals


def decode_run(parts: RunParts, key: str, columns: Sequence[Any]) -> DurableCheckpoint:
    """The record of ``key`` from its head columns, then its body and journal arrays
    (kinds, places, entries)."""
    body = columns[HEAD_WIDTH]
    if not isinstance(body, bytes):
        raise DurableCorrupted(_ROW_INVALID, f"stored body of {key!r} is missing")
    journals = _journals(key, *columns[HEAD_WIDTH + 1 : HEAD_WIDTH + 4])
    head = head_from(key, columns[:HEAD_WIDTH])
    model, tool = journals[OperationKind.MODEL], journals[OperationKind.TOOL]
    return parts.decode_row(RunRow(key, head, body, tuple(model), tuple(tool)))


def _head_params(head: RunHead) -> dict[str, Any]:
    """The head columns' parameters, named as the columns, and the thread's run status."""
    params = {name: getattr(head, name) for name in HEAD_COLUMNS}
    params["status"] = head.status.value
    params["run_status"] = run_thread_status(head.status)
    return params


def _entries(rows: list[tuple[OperationKind, int, bytes]]) -> dict[str, list[Any]]:
    """Journal rows as the three parallel arrays the statements unnest."""
    kinds, idxs, entries = zip(*rows, strict=True) if rows else ((), (), ())
    return {"kinds": [kind.value for kind in kinds], "idxs": list(idxs), "entries": list(entries)}


def _both(model: tuple[bytes, ...], tool: tuple[bytes, ...]) -> dict[str, Any]:
    """Both journals whole, with their lengths."""
    rows = [(OperationKind.MODEL, i, entry) for i, entry in enumerate(model)]
    rows += [(OperationKind.TOOL, i, entry) for i, entry in enumerate(tool)]
    return {**_entries(rows), "model_count": len(model), "tool_count": len(tool)}


def row_params(namespace: str, row: RunRow, definition: str) -> dict[str, Any]:
    """The parameters of the ``create`` statement of ``row``, whose run definition
    digest is ``definition``."""
    return {
        "namespace": namespace,
        "key": row.key,
        "definition": definition,
        **_head_params(row.head),
        **_both(row.model_journal, row.tool_journal),
        "body": row.body,
    }


def write_params(
    namespace: str, write: Write, *, step: bool = False
) -> tuple[WriteShape, dict[str, Any]]:
    """The shape of a planned write's statement (with a step's put when ``step``)
    and its parameters, but the step's."""
    guard = write.guard
    params: dict[str, Any] = {
        "namespace": namespace,
        "key": write.key,
        **_head_params(write.head),
        "g_revision": guard.revision,
        "g_claim_token": guard.claim_token,
        "g_terminal": guard.terminal,
        "g_identity": guard.identity,
        "g_claimed_cycle": guard.claimed_cycle,
        "g_resume_attempt": guard.resume_attempt,
        "g_terminal_acknowledged": guard.terminal_acknowledged,
        "body": write.body,
    }
    journal: str | None = None
    if isinstance(write.journal, JournalReplace):
        journal = "replace"
        params.update(_both(write.journal.model, write.journal.tool))
    elif write.journal:
        # Puts apply in order: a place written twice keeps its last entry, so
        # the statement writes each row once.
        final = {(put.kind, put.index): put.entry for put in write.journal}
        journal = "puts"
        params.update(_entries([(kind, idx, entry) for (kind, idx), entry in final.items()]))
    shape = WriteShape(
        body=write.body is not None,
        keep_lease=write.keep_lease,
        journal=journal,
        claimed_cycle=guard.claim_token is not None,
        resume_attempt=guard.resume_attempt is not None,
        terminal_acknowledged=guard.terminal_acknowledged is not None,
        step=step,
    )
    return shape, params


#: The columns of a step's put inside a commit, bound as ``cp_<column>``.
_STEP: Final = ("step", "ts_us", "interrupted", "done", "ts", "wake_at", "payload", "wake_us")


def step_params(enc: EncodedCheckpoint) -> dict[str, Any]:
    """The parameters of a step's put inside a commit."""
    return {f"cp_{name}": getattr(enc, name) for name in (*_STEP, "status")}
