"""The later protocol methods for a backend that implements only the original six.

These are correct but not fast: they page with ``list_threads`` offsets and
filter in memory. Their cursors are plain positions, not authenticated: the
backend has nowhere agentflow could keep a secret. agentflow's own backends
never use this module; they override every method natively.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Final

from agentflow.checkpoint.base import Checkpoint, Checkpointer, ThreadInfo, ThreadPage, ThreadStatus
from agentflow.checkpoint.timestamps import instant_of, parse_instant
from agentflow.checkpoint.validation import check_limit, check_status
from agentflow.errors import InvalidCursor

__all__ = ["CoreOnlyCheckpointer", "list_due", "list_threads_page"]

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


async def _walk(cp: Checkpointer, start: int) -> AsyncIterator[tuple[int, ThreadInfo]]:
    offset = start
    while True:
        infos = await cp.list_threads(limit=_WALK_PAGE, offset=offset)
        for index, info in enumerate(infos):
            yield offset + index, info
        if len(infos) < _WALK_PAGE:
            return
        offset += len(infos)


async def list_threads_page(
    cp: Checkpointer, *, limit: int, cursor: str | None, status: ThreadStatus | None
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
    cp: Checkpointer, now: str | datetime, *, limit: int, cursor: str | None
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


class CoreOnlyCheckpointer(Checkpointer):
    """A backend with only the original six methods, given every later one."""

    __slots__ = ("_inner",)

    def __init__(self, inner: Checkpointer) -> None:
        self._inner = inner

    def __repr__(self) -> str:
        return f"CoreOnlyCheckpointer({self._inner!r})"

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        return await self._inner.put(cp, if_revision=if_revision)

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        return await self._inner.get(thread, step)

    def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        return self._inner.history(thread)

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        return await self._inner.list_threads(limit=limit, offset=offset)

    async def delete_thread(self, thread: str) -> None:
        await self._inner.delete_thread(thread)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        return await self._inner.prune(thread, before_step=before_step, older_than=older_than)

    async def close(self) -> None:
        close: Callable[[], Awaitable[None]] | None = getattr(self._inner, "close", None)
        if close is not None:
            await close()
