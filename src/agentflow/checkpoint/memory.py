"""An in-process checkpointer. Not durable; for tests and short-lived runs."""

from __future__ import annotations

import bisect
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from agentflow.checkpoint.base import AsyncClosing, Checkpoint, Redactor, ThreadInfo, ThreadPage
from agentflow.checkpoint.codec import (
    EncodedCheckpoint,
    decode,
    encode,
    parse_instant,
    validate_namespace,
    validate_thread,
)
from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
from agentflow.checkpoint.paging import check_page_args, check_prune_bounds
from agentflow.checkpoint.redaction import redact_none
from agentflow.errors import CheckpointConflict

__all__ = ["MemoryCheckpointer", "MemoryStore"]

_BACKEND = "memory"


@dataclass
class _StoredStep:
    encoded: EncodedCheckpoint
    revision: int


@dataclass
class _Namespace:
    threads: dict[str, dict[int, _StoredStep]] = field(default_factory=dict)
    #: Thread ids in code point order, for O(page) listing.
    sorted_threads: list[str] = field(default_factory=list)


class MemoryStore:
    """Shared storage for several :class:`MemoryCheckpointer` (one per namespace)."""

    def __init__(self) -> None:
        self._namespaces: dict[str, _Namespace] = {}

    def _namespace(self, name: str) -> _Namespace:
        return self._namespaces.setdefault(name, _Namespace())


class MemoryCheckpointer(AsyncClosing):
    """Keeps encoded checkpoints in memory.

    Checkpoints are stored as the same bytes a durable backend would write,
    so a caller mutating its state after ``put`` changes nothing stored, and
    non-JSON state fails here exactly as it would on disk. Pass one
    :class:`MemoryStore` to several checkpointers to share it across namespaces.
    """

    def __init__(
        self,
        *,
        redact: Redactor | None = None,
        namespace: str | None = None,
        store: MemoryStore | None = None,
    ) -> None:
        self._redact = redact or redact_none
        self._namespace_name = validate_namespace(namespace)
        self._data = (store or MemoryStore())._namespace(self._namespace_name)

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        encoded = encode(cp, self._redact)
        steps = self._data.threads.get(encoded.thread)
        existing = steps.get(encoded.step) if steps else None
        current = existing.revision if existing else 0
        if if_revision is not None and if_revision != current:
            raise CheckpointConflict(encoded.thread, encoded.step, if_revision, current)
        if steps is None:
            steps = self._data.threads[encoded.thread] = {}
            bisect.insort(self._data.sorted_threads, encoded.thread)
        steps[encoded.step] = _StoredStep(encoded, current + 1)
        return f"{encoded.thread}:{encoded.step}"

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        steps = self._data.threads.get(validate_thread(thread))
        if not steps:
            return None
        stored = steps.get(max(steps) if step is None else step)
        return decode(stored.encoded.payload, stored.revision) if stored else None

    async def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        steps = self._data.threads.get(validate_thread(thread), {})
        for step in sorted(steps):
            stored = steps.get(step)
            if stored is not None:
                yield decode(stored.encoded.payload, stored.revision)

    def _info(self, thread: str) -> ThreadInfo:
        steps = self._data.threads[thread]
        latest = steps[max(steps)].encoded
        return ThreadInfo(
            thread=thread,
            latest_step=latest.step,
            interrupted=latest.interrupted,
            done=latest.done,
            ts=latest.ts,
            wake_at=latest.wake_at,
        )

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        check_page_args(limit, offset)
        return [self._info(t) for t in self._data.sorted_threads[offset : offset + limit]]

    async def list_threads_page(self, *, limit: int = 100, cursor: str | None = None) -> ThreadPage:
        check_page_args(limit)
        start = 0
        if cursor is not None:
            after = decode_cursor(_BACKEND, self._namespace_name, cursor)
            start = bisect.bisect_right(self._data.sorted_threads, after)
        names = self._data.sorted_threads[start : start + limit + 1]
        more = len(names) > limit
        names = names[:limit]
        next_cursor = encode_cursor(_BACKEND, self._namespace_name, names[-1]) if more else None
        return ThreadPage([self._info(t) for t in names], next_cursor)

    def _forget(self, thread: str) -> None:
        del self._data.threads[thread]
        index = bisect.bisect_left(self._data.sorted_threads, thread)
        del self._data.sorted_threads[index]

    async def delete_thread(self, thread: str) -> None:
        if validate_thread(thread) in self._data.threads:
            self._forget(thread)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        check_prune_bounds(before_step, older_than)
        cutoff = parse_instant(older_than, what="older_than") if older_than is not None else None
        steps = self._data.threads.get(validate_thread(thread))
        if not steps:
            return 0
        doomed = [
            step
            for step, stored in steps.items()
            if (before_step is None or step < before_step)
            and (cutoff is None or stored.encoded.ts_us < cutoff)
        ]
        for step in doomed:
            del steps[step]
        if not steps:
            self._forget(thread)
        return len(doomed)
