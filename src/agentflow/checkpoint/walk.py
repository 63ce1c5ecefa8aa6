"""Every thread id a store holds, checkpoints or record, in one ordered walk.

A thread is usually in both listings (``list_threads_page`` and
``list_runs``), but not always: a run whose process died between creating
its record and storing its first step has a record and no checkpoint. Tools
that carry or re-seal threads whole (``agentflow copy``, ``rekey``) walk the
union, which both listings make cheap: each is in code point order (UTF-8
byte order, the same order), so one merge of the two, page by page, yields
each id once, in order, at O(page) a read.

The walk can be resumed: :attr:`StoreIds.position` is the pair of page
cursors the last id came from, and a walk started at that position with
``after`` the last id finished goes on exactly after it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from agentflow.checkpoint.store import Store
from agentflow.durable.errors import DurableError
from agentflow.durable.wire.validators import validate_checkpoint_key

__all__ = ["Position", "StoreIds", "has_record_key"]

#: One listing page: the ids on it and the cursor of the page after it.
_Page = tuple[list[str], str | None]


def has_record_key(thread: str) -> bool:
    """Whether ``thread`` can be a record's key: a thread id that cannot (a record
    key is at most 512 UTF-8 bytes) has checkpoints only."""
    try:
        validate_checkpoint_key(thread)
    except DurableError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Position:
    """Where a walk stands: the cursor of the current page of each listing."""

    threads: str | None = None
    runs: str | None = None


class _Listing:
    """One paged listing, read one page ahead of what was consumed."""

    def __init__(self, fetch: Callable[[str | None], Awaitable[_Page]], cursor: str | None) -> None:
        self._fetch = fetch
        #: The cursor the current page was read with (where a resumed walk re-reads).
        self.cursor = cursor
        self._ids: list[str] = []
        self._next: str | None = cursor
        self._done = False
        self._index = 0

    async def peek(self) -> str | None:
        while self._index == len(self._ids):
            if self._done:
                return None
            self.cursor = self._next
            self._ids, self._next = await self._fetch(self.cursor)
            self._index = 0
            self._done = self._next is None
        return self._ids[self._index]

    def take(self) -> None:
        self._index += 1


class StoreIds:
    """The ids of ``store``'s threads and records, in order (see the module docstring).

    ``position`` and ``after`` resume a walk: ids up to ``after`` are skipped.
    """

    def __init__(
        self,
        store: Store,
        *,
        page_size: int = 500,
        position: Position | None = None,
        after: str | None = None,
    ) -> None:
        self._store, self._size = store, page_size
        start = position or Position()
        self._threads = _Listing(self._thread_page, start.threads)
        self._runs = _Listing(self._run_page, start.runs)
        self._after = after

    @property
    def position(self) -> Position:
        """The page cursors the id yielded last came from."""
        return Position(self._threads.cursor, self._runs.cursor)

    async def _thread_page(self, cursor: str | None) -> _Page:
        page = await self._store.list_threads_page(limit=self._size, cursor=cursor)
        return [info.thread for info in page.threads], page.next_cursor

    async def _run_page(self, cursor: str | None) -> _Page:
        page = await self._store.list_runs(limit=self._size, cursor=cursor)
        return [run.key for run in page.runs], page.next_cursor

    async def __aiter__(self) -> AsyncIterator[str]:
        after = self._after
        while True:
            thread, run = await self._threads.peek(), await self._runs.peek()
            if thread is None and run is None:
                return
            current = min(item for item in (thread, run) if item is not None)
            if thread == current:
                self._threads.take()
            if run == current:
                self._runs.take()
            if after is None or current > after:
                yield current
