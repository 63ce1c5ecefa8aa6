"""A run's head file in the file store, and the files it names.

A run directory holds ``head`` and immutable part files: ``body.<g>`` and
one ``m.<i>.<g>`` / ``t.<i>.<g>`` per model / tool journal entry, where
``<g>`` is the revision of the write that wrote the file. The head (small
JSON) holds the :class:`~agentflow.checkpoint.rows.RunHead` fields, the key,
and for each part its generation and BLAKE2b-128 digest; it ends with the
digest of everything before it. A write creates its new parts under new
names and then renames a new head over the old one: that rename is the
commit, readers see the old head and its parts or the new head and its
parts, and a part whose digest (or a head whose check) does not match
raises :class:`~agentflow.durable.errors.DurableCorrupted`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from typing import Final

import orjson

from agentflow.checkpoint.plans import JournalReplace, Write
from agentflow.checkpoint.rows import RunHead, RunRow
from agentflow.durable.enums import CheckpointStatus, OperationKind
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER

__all__ = [
    "FORMAT",
    "Part",
    "StoredHead",
    "decode_head",
    "digest",
    "encode_head",
    "entry_name",
    "planned",
    "stored_of",
]

FORMAT: Final = 1
_ROW_INVALID: Final = "checkpoint_row_invalid"
_CHECK: Final = b',"check":"'
_CHECK_TAIL: Final = re.compile(rb',"check":"([0-9a-f]{32})"\}')
_TAIL_BYTES: Final = len(_CHECK) + 32 + 2
_DIGEST: Final = re.compile(r"[0-9a-f]{32}")
_STATUSES: Final = {status.value: status for status in CheckpointStatus}
_PREFIX: Final = {OperationKind.MODEL: "m", OperationKind.TOOL: "t"}


def digest(data: bytes) -> str:
    """The digest a head keeps of a part (BLAKE2b-128, hex)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Part:
    """One immutable part file: the revision that wrote it and its digest."""

    generation: int
    digest: str


@dataclass(frozen=True, slots=True)
class StoredHead:
    """What a head file says: the run's head and the parts that hold the rest."""

    key: str
    head: RunHead
    body: Part
    model: tuple[Part, ...]
    tool: tuple[Part, ...]

    def journal(self, kind: OperationKind) -> tuple[Part, ...]:
        return self.model if kind is OperationKind.MODEL else self.tool

    def body_name(self) -> str:
        return f"body.{self.body.generation}"

    def entry_names(self, kind: OperationKind) -> list[str]:
        return [entry_name(kind, i, part.generation) for i, part in enumerate(self.journal(kind))]

    def files(self) -> dict[str, Part]:
        """Every part file this head names, by name."""
        named = {self.body_name(): self.body}
        for kind in OperationKind:
            named.update(zip(self.entry_names(kind), self.journal(kind), strict=True))
        return named


def entry_name(kind: OperationKind, index: int, generation: int) -> str:
    """The file of entry ``index`` of a journal, as written at revision ``generation``."""
    return f"{_PREFIX[kind]}.{index}.{generation}"


def stored_of(row: RunRow) -> tuple[StoredHead, dict[str, bytes]]:
    """The head and the part files of a new run (every part written by its revision)."""
    generation = row.head.revision
    files = {f"body.{generation}": row.body}
    journals: dict[OperationKind, tuple[Part, ...]] = {}
    for kind in OperationKind:
        journals[kind], made = _replaced(kind, (), row.journal(kind), generation)
        files.update(made)
    body = Part(generation, digest(row.body))
    stored = StoredHead(
        row.key, row.head, body, journals[OperationKind.MODEL], journals[OperationKind.TOOL]
    )
    return stored, files


def _replaced(
    kind: OperationKind, old: tuple[Part, ...], entries: tuple[bytes, ...], generation: int
) -> tuple[tuple[Part, ...], dict[str, bytes]]:
    """The parts of a replaced journal: an entry whose bytes are stored already keeps its file."""
    parts: list[Part] = []
    files: dict[str, bytes] = {}
    for index, entry in enumerate(entries):
        entry_digest = digest(entry)
        if index < len(old) and old[index].digest == entry_digest:
            parts.append(old[index])
        else:
            parts.append(Part(generation, entry_digest))
            files[entry_name(kind, index, generation)] = entry
    return tuple(parts), files


