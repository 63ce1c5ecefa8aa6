"""The later protocol methods for a backend that implements only the original six.

These are correct but not fast: they page with ``list_threads`` offsets and
filter in memory, and a bounded history walks the thread's whole history.
Their cursors are plain positions, not authenticated: the backend has nowhere
agentflow could keep a secret. agentflow's own backends never use this
module; they override every method natively.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Final, Protocol

from agentflow.checkpoint.model import Checkpoint, ThreadInfo, ThreadPage, ThreadStatus
from agentflow.checkpoint.timestamps import instant_of, parse_instant
from agentflow.checkpoint.validation import (
    check_history_bounds,
    check_limit,
    check_status,
    validate_thread,
)
from agentflow.errors import InvalidCursor

__all__ = ["History", "Listing", "bounded_history", "list_due", "list_threads_page"]


class Listing(Protocol):
    """What the defaults need of a backend: the original offset listing."""

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]: ...


class History(Protocol):
    """What the bounded history needs of a backend: the original whole history."""

    def history(self, thread: str) -> AsyncIterator[Checkpoint]: ...


async def bounded_history(
    cp: History,
    thread: str,
    *,
    after: int | None,
    before: int | None,
    limit: int | None,
    newest_first: bool,
) -> AsyncIterator[Checkpoint]:
    """``history`` with bounds over the whole ascending history: it reads every
    step up to ``before``, holding at most ``limit`` checkpoints when newest first
    (the last ``limit`` seen), and stops as soon as an oldest-first page is full."""
    bounds = check_history_bounds(after, before, limit, newest_first)
    validate_thread(thread)
    kept: collections.deque[Checkpoint] = collections.deque(maxlen=bounds.limit)
    yielded = 0
    rows = cp.history(thread)
    try:
        async for item in rows:
            if bounds.before is not None and item.step >= bounds.before:
                break
            if item.step <= bounds.after:
                continue
            if bounds.newest_first:
                kept.append(item)
                continue
            yield item
            yielded += 1
            if yielded == bounds.limit:
                return
    finally:
        close = getattr(rows, "aclose", None)
        if close is not None:
            await close()
    while kept:
        yield kept.pop()


#: Threads per ``list_threads`` call while a default walks the store.
_WALK_PAGE: Final = 1_000


def _offset_of(cursor: str | None) -> int:
    if cursor is None:
        return 0
    if not isinstance(cursor, str) or not cursor.startswith("o") or not cursor[1:].isdigit():
        raise InvalidCursor("cursor was not issued by list_threads_page")
    digits = cursor[1:]
    if digits != str(int(digits)):
        raise InvalidCursor("cursor is not in canonical form")
    return int(digits)


async def _walk(cp: Listing, start: int) -> AsyncIterator[tuple[int, ThreadInfo]]:
    offset = start
    while True:
        infos = await cp.list_threads(limit=_WALK_PAGE, offset=offset)
        for index, info in enumerate(infos):
            yield offset + index, info
        if len(infos) < _WALK_PAGE:
            return
        offset += len(infos)


async def list_threads_page(
    cp: Listing, *, limit: int, cursor: str | None, status: ThreadStatus | None
) -> ThreadPage:
    """:meth:`Checkpointer.list_threads_page` over ``list_threads`` offsets."""
    check_limit(limit)
    check_status(status)
    found: list[ThreadInfo] = []
    async for position, info in _walk(cp, _offset_of(cursor)):
        if status is not None and info.status != status:
            continue
        if len(found) == limit:
            return ThreadPage(found, f"o{position}")
        found.append(info)
    return ThreadPage(found, None)


def _due_cursor(info: ThreadInfo) -> str:
    return f"d{parse_instant(info.wake_at)}:{info.thread}"


def _due_after(cursor: str | None) -> tuple[int, str] | None:
    if cursor is None:
        return None
    if not isinstance(cursor, str) or not cursor.startswith("d") or ":" not in cursor:
        raise InvalidCursor("cursor was not issued by list_due")
    micros, _, thread = cursor[1:].partition(":")
    try:
        return int(micros), thread
    except ValueError as exc:
        raise InvalidCursor("cursor was not issued by list_due") from exc


async def list_due(
    cp: Listing, now: str | datetime, *, limit: int, cursor: str | None
) -> ThreadPage:
    """:meth:`Checkpointer.list_due` by walking every thread."""
    check_limit(limit)
    now_us = instant_of(now, what="now")
    after = _due_after(cursor)
    due: list[tuple[int, str, ThreadInfo]] = []
    async for _, info in _walk(cp, 0):
        if info.status != "waiting" or info.wake_at is None:
            continue
        wake_us = parse_instant(info.wake_at)
        if wake_us <= now_us and (after is None or (wake_us, info.thread) > after):
            due.append((wake_us, info.thread, info))
    due.sort(key=lambda item: (item[0], item[1]))
    page = [info for _, _, info in due[: limit + 1]]
    if len(page) <= limit:
        return ThreadPage(page, None)
    del page[limit:]
    return ThreadPage(page, _due_cursor(page[-1]))
