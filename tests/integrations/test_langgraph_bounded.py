"""AgentflowSaver reads no more than a listing shows: ``list(limit=)``, ``before=``
and DeltaChannel's walk to its seed are newest-first history reads of a few
records, whatever the length of the thread."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from agentflow.checkpoint.base import Checkpoint, ThreadInfo
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.testing import BackendHarness
from agentflow.integrations.langgraph import AgentflowSaver

CHECKPOINTS = 120


class _Counting:
    """A store that counts the checkpoints its history reads yield."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        return await self._inner.put(cp, if_revision=if_revision)

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        return await self._inner.get(thread, step)

    async def history(self, thread: str, **bounds: Any) -> AsyncIterator[Checkpoint]:
        async for cp in self._inner.history(thread, **bounds):
            self.read += 1
            yield cp

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        return await self._inner.list_threads(limit=limit, offset=offset)

    async def delete_thread(self, thread: str) -> None:
        await self._inner.delete_thread(thread)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        return await self._inner.prune(thread, before_step=before_step, older_than=older_than)


async def _fill(saver: AgentflowSaver) -> list[str]:
    """A thread of checkpoints each the child of the one before, with writes."""
    ids: list[str] = []
    for step in range(CHECKPOINTS):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"count": step}
        configurable: dict[str, Any] = {"thread_id": "long", "checkpoint_ns": ""}
        if ids:
            configurable["checkpoint_id"] = ids[-1]
        stored = await saver.aput({"configurable": configurable}, checkpoint, {"step": step}, {})
        await saver.aput_writes(stored, [("count", step)], f"task-{step}")
        ids.append(stored["configurable"]["checkpoint_id"])
    return ids


async def test_a_listing_reads_only_its_page(harness: BackendHarness) -> None:
    async with harness.open() as store:
        counting = _Counting(store)
        saver = AgentflowSaver(counting)
        ids = await _fill(saver)
        config: Any = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
        counting.read = 0
        newest = [t async for t in saver.alist(config, limit=3)]
        assert [t.config["configurable"]["checkpoint_id"] for t in newest] == ids[-1:-4:-1]
        assert [w[2] for w in newest[0].pending_writes or []] == [CHECKPOINTS - 1]
        assert counting.read <= 8, f"a page of 3 read {counting.read} records"
        counting.read = 0
        before: Any = {"configurable": {"checkpoint_id": ids[60]}}
        page = [t async for t in saver.alist(config, before=before, limit=2)]
        assert [t.config["configurable"]["checkpoint_id"] for t in page] == [ids[59], ids[58]]
        assert counting.read <= 6, f"a page of 2 read {counting.read} records"
        every = [t async for t in saver.alist(config)]
        assert [t.config["configurable"]["checkpoint_id"] for t in every] == ids[::-1]


async def test_the_delta_channel_walk_stops_at_its_seed(harness: BackendHarness) -> None:
    async with harness.open() as store:
        counting = _Counting(store)
        saver = AgentflowSaver(counting)
        ids = await _fill(saver)
        config: Any = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
        counting.read = 0
        history = await saver.aget_delta_channel_history(config=config, channels=["count"])
        # every ancestor stores the channel's value: the seed is the parent itself
        assert history["count"].get("seed") == CHECKPOINTS - 2
        assert [w[2] for w in history["count"]["writes"]] == [CHECKPOINTS - 2]
        assert counting.read <= 4, f"a walk of one ancestor read {counting.read} records"
        at: Any = {"configurable": {**config["configurable"], "checkpoint_id": ids[10]}}
        empty = await saver.aget_delta_channel_history(config=at, channels=["missing"])
        assert empty["missing"] == {"writes": []}
