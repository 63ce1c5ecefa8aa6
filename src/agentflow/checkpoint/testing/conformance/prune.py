"""prune: bounds that are strict, instants that compare, nothing deleted on bad input."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.checkpoint.testing.conformance._support import history_of, thread_ids
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.errors import InvalidArgument

__all__ = ["PruneConformance"]


@pytest.mark.asyncio
class PruneConformance:
    """What every backend's ``prune`` does."""

    async def test_prune_before_step_is_strict(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for step in range(6):
                await cp.put(make_checkpoint("t", step))
            assert await cp.prune("t", before_step=0) == 0
            assert await cp.prune("t", before_step=3) == 3
            assert [c.step for c in await history_of(cp, "t")] == [3, 4, 5]
            assert await cp.prune("missing", before_step=3) == 0

    async def test_prune_older_than_compares_instants(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            # 12:00+02:00 is 10:00Z: older than 11:00Z although it sorts later as text.
            await cp.put(make_checkpoint("t", 0, ts="2026-01-01T12:00:00+02:00"))
            await cp.put(make_checkpoint("t", 1, ts="2026-01-01T10:30:00Z"))
            await cp.put(make_checkpoint("t", 2, ts="2026-01-01T11:00:00+00:00"))
            await cp.put(make_checkpoint("t", 3, ts="2026-01-01T13:00:00+01:00"))
            assert await cp.prune("t", older_than="2026-01-01T10:00:00Z") == 0
            assert await cp.prune("t", older_than="2026-01-01T11:00:00Z") == 2
            assert [c.step for c in await history_of(cp, "t")] == [2, 3]
            assert await cp.prune("t", older_than="2026-01-01T12:00:01+00:00", before_step=3) == 1
            assert [c.step for c in await history_of(cp, "t")] == [3]

    @pytest.mark.parametrize(
        "bounds",
        [
            {},
            {"before_step": -1},
            {"before_step": "2"},
            {"before_step": True},
            {"before_step": 2**63},
            {"older_than": "not a time"},
            {"older_than": 1_700_000_000},
            {"before_step": 2, "older_than": "nope"},
        ],
        ids=repr,
    )
    async def test_bad_bounds_delete_nothing(
        self, harness: BackendHarness, bounds: dict[str, Any]
    ) -> None:
        async with harness.open() as cp:
            for step in range(4):
                await cp.put(make_checkpoint("t", step))
            with pytest.raises(InvalidArgument):
                await cp.prune("t", **bounds)
            assert [c.step for c in await history_of(cp, "t")] == [0, 1, 2, 3]
            with pytest.raises(InvalidArgument):
                await cp.prune("", before_step=2)

    async def test_prune_updates_listing(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0))
            await cp.put(make_checkpoint("t", 1, interrupted=True, next=("n",)))
            assert await cp.prune("t", before_step=5) == 2
            assert await cp.get("t") is None
            assert await cp.list_threads() == []
            await cp.put(make_checkpoint("u", 0))
            await cp.put(make_checkpoint("u", 1, next=("n",)))
            info = (await cp.list_threads())[0]
            assert (info.latest_step, info.done) == (1, False)
            await cp.put(make_checkpoint("v", 0))
            await cp.put(make_checkpoint("v", 1, next=("n",), ts="2000-01-01T00:00:00Z"))
            assert await cp.prune("v", older_than="2001-01-01T00:00:00Z") == 1
            assert await thread_ids(cp) == ["u", "v"]
            kept = (await cp.list_threads())[1]
            assert (kept.thread, kept.latest_step, kept.done) == ("v", 0, True)
