"""list_due: the timer waits that are due, in wake order, page by page."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentflow.checkpoint.base import Checkpointer
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.errors import InvalidArgument, InvalidCursor

__all__ = ["DueConformance"]

NOW = "2026-06-01T12:00:00+00:00"


async def _wait(cp: Checkpointer, thread: str, wake_at: str, step: int = 0) -> None:
    await cp.put(make_checkpoint(thread, step, next=("n",), interrupted=True, wake_at=wake_at))


async def _due(cp: Checkpointer, now: str | datetime, limit: int = 100) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await cp.list_due(now, limit=limit, cursor=cursor)
        assert len(page.threads) <= limit
        seen.extend(info.thread for info in page.threads)
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


@pytest.mark.asyncio
class DueConformance:
    """What every backend's ``list_due`` does."""

    async def test_due_timers_in_wake_instant_order(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            # 13:00+02:00 is 11:00Z: due before 11:30Z although it sorts later as text.
            await _wait(cp, "b", "2026-06-01T13:00:00+02:00")
            await _wait(cp, "a", "2026-06-01T11:30:00Z")
            await _wait(cp, "c", "2026-06-01T11:00:00+00:00")
            await _wait(cp, "exact", NOW)
            await _wait(cp, "later", "2026-06-01T12:00:00.000001+00:00")
            await cp.put(make_checkpoint("human", 0, next=("n",), interrupted=True))
            await cp.put(make_checkpoint("running", 0, next=("n",)))
            await cp.put(make_checkpoint("done", 0))
            assert await _due(cp, NOW) == ["b", "c", "a", "exact"]
            assert await _due(cp, NOW, limit=1) == ["b", "c", "a", "exact"]
            page = await cp.list_due(NOW, limit=4)
            assert page.next_cursor is None and page.threads[0].wake_at is not None
            assert await _due(cp, "2026-06-01T10:59:59Z") == []

    async def test_now_may_be_a_datetime(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await _wait(cp, "a", "2026-06-01T11:00:00Z")
            assert await _due(cp, datetime(2026, 6, 1, 11, tzinfo=UTC)) == ["a"]
            assert await _due(cp, datetime(2026, 6, 1, 11)) == ["a"]
            assert await _due(cp, datetime(2026, 6, 1, 10, 59, tzinfo=UTC)) == []

    async def test_only_the_latest_step_counts(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await _wait(cp, "resumed", "2026-06-01T11:00:00Z")
            await cp.put(make_checkpoint("resumed", 1, next=("n",)))
            await _wait(cp, "rescheduled", "2026-06-01T11:00:00Z")
            await _wait(cp, "rescheduled", "2026-06-02T11:00:00Z", step=1)
            await _wait(cp, "rewritten", "2026-06-01T11:00:00Z")
            await cp.put(make_checkpoint("rewritten", 0, next=("n",)))
            await cp.put(make_checkpoint("pruned", 0, next=("n",)))
            await _wait(cp, "pruned", "2026-06-01T11:00:00Z", step=1)
            await _wait(cp, "deleted", "2026-06-01T11:00:00Z")
            assert await _due(cp, NOW) == ["deleted", "pruned"]
            await cp.delete_thread("deleted")
            await cp.prune("pruned", before_step=5)
            assert await _due(cp, NOW) == []
            assert await _due(cp, "2026-06-03T00:00:00Z") == ["rescheduled"]

    async def test_due_is_per_namespace(self, harness: BackendHarness) -> None:
        async with harness.open(namespace="a") as a, harness.open(namespace="b") as b:
            await _wait(a, "t", "2026-06-01T11:00:00Z")
            assert await _due(a, NOW) == ["t"] and await _due(b, NOW) == []
            cursor = None
            for name in "xyz":
                await _wait(a, name, "2026-06-01T11:00:00Z")
            cursor = (await a.list_due(NOW, limit=1)).next_cursor
            assert cursor is not None
            with pytest.raises(InvalidCursor):
                await b.list_due(NOW, cursor=cursor)
            with pytest.raises(InvalidCursor):
                await a.list_threads_page(cursor=cursor)

    async def test_bad_arguments_are_refused(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for now in ("soon", 17, None):
                with pytest.raises(InvalidArgument):
                    await cp.list_due(now)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument):
                await cp.list_due(NOW, limit=0)
            with pytest.raises(InvalidCursor):
                await cp.list_due(NOW, cursor="nope")
