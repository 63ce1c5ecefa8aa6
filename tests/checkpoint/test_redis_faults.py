"""Redis faults: lost connections, refused access, server limits, damaged data, failed scripts."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.redis import Keys, RedisCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import (
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    StoreUnavailable,
)
from tests.backends.redis import (
    REDIS_URL,
    admin_session,
    assert_consistent,
    connections,
    named_url,
    private_redis,
    scratch_prefix,
)

admin = pytest.fixture(admin_session)
prefix = pytest.fixture(scratch_prefix)
NOW = "2026-06-01T12:00:00Z"


async def _all(items: AsyncIterator[Checkpoint]) -> list[Checkpoint]:
    return [item async for item in items]


async def test_a_failing_prune_deletes_nothing(admin: aioredis.Redis, prefix: str) -> None:
    s, d = Keys(prefix, "").thread("t")
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        for step in range(4):
            await cp.put(make_checkpoint("t", step, ts=f"2026-01-01T00:00:0{step}Z"))
        before = await admin.hgetall(d)
        # damaged metadata among the steps the cutoff must read
        await admin.hset(d, b"%020dm" % 1, b"garbage")
        damaged = await admin.hgetall(d)
        with pytest.raises(CheckpointCorrupted):
            await cp.prune("t", before_step=3, older_than="2026-01-02T00:00:00Z")
        assert await admin.zcard(s) == 4 and await admin.hgetall(d) == damaged
        await admin.hset(d, mapping=cast(dict[Any, Any], before))
        # a namespace index of the wrong type, written only after the deletes
        summaries = Keys(prefix, "").threads[2]
        kept = await admin.hgetall(summaries)
        await admin.unlink(summaries)
        await admin.set(summaries, b"not a hash")
        for prune in (
            cp.prune("t", before_step=2),
            cp.prune("t", before_step=10),
            cp.delete_thread("t"),
        ):
            with pytest.raises(CheckpointCorrupted):
                await prune
            assert await admin.zcard(s) == 4 and await admin.hgetall(d) == before
        await admin.unlink(summaries)
        await admin.hset(summaries, mapping=cast(dict[Any, Any], kept))
        assert await cp.prune("t", before_step=2) == 2
        await assert_consistent(admin, prefix, "", ["t"])


async def test_a_failing_put_writes_nothing(admin: aioredis.Redis, prefix: str) -> None:
    s, d = Keys(prefix, "").thread("t")
    statuses = Keys(prefix, "").threads[3]
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        await cp.put(make_checkpoint("t", 0, next=("n",)))
        await admin.unlink(statuses)
        await admin.set(statuses, b"not a sorted set")
        with pytest.raises(CheckpointCorrupted):
            await cp.put(make_checkpoint("t", 1))  # would move t from running to done
        with pytest.raises(CheckpointCorrupted):
            await cp.put(make_checkpoint("new", 0))
        assert await admin.zrange(s, 0, -1) == [b"%020d" % 0]
        assert await admin.exists(*Keys(prefix, "").thread("new")) == 0
        await cp.put(make_checkpoint("t", 1, next=("n",)))  # status unchanged: no index write
        assert await admin.zcard(s) == 2 and await admin.hlen(d) == 4


# -- faults ----------------------------------------------------------------------


async def _kill_when_blocked(admin: aioredis.Redis, name: str) -> None:
    for _ in range(500):
        blocked = [c for c in await connections(admin, name) if "b" in c["flags"]]
        if blocked:
            for conn in blocked:
                await admin.client_kill_filter(_id=conn["id"])
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the write never reached the server")


@pytest.mark.parametrize("call", ["put", "prune", "delete_thread"])
async def test_connection_killed_mid_call(admin: aioredis.Redis, prefix: str, call: str) -> None:
    name = f"aftest-fault-{uuid.uuid4().hex}"
    async with RedisCheckpointer(named_url(name), prefix=prefix) as cp:
        # A driver retry would re-send the script once the pause lifts.
        assert cp._client.connection_pool.connection_kwargs["retry"].get_retries() == 0
        await cp.put(make_checkpoint("t", 0))
        await cp.put(make_checkpoint("t", 1))
        operations: dict[str, Callable[[], Awaitable[object]]] = {
            "put": lambda: cp.put(make_checkpoint("t", 1, state={"lost": True})),
            "prune": lambda: cp.prune("t", before_step=5),
            "delete_thread": lambda: cp.delete_thread("t"),
        }
        await admin.client_pause(5_000, all=False)
        try:
            task = asyncio.ensure_future(operations[call]())
            await _kill_when_blocked(admin, name)
        finally:
            await admin.client_unpause()
        with pytest.raises(StoreUnavailable) as info:
            await task
        assert info.value.retryable and isinstance(info.value.__cause__, RedisConnectionError)
        assert str(info.value).startswith(f"redis {call} on 127.0.0.1:6379 failed")
        assert [(c.step, c.revision, c.state) async for c in cp.history("t")] == [
            (0, 1, {"step": 0}),
            (1, 1, {"step": 1}),
        ]
        await cp.put(make_checkpoint("t", 1), if_revision=1)
        assert await cp.prune("t", before_step=1) == 1


async def test_unreachable_server_is_store_unavailable_without_the_password() -> None:
    url = "redis://agent:hunter2-secret@127.0.0.1:1/0"
    async with RedisCheckpointer(url, prefix="nowhere") as cp:
        for call, run in (("get", cp.get("t")), ("put", cp.put(make_checkpoint("t", 0)))):
            with pytest.raises(StoreUnavailable) as info:
                await run
            assert isinstance(info.value.__cause__, RedisConnectionError)
            message = str(info.value)
            assert message.startswith(f"redis {call} on 127.0.0.1:1 failed")
            assert "hunter2" not in message and "_setup" not in message


async def test_a_wrong_password_is_not_retryable(tmp_path: Path) -> None:
    async with private_redis(tmp_path, "--requirepass", "right-one") as url:
        client = aioredis.Redis.from_url(url, password="wrong-one")
        async with RedisCheckpointer(client=client) as cp:
            with pytest.raises(CheckpointError) as info:
                await cp.get("t")
        await client.aclose()
    assert not isinstance(info.value, StoreUnavailable) and not info.value.retryable
    assert str(info.value).startswith(f"redis get on {tmp_path / 'redis.sock'} failed")
    assert "wrong-one" not in str(info.value)


async def test_a_payload_over_the_servers_limit_is_invalid_and_stores_nothing(
    tmp_path: Path,
) -> None:
    async with (
        private_redis(tmp_path, "--proto-max-bulk-len", "1mb") as url,
        RedisCheckpointer(url) as cp,
    ):
        await cp.put(make_checkpoint("t", 0, state={"small": "x" * 1_000}))
        with pytest.raises(InvalidArgument) as info:
            await cp.put(make_checkpoint("t", 1, state={"big": "x" * 1_100_000}))
        assert "proto-max-bulk-len" in str(info.value)
        assert [c.step async for c in cp.history("t")] == [0]
        assert [i.latest_step for i in await cp.list_threads()] == [0]


async def test_a_server_without_config_keeps_working(tmp_path: Path) -> None:
    async with (
        private_redis(tmp_path, "--rename-command", "CONFIG", "") as url,
        RedisCheckpointer(url) as cp,
    ):
        await cp.put(make_checkpoint("t", 0))
        got = await cp.get("t")
        assert got is not None and got.revision == 1


# -- corruption ------------------------------------------------------------------


async def test_damaged_metadata_summary_and_types_raise_corrupted(
    admin: aioredis.Redis, prefix: str
) -> None:
    s, d = Keys(prefix, "").thread("t")
    idx, _, summaries = Keys(prefix, "").threads[:3]
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        for thread in ("t", "u"):
            await cp.put(make_checkpoint(thread, 0))
            await cp.put(make_checkpoint(thread, 1))
        await admin.hset(d, b"%020dm" % 1, b"garbage")
        late = "2100-01-01T00:00:00Z"
        for call in (cp.get("t"), cp.put(make_checkpoint("t", 1)), cp.prune("t", older_than=late)):
            with pytest.raises(CheckpointCorrupted):
                await call
        await admin.hdel(d, b"%020dm" % 1)
        with pytest.raises(CheckpointCorrupted):
            await cp.get("t", 1)
        await admin.hdel(d, b"%020d" % 1)
        for read in (cp.get("t"), _all(cp.history("t"))):
            with pytest.raises(CheckpointCorrupted):
                await read
        assert await cp.get("t", 1) is None
        other = await admin.hget(Keys(prefix, "").thread("u")[1], b"%020d" % 0)
        assert isinstance(other, bytes)
        await admin.hset(d, b"%020d" % 0, other)
        with pytest.raises(CheckpointCorrupted):
            await cp.get("t", 0)
        await admin.hset(summaries, b"t", b"r" + b"0" * 18 + b"{not json")
        with pytest.raises(CheckpointCorrupted):
            await cp.list_threads()
        await admin.hdel(summaries, b"t")
        with pytest.raises(CheckpointCorrupted):
            await cp.list_threads()
        await admin.zrem(idx, b"t")
        await admin.zadd(idx, {b"\xff": 0})
        with pytest.raises(CheckpointCorrupted):
            await cp.list_threads_page()
        await admin.unlink(s)
        await admin.set(s, b"a string, not a sorted set")
        with pytest.raises(CheckpointCorrupted):
            await cp.get("t")
        assert (await cp.get("u")) is not None
        await admin.set(Keys(prefix, "").secret, b"short")
        with pytest.raises(CheckpointCorrupted):
            await cp.list_due(NOW, cursor="x")