def planned(old: StoredHead, write: Write) -> tuple[StoredHead, dict[str, bytes]]:
    """The head a planned write leaves on ``old`` and the part files it must create."""
    generation = write.head.revision
    head = write.head
    if write.keep_lease:
        head = replace(head, lease_expires_at_ms=old.head.lease_expires_at_ms)
    files: dict[str, bytes] = {}
    body = old.body
    if write.body is not None and digest(write.body) != old.body.digest:
        body = Part(generation, digest(write.body))
        files[f"body.{generation}"] = write.body
    journals = {kind: old.journal(kind) for kind in OperationKind}
    if isinstance(write.journal, JournalReplace):
        for kind, entries in (
            (OperationKind.MODEL, write.journal.model),
            (OperationKind.TOOL, write.journal.tool),
        ):
            journals[kind], made = _replaced(kind, old.journal(kind), entries, generation)
            files.update(made)
    else:
        for put in write.journal or ():  # in order: a receipt, then the next start
            parts = list(journals[put.kind])
            if put.index > len(parts):
                raise _damaged(old.key, "its journal is shorter than the caller's snapshot")
            parts[put.index : put.index + 1] = [Part(generation, digest(put.entry))]
            journals[put.kind] = tuple(parts)
            files[entry_name(put.kind, put.index, generation)] = put.entry
    stored = StoredHead(
        old.key, head, body, journals[OperationKind.MODEL], journals[OperationKind.TOOL]
    )
    return stored, files


def encode_head(stored: StoredHead) -> bytes:
    """The bytes of a head file."""
    head = stored.head
    fields = {
        "format": FORMAT,
        "key": stored.key,
        "revision": head.revision,
        "status": head.status.value,
        "cycle_index": head.cycle_index,
        "resume_attempt": head.resume_attempt,
        "claim_token": head.claim_token,
        "claimed_cycle": head.claimed_cycle,
        "lease_expires_at_ms": head.lease_expires_at_ms,
        "terminal": head.terminal,
        "terminal_acknowledged": head.terminal_acknowledged,
        "ambiguous": head.ambiguous,
        "identity": head.identity,
        "body": [stored.body.generation, stored.body.digest],
        "model": [[part.generation, part.digest] for part in stored.model],
        "tool": [[part.generation, part.digest] for part in stored.tool],
    }
    data = orjson.dumps(fields)
    return data[:-1] + _CHECK + digest(data).encode() + b'"}'


def _damaged(key: str, what: str) -> DurableCorrupted:
    return DurableCorrupted(_ROW_INVALID, f"stored record {key!r} is damaged: {what}")


def _count(value: object) -> int:
    if type(value) is not int or not 0 <= value <= MAX_WIRE_INTEGER:
        raise ValueError(value)
    return value


def _optional(value: object) -> int | None:
    return None if value is None else _count(value)


def _flag(value: object) -> bool:
    if type(value) is not bool:
        raise ValueError(value)
    return value


def _part(value: object, revision: int) -> Part:
    if (
        type(value) is not list
        or len(value) != 2
        or _count(value[0]) > revision
        or type(value[1]) is not str
        or not _DIGEST.fullmatch(value[1])
    ):
        raise ValueError(value)
    return Part(value[0], value[1])


def _parts(value: object, revision: int) -> tuple[Part, ...]:
    if type(value) is not list:
        raise ValueError(value)
    return tuple(_part(item, revision) for item in value)


def decode_head(key: str, data: bytes) -> StoredHead:
    """The head in ``data``, read as the head of ``key``; DurableCorrupted if it is not one."""
    tail = _CHECK_TAIL.fullmatch(data, max(0, len(data) - _TAIL_BYTES))
    if tail is None:
        raise _damaged(key, "its head file is truncated")
    signed = data[: tail.start()] + b"}"
    if digest(signed) != tail.group(1).decode():
        raise _damaged(key, "its head file fails its check")
    try:
        fields = orjson.loads(signed)
        if type(fields) is not dict or fields.get("format") != FORMAT:
            raise ValueError("format")
        token, identity = fields["claim_token"], fields["identity"]
        if (token is not None and type(token) is not str) or type(identity) is not str:
            raise ValueError("text")
        revision = _count(fields["revision"])
        head = RunHead(
            revision=revision,
            status=_STATUSES[fields["status"]],
            cycle_index=_count(fields["cycle_index"]),
            resume_attempt=_count(fields["resume_attempt"]),
            claim_token=token,
            claimed_cycle=_optional(fields["claimed_cycle"]),
            lease_expires_at_ms=_optional(fields["lease_expires_at_ms"]),
            terminal=_flag(fields["terminal"]),
            terminal_acknowledged=_flag(fields["terminal_acknowledged"]),
            ambiguous=_flag(fields["ambiguous"]),
            identity=identity,
        )
        stored = StoredHead(
            fields["key"],
            head,
            _part(fields["body"], revision),
            _parts(fields["model"], revision),
            _parts(fields["tool"], revision),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise _damaged(key, "its head fields") from None
    if stored.key != key:
        raise _damaged(key, "its head names another key")
    return stored
