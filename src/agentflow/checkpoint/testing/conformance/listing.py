"""list_threads and list_threads_page: summaries, pages, status filters, cursors."""

from __future__ import annotations

import base64
import os

import pytest

from agentflow.checkpoint.base import Checkpointer, ThreadStatus
from agentflow.checkpoint.cursor import CURSOR_VERSION, CursorSigner
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import InvalidArgument, InvalidCursor

__all__ = ["ListingConformance"]


async def _store_one_of_each_status(cp: Checkpointer) -> None:
    """Threads r1, r2 running, h1 interrupted, w1, w2 waiting, d1, d2 done."""
    for thread in ("r2", "r1"):
        await cp.put(make_checkpoint(thread, 0, next=("n",)))
    await cp.put(make_checkpoint("h1", 0, next=("n",), interrupted=True))
    for thread in ("w2", "w1"):
        await cp.put(
            make_checkpoint(
                thread, 0, next=("n",), interrupted=True, wake_at="2030-01-01T00:00:00Z"
            )
        )
    for thread in ("d1", "d2"):
        await cp.put(make_checkpoint(thread, 0, next=("n",), interrupted=True))
        await cp.put(make_checkpoint(thread, 1))


async def _all_pages(cp: Checkpointer, limit: int, status: ThreadStatus | None) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await cp.list_threads_page(limit=limit, cursor=cursor, status=status)
        assert len(page.threads) <= limit
        seen.extend(info.thread for info in page.threads)
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


def _with_version(cursor: str, version: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw[0] = version
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


@pytest.mark.asyncio
class ListingConformance:
    """What every backend's listings do."""

    async def test_list_threads_summaries_in_code_point_order(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as cp:
            assert await cp.list_threads() == []
            await cp.put(make_checkpoint("b", 0, next=("n",)))
            await cp.put(make_checkpoint("b", 1, interrupted=True, next=("n",)))
            await cp.put(make_checkpoint("a", 4))
            await cp.put(
                make_checkpoint(
                    "Z", 0, next=("x",), interrupted=True, wake_at="2030-01-01T00:00:00+00:00"
                )
            )
            await cp.put(make_checkpoint("é", 0, next=("x",)))
            infos = await cp.list_threads()
            assert [i.thread for i in infos] == ["Z", "a", "b", "é"]
            z, a, b, e = infos
            assert (a.latest_step, a.done, a.interrupted, a.status) == (4, True, False, "done")
            assert (b.latest_step, b.done, b.interrupted) == (1, False, True)
            assert b.status == "interrupted"
            assert z.wake_at == "2030-01-01T00:00:00+00:00" and z.status == "waiting"
            assert (e.done, e.interrupted, e.status) == (False, False, "running")
            assert parse_instant(a.ts) > 0
            assert [i.thread for i in await cp.list_threads(limit=2, offset=1)] == ["a", "b"]
            assert await cp.list_threads(offset=10) == []

    @pytest.mark.parametrize("limit", [0, -1, 10_001, True, "5", 2.5], ids=repr)
    async def test_bad_limits_are_refused(self, harness: BackendHarness, limit: object) -> None:
        async with harness.open() as cp:
            with pytest.raises(InvalidArgument):
                await cp.list_threads(limit=limit)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument):
                await cp.list_threads_page(limit=limit)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument):
                await cp.list_threads(offset=-1)

    async def test_pages_cover_every_thread_once(self, harness: BackendHarness) -> None:
        names = [f"thread-{i:02d}" for i in range(10)]
        async with harness.open() as cp:
            for name in reversed(names):
                await cp.put(make_checkpoint(name, 0))
            assert await _all_pages(cp, 3, None) == names
            exact = await cp.list_threads_page(limit=10)
            assert len(exact.threads) == 10 and exact.next_cursor is None
            assert [i.thread for i in await cp.list_threads(limit=10_000)] == names

    async def test_page_cursor_survives_deletion_of_its_thread(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as cp:
            for name in "abcde":
                await cp.put(make_checkpoint(name, 0))
            first = await cp.list_threads_page(limit=2)
            assert first.next_cursor is not None
            await cp.delete_thread("b")
            rest = await cp.list_threads_page(limit=10, cursor=first.next_cursor)
            assert [i.thread for i in rest.threads] == ["c", "d", "e"]

    async def test_status_filter_pages_each_status(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await _store_one_of_each_status(cp)
            assert await _all_pages(cp, 1, "running") == ["r1", "r2"]
            assert await _all_pages(cp, 1, "interrupted") == ["h1"]
            assert await _all_pages(cp, 1, "waiting") == ["w1", "w2"]
            assert await _all_pages(cp, 1, "done") == ["d1", "d2"]
            assert await _all_pages(cp, 2, None) == ["d1", "d2", "h1", "r1", "r2", "w1", "w2"]
            with pytest.raises(InvalidArgument):
                await cp.list_threads_page(status="finished")  # type: ignore[arg-type]

    async def test_status_follows_the_latest_step(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0, next=("n",)))
            await cp.put(make_checkpoint("t", 1, next=("n",), interrupted=True))
            assert await _all_pages(cp, 10, "interrupted") == ["t"]
            await cp.put(make_checkpoint("t", 2))
            assert await _all_pages(cp, 10, "interrupted") == []
            assert await _all_pages(cp, 10, "done") == ["t"]
            await cp.prune("t", before_step=10, older_than="2999-01-01T00:00:00Z")
            assert await _all_pages(cp, 10, "done") == []

    async def test_a_status_cursor_is_bound_to_its_filter(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await _store_one_of_each_status(cp)
            cursor = (await cp.list_threads_page(limit=1, status="running")).next_cursor
            assert cursor is not None
            with pytest.raises(InvalidCursor):
                await cp.list_threads_page(cursor=cursor, status="done")
            with pytest.raises(InvalidCursor):
                await cp.list_threads_page(cursor=cursor)

    async def test_bad_cursors_fail_closed(self, harness: BackendHarness) -> None:
        async with harness.open(namespace="tenant-a") as a, harness.open(namespace="tenant-b") as b:
            for name in "abc":
                await a.put(make_checkpoint(name, 0))
                await b.put(make_checkpoint(name, 0))
            cursor = (await a.list_threads_page(limit=1)).next_cursor
            assert cursor is not None
            flipped = cursor[:-3] + ("A" if cursor[-3] != "A" else "B") + cursor[-2:]
            # Someone who knows the backend and the namespace, but not the store's secret.
            minted = CursorSigner(os.urandom(32), harness.name, "tenant-a")
            bad = [
                "",
                "not a cursor!",
                flipped,
                cursor[:10],
                cursor + "A",
                minted.encode("threads:", {"after": "a"}),
                _with_version(cursor, CURSOR_VERSION + 1),
                _with_version(cursor, 1),
            ]
            for token in bad:
                with pytest.raises(InvalidCursor):
                    await a.list_threads_page(cursor=token)
            with pytest.raises(InvalidCursor):
                await b.list_threads_page(cursor=cursor)
            with pytest.raises(InvalidCursor):
                await a.list_threads_page(cursor=7)  # type: ignore[arg-type]
