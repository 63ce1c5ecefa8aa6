"""Between a record's Redis hash and the shared row layout.

A run's hash holds the :class:`~agentflow.checkpoint.rows.RunHead` fields by
name (integers in decimal, flags ``0`` / ``1``, None as the empty string),
the last write id, the body, and each journal as its length (``jm``, ``jt``)
and one field per entry (``jm.<i>``, ``jt.<i>``). Reads check every field
before trusting it and refuse a hash with fields missing or extra, so a
damaged run raises :class:`~agentflow.durable.errors.DurableCorrupted`,
never reads as missing or as other data. Writes turn a planned
:class:`~agentflow.checkpoint.plans.Write` into the arguments of the write
script.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Final

from agentflow.checkpoint.plans import Guard, JournalReplace, Write
from agentflow.checkpoint.redis.run_scripts import FIELDS, HEAD_FIELDS
from agentflow.checkpoint.rows import RunHead, RunRow
from agentflow.durable.enums import CheckpointStatus, OperationKind
from agentflow.durable.errors import DurableCorrupted, DurableError
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER

__all__ = [
    "create_args",
    "encode_text",
    "head_from",
    "lease_from",
    "run_row",
    "write_args",
    "write_id",
]

_ROW_INVALID: Final = "checkpoint_row_invalid"
_COUNT: Final = re.compile(rb"0|[1-9][0-9]{0,15}")
_STATUSES: Final = {status.value.encode(): status for status in CheckpointStatus}
_JOURNALS: Final = {OperationKind.MODEL: b"jm", OperationKind.TOOL: b"jt"}
_FLAGS: Final = {b"0": False, b"1": True}
#: Every field of a run's hash except its journal entries.
_FIXED: Final = frozenset(name.encode() for name in (*FIELDS, "body"))

Value = bytes | None


def write_id() -> bytes:
    """A fresh random id for one write (128 bits, hex)."""
    return os.urandom(16).hex().encode()


def encode_text(text: str, code: str, what: str) -> bytes:
    """UTF-8 of a caller's string; a lone surrogate is refused with ``code``."""
    try:
        return text.encode()
    except UnicodeEncodeError as exc:
        raise DurableError(code, f"{what} is not valid Unicode") from exc


def _count(value: Value) -> int:
    """A stored count; ValueError when it is not one."""
    if value is None or not _COUNT.fullmatch(value) or int(value) > MAX_WIRE_INTEGER:
        raise ValueError(value)
    return int(value)


def _maybe(value: Value) -> int | None:
    return None if value == b"" else _count(value)


def _flag(value: Value) -> bool:
    if value is None or value not in _FLAGS:
        raise ValueError(value)
    return _FLAGS[value]


def _text(value: Value) -> str:
    if value is None:
        raise ValueError(value)
    return value.decode()


def _damaged(key: str, what: str) -> DurableCorrupted:
    return DurableCorrupted(_ROW_INVALID, f"stored record {key!r} is damaged: {what}")


def head_from(key: str, values: Sequence[Value]) -> RunHead:
    """The head in ``values`` (the hash's :data:`HEAD_FIELDS`, in order, as stored)."""
    revision, status, cycle, attempt, token, claimed, lease, terminal, acked, ambiguous, ident = (
        values[: len(HEAD_FIELDS)]
    )
    try:
        return RunHead(
            revision=_count(revision),
            status=_STATUSES[status or b""],
            cycle_index=_count(cycle),
            resume_attempt=_count(attempt),
            claim_token=None if token == b"" else _text(token),
            claimed_cycle=_maybe(claimed),
            lease_expires_at_ms=_maybe(lease),
            terminal=_flag(terminal),
            terminal_acknowledged=_flag(acked),
            ambiguous=_flag(ambiguous),
            identity=_text(ident),
        )
    except (KeyError, ValueError):
        raise _damaged(key, "its head fields") from None


def lease_from(key: str, value: Value) -> int | None:
    """The lease a write left, as its script returned it."""
    try:
        return _maybe(value)
    except ValueError:
        raise _damaged(key, "its lease") from None


