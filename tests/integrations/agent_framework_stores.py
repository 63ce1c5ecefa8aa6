"""A checkpointer in front of a real one that counts calls and can lose a put.

The AgentflowCheckpointStorage tests use it to prove what each method costs
in protocol calls, and what a save that died halfway (or whose reply was
lost) leaves behind. Everything else goes to the real backend unchanged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any, Literal

from agentflow.checkpoint.base import Checkpoint, Checkpointer, ThreadInfo, ThreadPage
from agentflow.errors import StoreUnavailable

__all__ = ["Recording"]

#: When a lost put fails: before it reaches the store, or after it landed.
Loss = Literal["before", "after"]


class Recording:
    """Counts every protocol call; :meth:`lose_next_put` makes one put fail."""

    def __init__(self, inner: Checkpointer) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self._loss: tuple[Callable[[Checkpoint], bool], Loss] | None = None

    def lose_next_put(self, matching: Callable[[Checkpoint], bool], when: Loss) -> None:
        """Fail the next put of a checkpoint ``matching`` with StoreUnavailable."""
        self._loss = (matching, when)

    def reset(self) -> None:
        self.calls.clear()

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        self.calls["put"] += 1
        when = None
        if self._loss is not None and self._loss[0](cp):
            when, self._loss = self._loss[1], None
        if when == "before":
            raise StoreUnavailable("the connection dropped before the put was sent")
        stored = await self.inner.put(cp, if_revision=if_revision)
        if when == "after":
            raise StoreUnavailable("the connection dropped before the reply arrived")
        return stored

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        self.calls["get"] += 1
        return await self.inner.get(thread, step)

    def history(
        self,
        thread: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> AsyncIterator[Checkpoint]:
        self.calls["history"] += 1
        return self.inner.history(
            thread, after=after, before=before, limit=limit, newest_first=newest_first
        )

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        self.calls["list_threads"] += 1
        return await self.inner.list_threads(limit=limit, offset=offset)

    async def delete_thread(self, thread: str) -> None:
        self.calls["delete_thread"] += 1
        await self.inner.delete_thread(thread)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        self.calls["prune"] += 1
        return await self.inner.prune(thread, before_step=before_step, older_than=older_than)

    async def list_threads_page(self, **options: Any) -> ThreadPage:
        self.calls["list_threads_page"] += 1
        return await self.inner.list_threads_page(**options)

    async def list_due(self, now: str | datetime, **options: Any) -> ThreadPage:
        self.calls["list_due"] += 1
        return await self.inner.list_due(now, **options)

    async def close(self) -> None:
        await self.inner.close()

    async def __aenter__(self) -> Recording:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
