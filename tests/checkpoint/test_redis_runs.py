"""What is specific to the Redis store's records and events: one script per write
(seen with MONITOR on a private server), what each script writes, re-sent
scripts, the server's clock, the key layout and tenancy, the layout version,
the URL."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pytest
import redis.asyncio as aioredis

from agentflow.checkpoint.redis import Keys, RedisCheckpointer, from_url, run_scripts
from agentflow.checkpoint.redis.keys import LAYOUT
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import ClaimActive, RecoveryRequired
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS, claimed, take
from agentflow.errors import (
    CheckpointCorrupted,
    IncompatibleSchema,
    InvalidArgument,
    InvalidStoreUrl,
    StoreClosed,
)
from tests.backends.redis import (
    REDIS_URL,
    Sent,
    admin_session,
    by_client,
    by_script,
    monitored,
    scratch_prefix,
    stored_keys,
)
from tests.durable.operations import every_operation

T = TypeVar("T")
admin = pytest.fixture(admin_session)
prefix = pytest.fixture(scratch_prefix)


async def test_each_operation_is_one_command(tmp_path: Path) -> None:
    seen: dict[str, list[Sent]] = {}
    async with monitored(tmp_path) as (url, feed), RedisCheckpointer(url) as store:
        await store.load("warm-up")  # the first call checks the layout version
        await store.replay("warm-up")

        async def op(name: str, call: Awaitable[T]) -> T:
            result, seen[name] = await feed.during(call)
            if isinstance(result, BaseException):
                raise result
            return result

        await every_operation(store, store, op, "events.redis")
    assert {name: by_client(sent) for name, sent in seen.items()} == {
        **{
            name: ["EVALSHA"]
            for name in (
                "create",
                "claim",
                "renew",
                "record_operation",
                "refused",
                "progress",
                "finalize_claimed",
                "record_event_delivery",
                "acknowledge_terminal",
                "delete",
                "append_once",
                "append_once again",
                "replay",
            )
        },
        "load": ["HGETALL"],
        # a page of keys, then their heads; then the cursor secret, which a store
        # reads once, for its first cursor (SET NX GET)
        "list_runs": ["ZRANGE", "EVALSHA", "SET"],
    }
    # The run's hash is read and written by name (and the status its record
    # imposes on the thread read: HGET of rs); a refused write writes nothing.
    # A write that changes the claim token moves the run in the holder index.
    shape = ("HMGET", "HEXISTS", "HLEN")
    assert by_script(seen["claim"]) == [
        *(*shape, "TIME", "TYPE", "HGET", "HSET", "ZADD", "HGETALL")
    ]
    assert by_script(seen["renew"]) == ["HMGET", "TIME", "HSET"]
    assert by_script(seen["refused"]) == ["HMGET"]
    assert by_script(seen["record_operation"]) == [*shape, "HGET", "HSET", "HGET"]
    assert by_script(seen["finalize_claimed"]) == [
        *(*shape, "TYPE", "TYPE", "HGET", "HSET", "HDEL", "ZREM", "ZADD", "ZREM", "HGET")
    ]
    # A page of two reads the two runs' heads, nothing of the others.
    assert by_script(seen["list_runs"]) == ["ZSCORE", "HMGET"] * 2
    assert by_script(seen["append_once again"]) == ["HGET"]


async def test_small_writes_leave_the_body_alone(tmp_path: Path) -> None:
    written: dict[str, set[bytes]] = {}
    async with monitored(tmp_path) as (url, feed), RedisCheckpointer(url) as store:
        await store.create(make_record(shared_state={"notes": "x" * 100_000}))

        async def op(name: str, call: Awaitable[T]) -> T:
            result, sent = await feed.during(call)
            written[name] = {f for s in sent if s.name == "HSET" for f in s.fields()}
            assert not isinstance(result, BaseException)
            return result

        record = await op("claim", take(store, "owner-a"))
        await op("renew", store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS))
        entry = make_tool_entry("run-1", 1)
        record = await op("planned", store.record_operation(record, entry, claim_token="owner-a"))
        record = await op(
            "started", store.record_operation(record, entry.start(), claim_token="owner-a")
        )
        record.shared_state = {"notes": "y"}
        await op("progress", store.progress(record, claim_token="owner-a"))
    head = {name.encode() for name in run_scripts.HEAD_FIELDS} | {b"write_id"}
    assert written["renew"] == {b"lease_expires_at_ms"}
    claim = {b"revision", b"status", b"resume_attempt", b"claim_token", b"claimed_cycle"}
    assert written["claim"] == claim | {b"lease_expires_at_ms", b"write_id"}
    # A journal write: the head (the lease stays as stored) and one entry.
    assert written["planned"] == head - {b"lease_expires_at_ms"} | {b"jt.0", b"jt"}
    assert written["started"] == head - {b"lease_expires_at_ms"} | {b"jt.0"}
    assert b"body" in written["progress"]


async def test_a_commit_removes_the_journal_entries(admin: aioredis.Redis, prefix: str) -> None:
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
        record = await claimed(store)
        for position in (1, 2, 3):
            entry = make_tool_entry("run-1", 1, position)
            record = await store.record_operation(record, entry, claim_token="owner-a")
        run = Keys(prefix, "").run("run-1")
        assert {b"jt.0", b"jt.1", b"jt.2"} <= set(await admin.hkeys(run))
        committed = replace(record, cycle_index=1)
        await store.commit(committed, claim_token="owner-a")
        fields = set(await admin.hkeys(run))
    assert fields == {name.encode() for name in (*run_scripts.FIELDS, "body", "df")}


async def test_leases_run_on_the_server_clock(
    admin: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    day_ms = 86_400_000
    real_ns = time.time_ns
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
        for skew in (day_ms, -day_ms):  # this machine's clock a day ahead, then behind
            monkeypatch.setattr(time, "time_ns", lambda skew=skew: real_ns() + skew * 1_000_000)
            monkeypatch.setattr(time, "time", lambda skew=skew: real_ns() / 1e9 + skew / 1e3)
            key = f"run{skew}"
            await store.create(make_record(key))
            seconds, micros = await admin.time()
            server_ms = seconds * 1000 + micros // 1000
            held = await take(store, "owner-a", key=key, lease_ms=60_000)
            assert held.lease_expires_at_ms is not None
            assert abs(held.lease_expires_at_ms - (server_ms + 60_000)) < 5_000
            # Live on the server's clock, whatever this machine's says.
            with pytest.raises(ClaimActive):
                await take(store, "owner-b", key=key, mode=ClaimMode.RECOVERY)
            # Lapsed on the server's clock: only a recovery claim takes it.
            run = Keys(prefix, "").run(key)
            await admin.hset(run, "lease_expires_at_ms", str(server_ms - 1))
            with pytest.raises(RecoveryRequired):
                await take(store, "owner-b", key=key)
            taken = await take(store, "owner-b", key=key, mode=ClaimMode.RECOVERY)
            assert taken.claim_token == "owner-b" and taken.resume_attempt == 2


# -- layout, tenancy and lifecycle -------------------------------------------------


async def test_keys_of_hostile_names_stay_in_their_tags(admin: aioredis.Redis, prefix: str) -> None:
    names = ["a.b", "a", "*", "{x}", "}{", "a:b", "研究", "\U0001f600"]
    stores = {ns: RedisCheckpointer(REDIS_URL, prefix=prefix, namespace=ns) for ns in names}
    try:
        await stores["a"].put(make_checkpoint("b.c", 0))
        for ns, store in stores.items():
            for key in names:
                await store.create(make_record(key, shared_state={"ns": ns, "key": key}))
        for ns, store in stores.items():
            listed = [run.key for run in (await store.list_runs(limit=100)).runs]
            assert listed == sorted(names, key=lambda k: k.encode())
            for key in names:
                loaded = await store.load(key)
                assert loaded is not None and loaded.shared_state == {"ns": ns, "key": key}
        assert await stores["a"].get("b.c") is not None
        expected = {Keys(prefix, ns).run(key) for ns in names for key in names}
        expected |= {k for ns in names for k in (*Keys(prefix, ns).runs, Keys(prefix, ns).version)}
        records = {k for k in await stored_keys(admin, prefix) if b":{t." not in k}
        assert {k for k in records if b":{n." not in k or k.endswith(b"}:v")} == expected
    finally:
        for store in stores.values():
            await store.close()


async def test_prefixes_and_namespaces_never_meet(prefix: str) -> None:
    other = f"{prefix}-other"
    async with (
        RedisCheckpointer(REDIS_URL, prefix=prefix, namespace="t") as mine,
        RedisCheckpointer(REDIS_URL, prefix=other, namespace="t") as theirs,
        RedisCheckpointer(REDIS_URL, prefix=prefix, namespace="u") as neighbour,
    ):
        try:
            held = await claimed(mine)
            await claimed(theirs, token="owner-b")
            assert await neighbour.load("run-1") is None
            with pytest.raises(ClaimActive):
                await take(theirs, "owner-x", mode=ClaimMode.RECOVERY)
            await mine.progress(held, claim_token="owner-a")
            loaded = await theirs.load("run-1")
            assert loaded is not None and (loaded.revision, loaded.claim_token) == (1, "owner-b")
        finally:
            await theirs.delete("run-1", force=True)


async def test_the_layout_version_is_set_once_and_a_newer_one_refused(
    admin: aioredis.Redis, prefix: str
) -> None:
    keys = Keys(prefix, "t")
    async with RedisCheckpointer(REDIS_URL, prefix=prefix, namespace="t") as store:
        assert await store.load("run-1") is None
    # one version for the namespace's threads, records and events; the old
    # durable version key holds it too, so that older releases refuse it
    assert await admin.mget(keys.version, keys.runs[2]) == [LAYOUT, LAYOUT]
    for stored, error in ((b"4", IncompatibleSchema), (b"x", CheckpointCorrupted)):
        await admin.set(keys.version, stored)
        async with RedisCheckpointer(REDIS_URL, prefix=prefix, namespace="t") as store:
            with pytest.raises(error) as caught:
                await store.create(make_record())
            with pytest.raises(error):
                await store.append_once("e", "0" * 64, {})
        assert isinstance(caught.value, IncompatibleSchema) == (error is IncompatibleSchema)
        assert await admin.exists(keys.run("run-1")) == 0
    await admin.set(keys.version, LAYOUT)
    await admin.set(keys.runs[2], b"4")  # a newer release's durable part
    async with RedisCheckpointer(REDIS_URL, prefix=prefix, namespace="t") as store:
        assert await store.load("run-1") is None  # version 3 decides


async def test_construction_urls_and_closing(prefix: str) -> None:
    store = from_url(REDIS_URL, namespace="t")
    assert store.namespace == "t" and "127.0.0.1:6379" in repr(store)
    await store.close()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.load("run-1")
    with pytest.raises(InvalidStoreUrl):
        from_url("redis://host:notaport")
    with pytest.raises(InvalidArgument):
        RedisCheckpointer(REDIS_URL, prefix="a{b}")
    decoding = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    with pytest.raises(InvalidArgument):
        RedisCheckpointer(client=decoding)
    await decoding.aclose()
    client = aioredis.Redis.from_url(REDIS_URL)
    async with RedisCheckpointer(client=client, prefix=prefix) as injected:
        await injected.create(make_record())
    assert await client.ping() is True  # an injected client stays open
    async with RedisCheckpointer(client=client, prefix=prefix) as again:
        assert await again.load("run-1") is not None
    await client.aclose()