def _journal(key: str, stored: Mapping[bytes, bytes], kind: bytes) -> tuple[bytes, ...]:
    try:
        length = _count(stored.get(kind))
    except ValueError:
        raise _damaged(key, f"the length of journal {kind.decode()}") from None
    entries = tuple(stored.get(b"%s.%d" % (kind, index)) for index in range(length))
    if None in entries:
        raise _damaged(key, f"journal {kind.decode()} lacks an entry")
    return entries  # type: ignore[return-value]


def run_row(key: str, stored: Mapping[bytes, bytes]) -> RunRow:
    """The row in a run's hash (as ``HGETALL`` returns it)."""
    if not _FIXED.issubset(stored):
        raise _damaged(key, "fields are missing")
    model, tool = _journal(key, stored, b"jm"), _journal(key, stored, b"jt")
    if len(stored) != len(_FIXED) + (b"df" in stored) + len(model) + len(tool):
        raise _damaged(key, "it holds fields that are not a record's")
    head = head_from(key, [stored[name.encode()] for name in HEAD_FIELDS])
    return RunRow(key, head, stored[b"body"], model, tool)


def _encode(value: object, name: str) -> bytes:
    """A head value as the hash stores it (None as the empty string)."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"1" if value else b"0"
    if isinstance(value, int):
        return b"%d" % value
    return encode_text(str(value), "checkpoint_claim_invalid", name)


def _head_pairs(head: RunHead, *, keep_lease: bool = False) -> list[bytes]:
    names = [n for n in HEAD_FIELDS if not (keep_lease and n == "lease_expires_at_ms")]
    return [item for name in names for item in (name.encode(), _encode(getattr(head, name), name))]


def create_args(row: RunRow, written: bytes, key: bytes, definition: str) -> list[bytes]:
    """The arguments of the create script: write id, key, status, claim token, every
    field (with ``df``, the digest of the run's definition ``definition``)."""
    journals = [b"jm", b"%d" % len(row.model_journal), b"jt", b"%d" % len(row.tool_journal)]
    for kind, entries in ((b"jm", row.model_journal), (b"jt", row.tool_journal)):
        for index, entry in enumerate(entries):
            journals += [b"%s.%d" % (kind, index), entry]
    status = row.head.status.value.encode()
    token = _encode(row.head.claim_token, "claim_token")
    fields = [*_head_pairs(row.head), b"write_id", written, b"body", row.body, *journals]
    return [written, key, status, token, *fields, b"df", definition.encode()]


def _guard_pairs(guard: Guard) -> list[bytes]:
    expected: dict[str, object] = {
        "revision": guard.revision,
        "claim_token": guard.claim_token,
        "terminal": guard.terminal,
        "identity": guard.identity,
    }
    if guard.claim_token is not None:
        expected["claimed_cycle"] = guard.claimed_cycle
    if guard.resume_attempt is not None:
        expected["resume_attempt"] = guard.resume_attempt
    if guard.terminal_acknowledged is not None:
        expected["terminal_acknowledged"] = guard.terminal_acknowledged
    pairs = [b"%d" % len(expected)]
    for name, value in expected.items():
        pairs += [name.encode(), _encode(value, name)]
    return pairs


def write_args(write: Write, written: bytes, key: bytes) -> list[bytes]:
    """The arguments of the write script for a planned write."""
    head = _head_pairs(write.head, keep_lease=write.keep_lease)
    args = [written, key, *_guard_pairs(write.guard), b"%d" % (len(head) // 2), *head]
    args.append(b"" if write.body is None else write.body)
    change = write.journal
    if isinstance(change, JournalReplace):
        args += [b"r", b"%d" % len(change.model), b"%d" % len(change.tool)]
        args += [*change.model, *change.tool]
    elif change is not None:
        args += [b"p", b"%d" % len(change)]
        for put in change:
            args += [_JOURNALS[put.kind][1:], b"%d" % put.index, put.entry]
    else:
        args.append(b"")
    return args
