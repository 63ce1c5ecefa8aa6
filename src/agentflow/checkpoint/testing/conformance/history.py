"""history: every step in order, streamed in bounded memory; bounded and newest-first
reads that page by keyset and read no more than they yield."""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import pytest

from agentflow.checkpoint.base import Checkpointer
from agentflow.checkpoint.testing.conformance._support import history_of
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.errors import InvalidArgument, InvalidThreadId


async def _steps(cp: Checkpointer, thread: str, **bounds: Any) -> list[int]:
    return [c.step async for c in cp.history(thread, **bounds)]


#: The steps the bounded cases store: gaps, so bounds between steps count too.
_STORED = [0, 1, 2, 4, 7, 8, 9, 12, 20, 21]

__all__ = ["HistoryConformance"]


@pytest.mark.asyncio
class HistoryConformance:
    """What every backend's ``history`` does."""

    async def test_history_ascending_with_revisions(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for step in (3, 1, 2, 0):
                await cp.put(make_checkpoint("t", step))
            await cp.put(make_checkpoint("t", 2))
            await cp.put(make_checkpoint("other", 9))
            got = await history_of(cp, "t")
            assert await history_of(cp, "nope") == []
        assert [c.step for c in got] == [0, 1, 2, 3]
        assert [c.revision for c in got] == [1, 1, 2, 1]
        assert all(c.thread == "t" for c in got)

    async def test_bad_thread_id_is_refused(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            with pytest.raises(InvalidThreadId):
                await history_of(cp, "")

    async def test_long_history_streams_in_bounded_memory(self, harness: BackendHarness) -> None:
        steps, blob = 2_000, "x" * 8_000
        async with harness.open() as cp:
            for start in range(0, steps, 50):
                await asyncio.gather(
                    *(
                        cp.put(make_checkpoint("long", s, state={"s": s, "blob": blob}))
                        for s in range(start, start + 50)
                    )
                )
            tracemalloc.start()
            try:
                seen = 0
                async for c in cp.history("long"):
                    assert c.step == seen and c.state["s"] == seen
                    seen += 1
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert seen == steps
            # 16 MB of payload in all: reading it must not hold half of it at once.
            assert peak < steps * len(blob) * 0.5, f"history held {peak:,} bytes at once"
            first = []
            async for c in cp.history("long"):
                first.append(c.step)
                if len(first) == 3:
                    break
            assert first == [0, 1, 2]

    async def test_bounds_are_exclusive_steps_in_either_order(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as cp:
            for step in reversed(_STORED):
                await cp.put(make_checkpoint("b", step))
            await cp.put(make_checkpoint("b-other", 5))
            assert await _steps(cp, "b") == _STORED
            assert await _steps(cp, "b", newest_first=True) == _STORED[::-1]
            assert await _steps(cp, "b", after=4) == [7, 8, 9, 12, 20, 21]
            assert await _steps(cp, "b", after=3, before=9) == [4, 7, 8]
            assert await _steps(cp, "b", before=8, newest_first=True) == [7, 4, 2, 1, 0]
            assert await _steps(cp, "b", limit=3) == [0, 1, 2]
            assert await _steps(cp, "b", limit=3, newest_first=True) == [21, 20, 12]
            assert await _steps(cp, "b", after=8, limit=2, newest_first=True) == [21, 20]
            assert await _steps(cp, "b", after=8, before=20, limit=99) == [9, 12]
            assert await _steps(cp, "b", after=21) == []
            assert await _steps(cp, "b", before=0) == []
            assert await _steps(cp, "b", after=8, before=9) == []
            assert await _steps(cp, "b", after=9, before=8, newest_first=True) == []
            assert await _steps(cp, "missing", limit=1, newest_first=True) == []
            latest = [c async for c in cp.history("b", limit=1, newest_first=True)]
            assert latest == [await cp.get("b")]

    async def test_keyset_pages_cover_every_step_once(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for step in _STORED:
                await cp.put(make_checkpoint("p", step))
            for newest_first in (False, True):
                seen: list[int] = []
                bound: int | None = None
                while True:
                    key = "before" if newest_first else "after"
                    page = await _steps(cp, "p", limit=3, newest_first=newest_first, **{key: bound})
                    seen += page
                    if len(page) < 3:
                        break
                    bound = page[-1]
                assert seen == (_STORED[::-1] if newest_first else _STORED)

    @pytest.mark.parametrize(
        "bounds",
        [
            {"after": -1},
            {"before": "3"},
            {"after": True},
            {"before": 2**63},
            {"limit": 0},
            {"limit": -2},
            {"limit": 1.5},
            {"limit": True},
            {"newest_first": "yes"},
            {"newest_first": None},
        ],
        ids=repr,
    )
    async def test_bad_bounds_are_refused(
        self, harness: BackendHarness, bounds: dict[str, Any]
    ) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0))
            with pytest.raises(InvalidArgument):
                await _steps(cp, "t", **bounds)
