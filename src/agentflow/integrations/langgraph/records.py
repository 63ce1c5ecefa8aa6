"""Where LangGraph's checkpoints live in agentflow's threads and steps.

- One agentflow thread per (``thread_id``, ``checkpoint_ns``): the root
  namespace is the thread id itself, a child namespace ``thread_id`` + US
  (``\\x1f``) + ``checkpoint_ns``. Thread ids holding US are refused.
- A checkpoint's step comes from its id, so a read by id is one ``get``, with
  no index: LangGraph's ids are UUIDs whose top 64 bits, less the version
  nibble, order them (a v6 id's 60-bit timestamp). Checkpoint ``k`` is step
  ``2k``; its pending writes are one record at step ``2k + 1``, so a write
  never rewrites the checkpoint and history yields each checkpoint just before
  its writes. Two ids of one thread with the same key are refused at ``put``.
- The child namespaces of a thread id are listed in a record at step 0 of the
  thread ``thread_id`` + US, written once per new namespace, so
  ``delete_thread`` and ``copy_thread`` find them without scanning the store.
- A checkpoint deleted from the middle or end of a thread (``delete_for_runs``)
  becomes a small ``deleted`` record that points at the live checkpoint below
  it, because the protocol deletes only prefixes.

Everything LangGraph needs is in ``extra["langgraph"]``; ``state`` holds the
channel values that are exact JSON, so agentflow's own tools show them.
"""

from __future__ import annotations

import functools
import re
import uuid
from dataclasses import dataclass
from typing import Any, Final, Literal

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointCorrupted, InvalidArgument
from agentflow.integrations.tagged import TaggedRecord, tagged, tagged_fields

__all__ = [
    "FORMAT",
    "SEPARATOR",
    "Record",
    "checkpoint_step",
    "namespace_thread",
    "parse_thread",
    "registry_thread",
    "stored_record",
]

#: Version of the layout in ``extra["langgraph"]``.
FORMAT: Final = 1
#: Between a thread id and a child namespace in an agentflow thread id.
SEPARATOR: Final = "\x1f"
#: Where a record keeps its LangGraph fields.
KEY: Final = "langgraph"

#: A UUID as ``str(uuid.UUID(...))`` spells it, which is how LangGraph makes ids.
_CANONICAL_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

Kind = Literal["checkpoint", "writes", "deleted", "namespaces"]
_KINDS: Final = frozenset({"checkpoint", "writes", "deleted", "namespaces"})


def namespace_thread(thread_id: str, checkpoint_ns: str) -> str:
    """The agentflow thread of one LangGraph (thread, namespace)."""
    return thread_id if not checkpoint_ns else f"{thread_id}{SEPARATOR}{checkpoint_ns}"


def registry_thread(thread_id: str) -> str:
    """The agentflow thread listing a thread id's child namespaces."""
    return f"{thread_id}{SEPARATOR}"


def parse_thread(name: str) -> tuple[str, str] | None:
    """``(thread_id, checkpoint_ns)`` of an agentflow thread, None for a registry."""
    thread_id, sep, checkpoint_ns = name.partition(SEPARATOR)
    if sep and not checkpoint_ns:
        return None
    return thread_id, checkpoint_ns


def check_thread_id(value: Any) -> str:
    """A LangGraph ``thread_id`` as agentflow stores it (ints and UUIDs become str)."""
    if isinstance(value, int | uuid.UUID) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or SEPARATOR in value:
        raise InvalidArgument(
            f"a LangGraph thread_id must be a non-empty str without U+001F, got {value!r:.80}"
        )
    return value


def check_namespace(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"checkpoint_ns must be a str, got {value!r:.80}")
    return value


def checkpoint_key(checkpoint_id: Any) -> int | None:
    """The order key of a checkpoint id, or None when it is not a canonical UUID."""
    if type(checkpoint_id) is not str or len(checkpoint_id) != 36:
        return None
    return _key_of(checkpoint_id)


@functools.lru_cache(maxsize=4096)
def _key_of(checkpoint_id: str) -> int | None:
    # Each put and read parses the same few ids several times.
    if _CANONICAL_UUID.fullmatch(checkpoint_id) is None:
        return None
    number = int(checkpoint_id.replace("-", ""), 16)
    return ((number >> 80) << 12) | ((number >> 64) & 0xFFF)


def checkpoint_step(checkpoint_id: Any) -> int:
    """The agentflow step of a checkpoint (its writes are at the next step)."""
    key = checkpoint_key(checkpoint_id)
    if key is None:
        raise InvalidArgument(
            f"a LangGraph checkpoint id must be a lower-case UUID, got {checkpoint_id!r:.80}"
        )
    return 2 * key


def record_ts(ts: Any) -> str:
    """A LangGraph timestamp agentflow can keep as the record's ``ts``, else "" (now)."""
    if isinstance(ts, str) and ts:
        try:
            if parse_instant(ts) >= 0:
                return ts
        except InvalidArgument:
            pass
    return ""


@dataclass(frozen=True, slots=True)
class Record(TaggedRecord[Kind]):
    """One stored LangGraph record, checked."""


def stored_record(cp: Checkpoint) -> Record | None:
    """The :class:`Record` of an agentflow checkpoint; None when it is not LangGraph's.

    A record that says it is LangGraph's but whose fields or step do not agree
    raises :class:`~agentflow.errors.CheckpointCorrupted`.
    """
    tagged_record = tagged_fields(cp, KEY, FORMAT, _KINDS, "LangGraph")
    if tagged_record is None:
        return None
    fields, damaged = tagged_record
    kind: Kind = fields["kind"]
    if kind == "namespaces":
        if cp.step != 0 or type(fields.get("namespaces")) is not list:
            raise CheckpointCorrupted(damaged)
        return Record(kind, cp.step, cp.revision, fields, cp)
    key = checkpoint_key(fields.get("id"))
    if kind == "deleted":
        live = fields.get("live")
        if key is None or not (live is None or (type(live) is int and 0 <= live < cp.step)):
            raise CheckpointCorrupted(damaged)
        return Record(kind, cp.step, cp.revision, fields, cp)
    parity = 0 if kind == "checkpoint" else 1
    if key is None or cp.step != 2 * key + parity:
        raise CheckpointCorrupted(damaged)
    if kind == "writes" and type(fields.get("writes")) is not list:
        raise CheckpointCorrupted(damaged)
    return Record(kind, cp.step, cp.revision, fields, cp)


def record(
    thread: str,
    step: int,
    kind: Kind,
    fields: dict[str, Any],
    *,
    state: dict[str, Any] | None = None,
    ts: str = "",
    parent: str | None = None,
    interrupted: bool = False,
) -> Checkpoint:
    """An agentflow checkpoint holding one LangGraph record."""
    return Checkpoint(
        thread=thread,
        step=step,
        state=state or {},
        parent=parent,
        ts=ts,
        interrupted=interrupted,
        extra=tagged(KEY, FORMAT, kind, fields),
    )
