"""A backend written against the six core methods keeps passing isinstance and
keeps working: every later method comes from the protocol's defaults."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

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


class Subclassed(CoreOnly, Checkpointer):  # type: ignore[misc]  # history has no bounds
    """The same backend, declaring the protocol: it inherits the defaults itself
    (and :func:`with_defaults` gives its unbounded history the bounds)."""


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
        bounded = with_defaults(cp)
        assert [c.step async for c in bounded.history("a", limit=1, newest_first=True)] == [0]


async def test_a_core_only_history_gets_the_bounds() -> None:
    """history(thread) alone is wrapped: the bounds come from the default, which
    reads the whole history and gives what the native reads give."""
    backend = CoreOnly()
    cp = with_defaults(backend)
    for step in (0, 1, 3, 4, 6):
        await cp.put(make_checkpoint("t", step))

    async def steps(**bounds: Any) -> list[int]:
        return [c.step async for c in cp.history("t", **bounds)]

    assert await steps() == [0, 1, 3, 4, 6]
    assert await steps(after=1, before=6) == [3, 4]
    assert await steps(limit=2, newest_first=True) == [6, 4]
    assert await steps(before=4, limit=2, newest_first=True) == [3, 1]
    assert await steps(after=0, limit=2) == [1, 3]
    with pytest.raises(InvalidArgument):
        await steps(limit=0)
    assert with_defaults(MemoryCheckpointer()).history("t") is not None


async def test_a_backend_with_every_later_method_but_an_unbounded_history_is_wrapped() -> None:
    class Listing(CoreOnly):
        async def list_threads_page(self, **kwargs: Any) -> Any:
            return await self._inner.list_threads_page(**kwargs)

        async def list_due(self, now: Any, **kwargs: Any) -> Any:
            return await self._inner.list_due(now, **kwargs)

        async def close(self) -> None:
            await self._inner.close()

        async def __aenter__(self) -> Listing:
            return self

        async def __aexit__(self, *exc_info: object) -> None:
            await self.close()

    backend = Listing()
    cp = with_defaults(backend)
    assert cp is not backend  # type: ignore[comparison-overlap]
    await cp.put(make_checkpoint("a", 0))
    page = await cp.list_threads_page(limit=1)
    assert page.next_cursor is None and [i.thread for i in page.threads] == ["a"]
    assert [c.step async for c in cp.history("a", newest_first=True)] == [0]
