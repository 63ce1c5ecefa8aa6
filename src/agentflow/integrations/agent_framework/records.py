"""Where Agent Framework checkpoints live in agentflow's threads and steps.

- One agentflow thread per workflow run: the ``workflow_name`` itself, or
  ``workflow_name`` + US (``\\x1f``) + ``session`` for a storage bound to a
  session. Names and sessions holding US are refused.
- A run's checkpoints are its steps 0, 1, 2... in the order they were saved
  (each ``put`` is conditional, so two writers never share a step); the
  latest checkpoint is the thread's latest step, one ``get``.
- A checkpoint id maps to its (thread, step) through the namespace's id
  index, the thread US + ``agent_framework``: the index record at step
  ``slot(id)`` (63 bits of BLAKE2b of the id) lists the ids of that slot with
  their places, so a load by id is two ``get`` calls, with no scan.
- A deleted checkpoint becomes a small ``deleted`` record that points at the
  live checkpoint below it, because the protocol deletes only prefixes.
- A refused save leaves a ``refused`` record on top of the run, pointing the
  same way and naming the refused id and the refusal's code, so that
  ``get_latest`` can tell that the checkpoint below is stale (Agent Framework
  itself only logs a warning and runs on).

Everything the adapter needs is in ``extra["agent_framework"]``; the
checkpoint itself is the restricted codec's bytes (base64). ``state`` holds a
JSON summary (ids, lineage, iteration, pending requests) for agentflow's own
tools, and a checkpoint waiting on ``request_info`` is stored as interrupted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.validation import is_unicode, validate_thread
from agentflow.errors import CheckpointCorrupted, InvalidArgument
from agentflow.integrations.tagged import TaggedRecord, tagged, tagged_fields

__all__ = [
    "FORMAT",
    "INDEX_THREAD",
    "KEY",
    "POINTERS",
    "SEPARATOR",
    "Place",
    "Stored",
    "check_checkpoint_id",
    "check_label",
    "index_record",
    "run_thread",
    "slot",
    "stored_record",
]

#: Version of the layout in ``extra["agent_framework"]``.
FORMAT: Final = 1
#: Where a record keeps its Agent Framework fields.
KEY: Final = "agent_framework"
#: Between a workflow name and a session in a thread id.
SEPARATOR: Final = "\x1f"
#: The namespace's checkpoint id index.
INDEX_THREAD: Final = f"{SEPARATOR}{KEY}"

Kind = Literal["checkpoint", "deleted", "refused", "index"]
_KINDS: Final = frozenset({"checkpoint", "deleted", "refused", "index"})
#: Records that hold no checkpoint and point at the live one below (``live``).
POINTERS: Final = frozenset({"deleted", "refused"})


class Place(NamedTuple):
    """Where a checkpoint is stored."""

    thread: str
    step: int


def check_label(value: object, what: str) -> str:
    """A workflow name or session as a thread id part: a non-empty str, no US."""
    if not isinstance(value, str) or not value or SEPARATOR in value:
        raise InvalidArgument(f"{what} must be a non-empty str without U+001F, got {value!r:.80}")
    return value


def run_thread(workflow_name: object, session: str | None) -> str:
    """The agentflow thread of one workflow's checkpoints in one session."""
    name = check_label(workflow_name, "workflow_name")
    return validate_thread(name if session is None else f"{name}{SEPARATOR}{session}")


def check_checkpoint_id(value: object) -> str:
    if not isinstance(value, str) or not value or not is_unicode(value):
        raise InvalidArgument(
            f"a checkpoint id must be a non-empty str without lone surrogates, got {value!r:.80}"
        )
    return value


def slot(checkpoint_id: str) -> int:
    """The index step of a checkpoint id (63 bits, so any backend keeps it)."""
    digest = hashlib.blake2b(checkpoint_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass(frozen=True, slots=True)
class Stored(TaggedRecord[Kind]):
    """One stored Agent Framework record, checked."""

    def holds(self, checkpoint_id: str) -> bool:
        """Whether this is the live checkpoint ``checkpoint_id``."""
        return self.kind == "checkpoint" and self.fields["id"] == checkpoint_id

    @property
    def entries(self) -> list[tuple[str, Place]]:
        """An index record's ``(id, place)`` pairs."""
        return [(cid, Place(thread, step)) for cid, thread, step in self.fields["entries"]]


def _entry_ok(entry: Any, step: int) -> bool:
    return (
        type(entry) is list
        and len(entry) == 3
        and type(entry[0]) is str
        and type(entry[1]) is str
        and type(entry[2]) is int
        and entry[2] >= 0
        and slot(entry[0]) == step
    )


def stored_record(cp: Checkpoint) -> Stored | None:
    """The :class:`Stored` of an agentflow checkpoint; None when it is not the adapter's.

    A record that says it is the adapter's but whose fields do not agree with
    each other or with its thread and step raises
    :class:`~agentflow.errors.CheckpointCorrupted`.
    """
    tagged_record = tagged_fields(cp, KEY, FORMAT, _KINDS, "Agent Framework")
    if tagged_record is None:
        return None
    fields, damaged = tagged_record
    kind: Kind = fields["kind"]
    if kind == "index":
        entries = fields.get("entries")
        if (
            cp.thread != INDEX_THREAD
            or type(entries) is not list
            or not all(_entry_ok(e, cp.step) for e in entries)
        ):
            raise CheckpointCorrupted(damaged)
    elif cp.thread == INDEX_THREAD or type(fields.get("id")) is not str or not fields["id"]:
        raise CheckpointCorrupted(damaged)
    elif kind in POINTERS:
        live = fields.get("live")
        if not (live is None or (type(live) is int and 0 <= live < cp.step)):
            raise CheckpointCorrupted(damaged)
        if kind == "refused" and type(fields.get("code")) is not str:
            raise CheckpointCorrupted(damaged)
    elif type(fields.get("hash")) is not str or type(fields.get("payload")) is not str:
        raise CheckpointCorrupted(damaged)
    return Stored(kind, cp.step, cp.revision, fields, cp)


def record(thread: str, step: int, kind: Kind, fields: dict[str, Any], **view: Any) -> Checkpoint:
    """An agentflow checkpoint holding one adapter record (``view``: what agentflow shows)."""
    return Checkpoint(thread=thread, step=step, extra=tagged(KEY, FORMAT, kind, fields), **view)


def index_record(step: int, entries: list[tuple[str, Place]]) -> Checkpoint:
    listed = [[cid, place.thread, place.step] for cid, place in entries]
    return record(INDEX_THREAD, step, "index", {"entries": listed}, state={})
