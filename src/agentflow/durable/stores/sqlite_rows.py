"""Between the SQLite durable store's columns and the shared row layout.

Reads check every column before trusting it (a damaged row raises
:class:`~agentflow.durable.errors.DurableCorrupted`, never reads as missing
or as other data); writes turn a planned
:class:`~agentflow.durable.transitions.Write` into its statement and
parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentflow.durable.canonical import MAX_WIRE_INTEGER, canonical_json, parse_json
from agentflow.durable.enums import CheckpointStatus, OperationKind
from agentflow.durable.errors import DurableCorrupted, DurableError
from agentflow.durable.parts import RunParts
from agentflow.durable.record import DurableCheckpoint
from agentflow.durable.rows import RunHead, RunRow
from agentflow.durable.stores.sqlite_sql import HEAD_COLUMNS, write_statement
from agentflow.durable.transitions import JournalPut, JournalReplace, Write

__all__ = [
    "decode_claimed",
    "decode_loaded",
    "head_from",
    "head_params",
    "journal_text",
    "run_row",
    "write_params",
]

_ROW_INVALID = "checkpoint_row_invalid"
_STATUSES = frozenset(status.value for status in CheckpointStatus)
_WIDTH = len(HEAD_COLUMNS)
_JOURNAL_COLUMN = {OperationKind.MODEL: "model_journal", OperationKind.TOOL: "tool_journal"}


def _count(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_WIRE_INTEGER


def _flag(value: object) -> bool:
    return type(value) is int and value in (0, 1)


def head_from(key: str, values: Sequence[Any]) -> RunHead:
    """The head stored in ``values`` (the columns of ``HEAD_COLUMNS``, in order)."""
    revision, status, cycle, attempt, token, claimed, lease, terminal, acked, ambiguous, ident = (
        values
    )
    if (
        all(_count(value) for value in (revision, cycle, attempt))
        and all(value is None or _count(value) for value in (claimed, lease))
        and all(_flag(value) for value in (terminal, acked, ambiguous))
        and (token is None or isinstance(token, str))
        and isinstance(ident, str)
        and status in _STATUSES
    ):
        flags = (bool(terminal), bool(acked), bool(ambiguous))
        status = CheckpointStatus(status)
        return RunHead(revision, status, cycle, attempt, token, claimed, lease, *flags, ident)
    raise DurableCorrupted(_ROW_INVALID, f"stored head of {key!r} has damaged columns")


def _entries(key: str, text: object) -> tuple[bytes, ...]:
    try:
        items = parse_json(text) if isinstance(text, str) else None
    except DurableError as exc:
        raise DurableCorrupted(exc.code, f"stored journal of {key!r}: {exc.message}") from exc
    if not isinstance(items, list):
        raise DurableCorrupted(_ROW_INVALID, f"stored journal of {key!r} is not a JSON array")
    return tuple(canonical_json(item, what="stored journal entry") for item in items)


def run_row(key: str, head: Sequence[Any], journals: Sequence[Any], body: object) -> RunRow:
    """The row of ``key`` from its head columns, its two journal columns and its body."""
    if not isinstance(body, bytes):
        raise DurableCorrupted(_ROW_INVALID, f"stored body of {key!r} is missing or not bytes")
    model, tool = journals
    return RunRow(key, head_from(key, head), body, _entries(key, model), _entries(key, tool))


def decode_loaded(parts: RunParts, key: str, rows: list[Any]) -> DurableCheckpoint | None:
    """The record in the rows ``LOAD`` read (head row, then body row), or None for none."""
    if not rows:
        return None
    if [row[0] for row in rows] != [0, 1]:
        raise DurableCorrupted(_ROW_INVALID, f"stored record {key!r} lacks its head or body row")
    head, body = rows  # part, the head columns, the journals, the body
    return parts.decode_row(
        run_row(key, head[1 : 1 + _WIDTH], head[1 + _WIDTH : 3 + _WIDTH], body[3 + _WIDTH])
    )


def decode_claimed(
    parts: RunParts, key: str, claimed: Sequence[Any], bodies: list[Any]
) -> DurableCheckpoint:
    """The record a claim returned (its head columns and journals) with its body row's body."""
    body = bodies[0][0] if bodies else None
    return parts.decode_row(run_row(key, claimed[:_WIDTH], claimed[_WIDTH:], body))


def journal_text(entries: tuple[bytes, ...]) -> str:
    """A journal column: the JSON array of the entries' canonical bytes."""
    return "[" + ",".join(entry.decode("utf-8") for entry in entries) + "]"


def head_params(head: RunHead) -> dict[str, Any]:
    """The head columns' parameters (named as the columns; sqlite3 binds the status
    enum as its string and the flags as 0 and 1)."""
    return {name: getattr(head, name) for name in HEAD_COLUMNS}


def write_params(namespace: str, write: Write) -> tuple[str, dict[str, Any]]:
    """The statement of a planned write and its parameters."""
    guard = write.guard
    params: dict[str, Any] = {
        "namespace": namespace,
        "key": write.key,
        **head_params(write.head),
        "g_revision": guard.revision,
        "g_claim_token": guard.claim_token,
        "g_terminal": int(guard.terminal),
        "g_identity": guard.identity,
        "g_claimed_cycle": guard.claimed_cycle,
        "g_resume_attempt": guard.resume_attempt,
        "g_terminal_acknowledged": (
            None if guard.terminal_acknowledged is None else int(guard.terminal_acknowledged)
        ),
    }
    journal: str | None = None
    if isinstance(write.journal, JournalReplace):
        journal = "replace"
        params["model_journal"] = journal_text(write.journal.model)
        params["tool_journal"] = journal_text(write.journal.tool)
    elif isinstance(write.journal, JournalPut):
        journal = _JOURNAL_COLUMN[write.journal.kind]
        params["entry_path"] = f"$[{write.journal.index}]"
        params["entry"] = write.journal.entry.decode("utf-8")
    if write.body is not None:
        params["body"] = write.body
    statement = write_statement(
        body=write.body is not None,
        keep_lease=write.keep_lease,
        journal=journal,
        claimed_cycle=guard.claim_token is not None,
        resume_attempt=guard.resume_attempt is not None,
        terminal_acknowledged=guard.terminal_acknowledged is not None,
    )
    return statement, params
