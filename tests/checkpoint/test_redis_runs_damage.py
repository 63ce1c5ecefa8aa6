"""Damaged Redis records and events raise DurableCorrupted and are never written over."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from agentflow.checkpoint.redis import Keys, RedisCheckpointer
from agentflow.durable import event_payload_digest
from agentflow.durable.enums import CheckpointStatus
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import claimed, take
from tests.backends.redis import REDIS_URL, admin_session, scratch_prefix

admin = pytest.fixture(admin_session)
prefix = pytest.fixture(scratch_prefix)


@pytest.fixture
async def store(prefix: str) -> AsyncIterator[RedisCheckpointer]:
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as opened:
        yield opened


async def _stored(admin: aioredis.Redis, prefix: str) -> dict[bytes, bytes]:
    return cast(dict[bytes, bytes], await admin.hgetall(Keys(prefix, "").run("run-1")))


@pytest.mark.parametrize(
    ("damage", "malformed"),
    [
        (("status", b"paused"), True),
        (("revision", b"-1"), True),
        (("revision", b"05"), True),
        (("terminal", b"2"), True),
        (("identity", None), True),  # missing
        (("claim_token", b"\xff"), True),  # not UTF-8
        (("lease_expires_at_ms", b"9007199254740992"), True),  # past 2**53 - 1
        (("terminal", b"1"), False),  # well-formed, but the body holds no terminal result
        (("ambiguous", b"1"), False),  # well-formed, but no journal entry is ambiguous
        (("surprise", b"1"), False),  # a field no record has
        (("jt", b"2"), False),  # more entries than the hash holds
        (("jt.0", b"[{"), False),  # an entry that is not JSON
        (("body", None), False),
    ],
)
async def test_a_damaged_run_raises_on_every_read(
    admin: aioredis.Redis,
    prefix: str,
    store: RedisCheckpointer,
    damage: tuple[str, bytes | None],
    malformed: bool,
) -> None:
    field, value = damage
    record = await claimed(store)
    await store.record_operation(record, make_tool_entry("run-1", 1), claim_token="owner-a")
    run = Keys(prefix, "").run("run-1")
    if value is None:
        await admin.hdel(run, field)
    else:
        await admin.hset(run, field, value)
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")
    if malformed:  # a listing reads heads only, so it catches what a head alone shows
        with pytest.raises(DurableCorrupted):
            await store.list_runs()


@pytest.mark.parametrize(("field", "value"), [("jt", b"x"), ("body", None), ("extra", b"1")])
async def test_writes_over_a_damaged_run_raise_and_write_nothing(
    admin: aioredis.Redis, prefix: str, store: RedisCheckpointer, field: str, value: bytes | None
) -> None:
    await store.create(make_record())
    record = await take(store, "owner-a")
    run = Keys(prefix, "").run("run-1")
    if value is None:
        await admin.hdel(run, field)
    else:
        await admin.hset(run, field, value)
    damaged = await _stored(admin, prefix)
    writes: tuple[Callable[[], Awaitable[object]], ...] = (
        lambda: store.record_operation(record, make_tool_entry("run-1", 1), claim_token="owner-a"),
        lambda: store.progress(record, claim_token="owner-a"),
        lambda: store.commit(replace(record, cycle_index=1), claim_token="owner-a"),
    )
    for write in writes:
        with pytest.raises(DurableCorrupted):
            await write()
        assert await _stored(admin, prefix) == damaged
    await admin.hset(run, "claim_token", "")  # unclaimed: a claim reads it
    await admin.hset(run, "lease_expires_at_ms", "")
    damaged = await _stored(admin, prefix)
    with pytest.raises(DurableCorrupted):
        await take(store, "owner-b")
    assert await _stored(admin, prefix) == damaged


async def test_keys_of_the_wrong_type_raise_and_write_nothing(
    admin: aioredis.Redis, prefix: str, store: RedisCheckpointer
) -> None:
    record = await claimed(store)
    everything, statuses, _ = Keys(prefix, "").runs
    kept = cast("list[bytes]", await admin.zrange(statuses, 0, -1))
    await admin.unlink(statuses)
    await admin.set(statuses, b"not a sorted set")
    before = await _stored(admin, prefix)
    final = replace(
        record, status=CheckpointStatus.COMPLETED, terminal_result={"status": "completed"}
    )
    with pytest.raises(DurableCorrupted):  # the status moves: the status index is written
        await store.finalize_claimed(final, claim_token="owner-a")
    assert await _stored(admin, prefix) == before
    await admin.unlink(statuses)
    await admin.zadd(statuses, {member: 0 for member in kept})
    await admin.unlink(everything)
    await admin.set(everything, b"not a sorted set")
    with pytest.raises(DurableCorrupted):
        await store.create(make_record("run-2"))
    assert await admin.exists(Keys(prefix, "").run("run-2")) == 0
    await admin.unlink(Keys(prefix, "").run("run-1"))
    await admin.set(Keys(prefix, "").run("run-1"), b"not a hash")
    with pytest.raises(DurableCorrupted):
        await store.load("run-1")
    with pytest.raises(DurableCorrupted):
        await take(store, "owner-b")


async def test_an_index_entry_without_its_run_raises(
    admin: aioredis.Redis, prefix: str, store: RedisCheckpointer
) -> None:
    await store.create(make_record())
    await admin.unlink(Keys(prefix, "").run("run-1"))
    with pytest.raises(DurableCorrupted):
        await store.list_runs()
    assert await store.delete("run-1") is False  # a delete clears the index all the same
    assert (await store.list_runs()).runs == []


@pytest.mark.parametrize("damage", ["event", "digest", "meta", "id"])
async def test_damaged_events_raise(admin: aioredis.Redis, prefix: str, damage: str) -> None:
    event = {"type": "step", "run_id": "run-a", "n": 1}
    digest = event_payload_digest(event)
    _, ids, data = Keys(prefix, "").events
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as events:
        await events.append_once("evt-1", digest, event)
        changes: dict[str, tuple[bytes, bytes, Any]] = {
            "event": (data, b"1", b'{"n":2}'),
            "digest": (data, b"1m", b"0" * 64 + b":evt-1"),
            "meta": (data, b"1m", None),
            "id": (ids, b"evt-1", b"garbage"),
        }
        key, field, value = changes[damage]
        if value is None:
            await admin.hdel(key, field)
        else:
            await admin.hset(key, field, value)
        with pytest.raises(DurableCorrupted):
            if damage == "id":
                await events.append_once("evt-1", digest, event)
            else:
                await events.replay("run-a")
