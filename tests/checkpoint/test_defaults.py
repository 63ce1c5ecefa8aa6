"""A backend written against the six core methods keeps passing isinstance and
keeps working: every later method comes from the protocol's defaults."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentflow.checkpoint import Checkpoint, Checkpointer, MemoryCheckpointer, ThreadInfo
from agentflow.checkpoint.base import CORE_METHODS, with_defaults
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import InvalidArgument, InvalidCursor


class CoreOnly:
    """A third-party backend that knows only put, get, history, list_threads,
    delete_thread and prune (here over a memory store, hidden behind them)."""

    def __init__(self) -> None:
        self._inner = MemoryCheckpointer()

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


class Subclassed(CoreOnly, Checkpointer):
    """The same backend, declaring the protocol: it inherits the defaults itself."""


def test_only_the_core_methods_make_a_checkpointer() -> None:
    assert isinstance(CoreOnly(), Checkpointer)
    assert set(CORE_METHODS) == {"put", "get", "history", "list_threads", "delete_thread", "prune"}

    class Partial:
        async def put(self, cp: Checkpoint) -> str:
            return ""

    assert not isinstance(Partial(), Checkpointer)


async def test_with_defaults_adds_every_later_method() -> None:
    backend = CoreOnly()
    full = with_defaults(backend)
    assert full is not backend  # type: ignore[comparison-overlap]
    assert isinstance(full, Checkpointer)
    native = MemoryCheckpointer()
    assert with_defaults(native) is native
    with pytest.raises(TypeError):
        with_defaults(object())
    async with full as cp:
        for name in "edcba":
            await cp.put(make_checkpoint(name, 0, next=("n",)))
        await cp.put(
            make_checkpoint("w", 0, next=("n",), interrupted=True, wake_at="2026-01-01T00:00:00Z")
        )
        await cp.put(
            make_checkpoint("v", 0, next=("n",), interrupted=True, wake_at="2025-01-01T00:00:00Z")
        )
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = await cp.list_threads_page(limit=2, cursor=cursor, status="running")
            seen.extend(i.thread for i in page.threads)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == ["a", "b", "c", "d", "e"]
        first = await cp.list_due("2026-06-01T00:00:00Z", limit=1)
        assert [i.thread for i in first.threads] == ["v"] and first.next_cursor is not None
        rest = await cp.list_due("2026-06-01T00:00:00Z", cursor=first.next_cursor)
        assert [i.thread for i in rest.threads] == ["w"] and rest.next_cursor is None
        with pytest.raises(InvalidCursor):
            await cp.list_threads_page(cursor="forged")
        with pytest.raises(InvalidArgument):
            await cp.list_threads_page(limit=0)


async def test_a_subclass_inherits_the_defaults() -> None:
    async with Subclassed() as cp:
        await cp.put(make_checkpoint("a", 0))
        assert [i.thread for i in (await cp.list_threads_page()).threads] == ["a"]
        assert (await cp.list_due("2026-01-01T00:00:00Z")).threads == []
