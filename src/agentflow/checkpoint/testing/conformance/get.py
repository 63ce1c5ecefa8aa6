"""get: latest and exact steps, ids as data, and damaged records raising."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.checkpoint.testing.conformance._support import (
    HOSTILE_THREAD_IDS,
    PATH_LIKE_THREAD_IDS,
    UNICODE_THREAD_IDS,
    history_of,
    thread_ids,
)
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.errors import CheckpointCorrupted, InvalidArgument, InvalidThreadId

__all__ = ["GetConformance"]


@pytest.mark.asyncio
class GetConformance:
    """What every backend's ``get`` does."""

    async def test_missing_thread_and_step_read_as_none(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            assert await cp.get("nope") is None
            await cp.put(make_checkpoint("t", 0))
            assert await cp.get("t", 7) is None

    async def test_get_latest_is_highest_step(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for step in (2, 0, 10, 1):
                await cp.put(make_checkpoint("t", step))
            latest = await cp.get("t")
        assert latest is not None and latest.step == 10

    @pytest.mark.parametrize("step", [-1, True, 1.5, "1", 2**63], ids=repr)
    async def test_bad_step_is_invalid_argument(self, harness: BackendHarness, step: Any) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0))
            with pytest.raises(InvalidArgument):
                await cp.get("t", step)

    async def test_bad_thread_id_is_refused(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for thread in ("", "nul\x00byte", "lone-\ud800-surrogate", None, 3):
                with pytest.raises(InvalidThreadId):
                    await cp.get(thread)  # type: ignore[arg-type]

    async def test_unicode_and_hostile_ids_are_data(self, harness: BackendHarness) -> None:
        ids = UNICODE_THREAD_IDS + HOSTILE_THREAD_IDS + ["y" * 200]
        if not harness.restricted_thread_ids:
            ids += [*PATH_LIKE_THREAD_IDS, "z" * 5000]
        value = {
            "text": "".join(chr(c) for c in range(1, 0xD800, 97)) + "🧵\U0010ffff",
            "q": {"$gt": ""},
        }
        async with harness.open() as cp:
            for thread in ids:
                await cp.put(make_checkpoint(thread, 0, state=value))
            for thread in ids:
                got = await cp.get(thread)
                assert got is not None and got.thread == thread and got.state == value
                assert [c.thread for c in await history_of(cp, thread)] == [thread]
            assert await thread_ids(cp) == sorted(ids)
            await cp.delete_thread("*")
            assert await cp.get("'; DROP TABLE checkpoints; --") is not None
            assert len(await thread_ids(cp)) == len(ids) - 1

    async def test_path_like_ids_refused_where_restricted(self, harness: BackendHarness) -> None:
        if not harness.restricted_thread_ids:
            return
        async with harness.open() as cp:
            for thread in PATH_LIKE_THREAD_IDS:
                with pytest.raises(InvalidThreadId):
                    await cp.put(make_checkpoint(thread, 0))
            assert await cp.list_threads() == []

    async def test_corrupted_payload_raises(self, harness: BackendHarness) -> None:
        if harness.corrupt is None:
            pytest.fail(f"harness {harness.name} must provide corrupt()")
        async with harness.open(namespace="n") as cp:
            await cp.put(make_checkpoint("t", 0))
            await cp.put(make_checkpoint("t", 1))
            await harness.corrupt("n", "t", 1)
            with pytest.raises(CheckpointCorrupted):
                await cp.get("t", 1)
            with pytest.raises(CheckpointCorrupted):
                await cp.get("t")
            with pytest.raises(CheckpointCorrupted):
                await history_of(cp, "t")
            assert (await cp.get("t", 0)) is not None

    async def test_damaged_revision_raises(self, harness: BackendHarness) -> None:
        if harness.damage_revision is None:
            pytest.fail(f"harness {harness.name} must provide damage_revision()")
        async with harness.open(namespace="n") as cp:
            await cp.put(make_checkpoint("t", 0))
            await cp.put(make_checkpoint("t", 1))
            await harness.damage_revision("n", "t", 1)
            with pytest.raises(CheckpointCorrupted) as info:
                await cp.get("t", 1)
            assert "'t'" in str(info.value)
            with pytest.raises(CheckpointCorrupted):
                await cp.get("t")
            with pytest.raises(CheckpointCorrupted):
                await history_of(cp, "t")
            got = await cp.get("t", 0)
            assert got is not None and got.revision == 1
