"""delete_thread: everything of one thread goes, nothing else, and it may come back."""

from __future__ import annotations

import pytest

from agentflow.checkpoint.testing.conformance._support import history_of, thread_ids
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.errors import InvalidThreadId

__all__ = ["DeleteConformance"]


@pytest.mark.asyncio
class DeleteConformance:
    """What every backend's ``delete_thread`` does."""

    async def test_delete_thread(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for step in range(3):
                await cp.put(make_checkpoint("gone", step))
            await cp.put(make_checkpoint("stays", 0))
            await cp.delete_thread("gone")
            await cp.delete_thread("gone")
            await cp.delete_thread("never-existed")
            assert await cp.get("gone") is None
            assert await history_of(cp, "gone") == []
            assert await thread_ids(cp) == ["stays"]
            await cp.put(make_checkpoint("gone", 0), if_revision=0)
            again = await cp.get("gone")
            assert again is not None and again.revision == 1

    async def test_bad_thread_id_is_refused(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0))
            for thread in ("", "a\x00b", None):
                with pytest.raises(InvalidThreadId):
                    await cp.delete_thread(thread)  # type: ignore[arg-type]
            assert await thread_ids(cp) == ["t"]
