"""What the Redis layout stores, as Python values: rows, summaries, listings.

A summary is a status letter (``r``, ``i``, ``w``, ``d``), the wake instant
(18 digits, zeros unless waiting) and the :class:`ThreadInfo` fields as JSON,
so the scripts keep the status and due indexes without parsing JSON. The
status a thread's record imposes is kept beside it (``rs``), not in it.
"""

from __future__ import annotations

from typing import Final

import orjson

from agentflow.checkpoint.backend import EncodedCheckpoint, StoredRow
from agentflow.checkpoint.base import ThreadInfo, ThreadStatus
from agentflow.checkpoint.redis.keys import STATUS_LETTERS, SUMMARY_HEAD, sortable_instant
from agentflow.errors import CheckpointCorrupted

__all__ = ["stored_row", "summary", "summary_of", "thread_info"]

_NO_WAKE: Final = b"0" * 18
_IMPOSED: Final[dict[bytes, ThreadStatus]] = {
    STATUS_LETTERS[status]: status for status in ("reconciliation_required", "failed")
}


def summary(status: ThreadStatus, wake_us: int | None, info: bytes) -> bytes:
    """The stored summary of a thread: its status letter, wake instant and
    ``info``, the JSON of its :class:`ThreadInfo` fields."""
    wake = sortable_instant(wake_us) if status == "waiting" and wake_us is not None else _NO_WAKE
    return STATUS_LETTERS[status] + wake + info


def summary_of(enc: EncodedCheckpoint) -> bytes:
    """The summary of a thread whose latest step ``enc`` is."""
    fields = {
        "latest_step": enc.step,
        "interrupted": enc.interrupted,
        "done": enc.done,
        "ts": enc.ts,
        "wake_at": enc.wake_at,
    }
    return summary(enc.status, enc.wake_us, orjson.dumps(fields))


def stored_row(thread: str, member: bytes, payload: bytes | None, meta: bytes | None) -> StoredRow:
    """A stored step for the base to check; data missing for an indexed step is damage."""
    if payload is None or meta is None:
        missing = "payload" if payload is None else "metadata"
        raise CheckpointCorrupted(f"thread {thread!r} step {member!r}: its {missing} is missing")
    revision = meta.split(b":", 1)[0]
    return StoredRow(
        int(member) if member.isdigit() else member,
        int(revision) if revision.isdigit() else revision,
        payload,
    )


def thread_info(name: bytes, stored: bytes | None, imposed: bytes | None = None) -> ThreadInfo:
    """The listing entry of an indexed thread id, its stored summary and the
    status letter its record imposes (None: none)."""
    try:
        thread = name.decode()
    except UnicodeDecodeError as exc:
        raise CheckpointCorrupted("a namespace index holds an id that is not UTF-8") from exc
    if stored is None:
        raise CheckpointCorrupted(f"thread {thread!r} is listed without a summary")
    if imposed is not None and imposed not in _IMPOSED:
        raise CheckpointCorrupted(f"the status its record imposes on thread {thread!r} is damaged")
    run_status = None if imposed is None else _IMPOSED[imposed]
    try:
        return ThreadInfo(thread, **orjson.loads(stored[SUMMARY_HEAD:]), run_status=run_status)
    except (TypeError, ValueError) as exc:
        raise CheckpointCorrupted(f"summary of thread {thread!r} is damaged") from exc
