"""history: every step in order, streamed in bounded memory."""

from __future__ import annotations

import asyncio
import tracemalloc

import pytest

from agentflow.checkpoint.testing.conformance._support import history_of
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.errors import InvalidThreadId

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
