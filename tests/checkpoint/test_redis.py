"""Redis-specific behaviour beyond the conformance suite, on the real server."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from agentflow.checkpoint import redis as redis_module
from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.redis import RedisCheckpointer, namespace_keys, thread_keys
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    InvalidArgument,
    InvalidThreadId,
    StoreUnavailable,
)
from tests.backends.redis import REDIS_URL, admin_client, drop_prefix, unique_prefix

HOSTILE = ["a:b:cp:1", "*", "{x}", "}{", "\\", "a.b", "a", "b", "?[a]", "t.YQ.Yg"]


@pytest.fixture
async def admin() -> AsyncIterator[aioredis.Redis]:
    client = await admin_client()
    yield client
    await client.aclose()


@pytest.fixture
async def prefix(admin: aioredis.Redis) -> AsyncIterator[str]:
    name = unique_prefix()
    yield name
    await drop_prefix(admin, name)


async def _all(items: AsyncIterator[Checkpoint]) -> list[Checkpoint]:
    return [item async for item in items]


def _url(name: str) -> str:
    return f"{REDIS_URL}?client_name={name}"


async def _connections(admin: aioredis.Redis, name: str) -> list[dict[str, str]]:
    return [c for c in await admin.client_list() if c.get("name") == name]


async def assert_consistent(
    admin: aioredis.Redis, prefix: str, namespace: str, threads: list[str]
) -> None:
    """No orphans: every index agrees with the stored steps, the summary is the
    latest step's, and an empty thread has no key and no index entry."""
    indexed = set(await admin.zrange(namespace_keys(prefix, namespace)[0], 0, -1))
    for thread in threads:
        s, d, h = thread_keys(prefix, namespace, thread)
        steps = set(await admin.zrange(s, 0, -1))
        if not steps:
            assert await admin.exists(s, d, h) == 0, thread
            assert thread.encode() not in indexed, thread
            continue
        assert thread.encode() in indexed
        data = await admin.hgetall(d)
        assert set(data) == steps | {step + b"m" for step in steps}
        assert await admin.get(h) == data[max(steps) + b"m"].split(b":", 3)[3]


# -- ownership and arguments ----------------------------------------------------


async def test_injected_client_stays_open_and_owned_one_is_closed(
    admin: aioredis.Redis, prefix: str
) -> None:
    client = aioredis.Redis.from_url(REDIS_URL)
    async with RedisCheckpointer(client=client, prefix=prefix) as cp:
        await cp.put(make_checkpoint("t", 0))
    await cp.close()
    assert await client.ping() is True
    await client.aclose()

    name = f"aftest-own-{uuid.uuid4().hex}"
    owned = RedisCheckpointer(_url(name), prefix=prefix)
    assert (await owned.get("t")) is not None
    assert len(await _connections(admin, name)) == 1
    await owned.close()
    await owned.close()
    for _ in range(50):
        if not await _connections(admin, name):
            break
        await asyncio.sleep(0.01)
    assert await _connections(admin, name) == []


async def test_bad_arguments_are_refused_and_store_nothing(
    admin: aioredis.Redis, prefix: str
) -> None:
    for bad_prefix in ("", "a{b", "}", 7, "\ud800"):
        with pytest.raises(InvalidArgument):
            RedisCheckpointer(prefix=bad_prefix)  # type: ignore[arg-type]
    for ttl in (0, -1, True, "10", 10 * 366 * 86_400):
        with pytest.raises(InvalidArgument):
            RedisCheckpointer(prefix=prefix, ttl=ttl)  # type: ignore[arg-type]
    decoding = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    with pytest.raises(InvalidArgument):
        RedisCheckpointer(client=decoding, prefix=prefix)
    await decoding.aclose()
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        for revision in (-1, True, "1", 1.0):
            with pytest.raises(InvalidArgument):
                await cp.put(make_checkpoint("t", 0), if_revision=revision)  # type: ignore[arg-type]
        with pytest.raises(InvalidThreadId):
            await cp.get("lone-\ud800")
    assert [k async for k in admin.scan_iter(match=f"{prefix}:*")] == []


# -- key structure ------------------------------------------------------------


async def test_hostile_ids_never_shape_or_share_keys(admin: aioredis.Redis, prefix: str) -> None:
    pairs = [(ns, t) for ns in (None, "a", "a.b", "{x}", "*") for t in HOSTILE]
    for ns, thread in pairs:
        async with RedisCheckpointer(REDIS_URL, prefix=prefix, namespace=ns) as cp:
            await cp.put(make_checkpoint(thread, 0, state={"ns": ns, "t": thread}))
    owner: dict[bytes, tuple[str | None, str]] = {}
    for ns, thread in pairs:
        keys = thread_keys(prefix, ns or "", thread)
        tags = {key[key.index(b"{") + 1 : key.index(b"}")] for key in keys}
        assert len(tags) == 1 and next(iter(tags)).startswith(b"t.")
        for key in keys:
            assert key.count(b"{") == key.count(b"}") == 1
            assert not set(key[len(prefix) :]) & set(b"*?[]\\")
            assert owner.setdefault(key, (ns, thread)) == (ns, thread)
    stored = {k async for k in admin.scan_iter(match=f"{prefix}:*")}
    expected = {k for ns, t in pairs for k in thread_keys(prefix, ns or "", t)}
    expected |= {
        k for ns in (None, "a", "a.b", "{x}", "*") for k in namespace_keys(prefix, ns or "")
    }
    assert stored == expected - {k for k in expected if k.endswith(b":exp")}
    for ns, thread in pairs:
        async with RedisCheckpointer(REDIS_URL, prefix=prefix, namespace=ns) as cp:
            got = await cp.get(thread)
            assert got is not None and got.state == {"ns": ns, "t": thread}
            assert [i.thread for i in await cp.list_threads()] == sorted(HOSTILE)


async def test_prefixes_that_extend_each_other_stay_apart(
    admin: aioredis.Redis, prefix: str
) -> None:
    variants = [prefix, f"{prefix}:", f"{prefix}:a", f"{prefix}*", f"{prefix}:t.", f"{prefix}:n."]
    for i, p in enumerate(variants):
        async with RedisCheckpointer(REDIS_URL, prefix=p) as cp:
            await cp.put(make_checkpoint("t", 0, state={"i": i}))
    for i, p in enumerate(variants):
        async with RedisCheckpointer(REDIS_URL, prefix=p) as cp:
            got = await cp.get("t")
            assert got is not None and got.state == {"i": i} and got.revision == 1
            await cp.delete_thread("t")
    assert [k async for k in admin.scan_iter(match=f"{prefix}*")] == []


async def test_steps_beyond_double_precision_keep_their_order(prefix: str) -> None:
    steps = [2**63 - 1, 10**16, 10**16 - 1, 2**53 + 1, 2**53, 9, 10]
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        for step in steps:
            await cp.put(make_checkpoint("t", step))
        assert [c.step async for c in cp.history("t")] == sorted(steps)
        latest = await cp.get("t")
        assert latest is not None and latest.step == 2**63 - 1
        assert await cp.prune("t", before_step=10**16) == 5
        assert [c.step async for c in cp.history("t")] == [10**16, 2**63 - 1]


# -- atomicity ----------------------------------------------------------------


async def test_thousand_concurrent_unconditional_puts_keep_every_revision(prefix: str) -> None:
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:

        async def writer(task: int) -> None:
            for i in range(task, 1_000, 16):
                await cp.put(make_checkpoint("hot", 0, state={"i": i}))

        await asyncio.gather(*(writer(task) for task in range(16)))
        got = await cp.get("hot", 0)
        assert got is not None and got.revision == 1_000
        current = got.revision
        outcomes = await asyncio.gather(
            *(cp.put(make_checkpoint("hot", 0), if_revision=current) for _ in range(16)),
            return_exceptions=True,
        )
        assert sum(isinstance(o, str) for o in outcomes) == 1
        assert all(o.actual == 1_001 for o in outcomes if isinstance(o, CheckpointConflict))


async def test_a_resent_write_lands_once(prefix: str) -> None:
    """A driver that re-sends a script after losing its reply must not bump twice."""
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        await cp.put(make_checkpoint("t", 0))
        keys = [*thread_keys(prefix, "", "t"), *namespace_keys(prefix, "")]
        tail = b"ab" * 16 + b":%018d:{}" % 0
        args = [b"%020d" % 0, b"{}", tail, b"1", b"", b"t"]
        first = await cp._call(cp._put_script, keys, args, "put")
        again = await cp._call(cp._put_script, keys, args, "put")
        assert first == again == [1, 2]


async def test_delete_and_prune_racing_puts_leave_no_orphans(
    admin: aioredis.Redis, prefix: str
) -> None:
    threads = ["r0", "r1", "r2"]
    rng = random.Random(3)
    async with RedisCheckpointer(REDIS_URL, prefix=prefix, namespace="race") as cp:

        async def writer(thread: str) -> None:
            for step in range(60):
                ts = f"2026-01-01T00:{step % 60:02d}:00+00:00"
                await cp.put(make_checkpoint(thread, step % 20, ts=ts))

        async def reaper(thread: str) -> None:
            for _ in range(40):
                choice = rng.random()
                if choice < 0.3:
                    await cp.delete_thread(thread)
                elif choice < 0.6:
                    await cp.prune(thread, before_step=rng.randrange(20))
                else:
                    minute = rng.randrange(60)
                    await cp.prune(thread, older_than=f"2026-01-01T00:{minute:02d}:00Z")
                await asyncio.sleep(0)

        await asyncio.gather(*(f(t) for t in threads for f in (writer, writer, reaper)))
        await assert_consistent(admin, prefix, "race", threads)
        listed = {i.thread: i for i in await cp.list_threads()}
        for thread in threads:
            latest = await cp.get(thread)
            assert (latest.step if latest else None) == (
                listed[thread].latest_step if thread in listed else None
            )


async def test_prune_in_several_batches(
    admin: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_module, "_PRUNE_BATCH", 3)
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        for step in range(12):
            await cp.put(make_checkpoint("t", step, ts=f"2026-01-01T00:00:{11 - step:02d}Z"))
        # steps 2..11 are older than 00:00:10; of those, 2..7 are below step 8
        assert await cp.prune("t", older_than="2026-01-01T00:00:10Z", before_step=8) == 6
        assert [c.step async for c in cp.history("t")] == [0, 1, 8, 9, 10, 11]
        assert await cp.prune("t", before_step=11) == 5
        await assert_consistent(admin, prefix, "", ["t"])


async def test_prune_of_the_latest_step_rewrites_the_summary(
    admin: aioredis.Redis, prefix: str
) -> None:
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        await cp.put(make_checkpoint("t", 0, ts="2026-01-01T00:00:00Z"))
        await cp.put(make_checkpoint("t", 1, ts="2026-01-02T00:00:00Z", interrupted=True))
        await cp.put(make_checkpoint("t", 2, ts="2020-01-01T00:00:00Z", next=("n",)))
        assert await cp.prune("t", older_than="2021-01-01T00:00:00Z") == 1
        (info,) = await cp.list_threads()
        assert (info.latest_step, info.interrupted, info.ts) == (1, True, "2026-01-02T00:00:00Z")
        await assert_consistent(admin, prefix, "", ["t"])
        assert await cp.prune("t", before_step=5) == 2
        await assert_consistent(admin, prefix, "", ["t"])
        assert await admin.zcard(namespace_keys(prefix, "")[0]) == 0


@pytest.mark.parametrize("budget", [1, 10**9])
async def test_history_keeps_its_place_while_the_thread_changes(
    prefix: str, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    monkeypatch.setattr(redis_module, "_BATCH", 3)
    monkeypatch.setattr(redis_module, "_HISTORY_BYTES", budget)
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        for step in range(10):
            await cp.put(make_checkpoint("t", step))
        seen = []
        async for got in cp.history("t"):
            seen.append(got.step)
            if got.step == 2:
                assert await cp.prune("t", before_step=5) == 5
                await cp.put(make_checkpoint("t", 20))
        assert seen == [0, 1, 2, 5, 6, 7, 8, 9, 20]


async def test_history_skips_steps_pruned_between_its_reads(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_module, "_HISTORY_BYTES", 1)
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        for step in range(5):
            await cp.put(make_checkpoint("t", step))
        seen = []
        async for got in cp.history("t"):
            seen.append(got.step)
            if got.step == 0:
                assert await cp.prune("t", before_step=3) == 3
        assert seen == [0, 3, 4]


async def test_scripts_reload_after_the_server_forgets_them(prefix: str) -> None:
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        await cp.put(make_checkpoint("t", 0))
        await cp._client.script_flush()
        await cp.put(make_checkpoint("t", 1))
        assert [c.step async for c in cp.history("t")] == [0, 1]
        assert [i.thread for i in await cp.list_threads()] == ["t"]
        assert await cp.prune("t", before_step=1) == 1


# -- ttl -----------------------------------------------------------------------


async def _pttls(admin: aioredis.Redis, keys: list[bytes]) -> list[int]:
    return [await admin.pttl(key) for key in keys]


async def test_ttl_covers_every_key_and_is_refreshed(admin: aioredis.Redis, prefix: str) -> None:
    keys = thread_keys(prefix, "", "t")
    exp = namespace_keys(prefix, "")[1]
    async with RedisCheckpointer(REDIS_URL, prefix=prefix, ttl=60) as cp:
        await cp.put(make_checkpoint("t", 0))
        await cp.put(make_checkpoint("t", 1))
        first = await _pttls(admin, keys)
        assert all(55_000 < ms <= 60_000 for ms in first), first
        await asyncio.sleep(0.3)
        await cp.put(make_checkpoint("t", 0))
        assert await cp.prune("t", before_step=1) == 1
        refreshed = await _pttls(admin, keys)
        assert all(ms > 0 for ms in refreshed)
        assert min(refreshed) > max(first) - 100
        deadline = await admin.zscore(exp, b"t")
        seconds, micros = await admin.time()
        assert deadline is not None
        assert 55_000 < deadline - (seconds * 1_000 + micros // 1_000) <= 60_000
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as permanent:
        await permanent.put(make_checkpoint("t", 2))
    assert await _pttls(admin, keys) == [-1] * 3
    assert await admin.zscore(exp, b"t") is None


async def test_expired_threads_leave_the_listing(admin: aioredis.Redis, prefix: str) -> None:
    idx, exp = namespace_keys(prefix, "")
    async with (
        RedisCheckpointer(REDIS_URL, prefix=prefix, ttl=0.2) as short,
        RedisCheckpointer(REDIS_URL, prefix=prefix) as forever,
    ):
        for i in range(6):
            await (short if i % 2 else forever).put(make_checkpoint(f"x{i}", 0))
        await asyncio.sleep(0.3)
        assert await short.get("x1") is None
        await forever.put(make_checkpoint("x9", 0))
        assert len(await admin.zrange(idx, 0, -1)) == 7
        await short.put(make_checkpoint("x7", 0))
        assert set(await admin.zrange(idx, 0, -1)) == {b"x0", b"x2", b"x4", b"x7", b"x9"}

        for name in ("x0a", "x2a", "x2b", "x4a", "y"):
            await short.put(make_checkpoint(name, 0))
        await admin.unlink(exp)
        await asyncio.sleep(0.3)
        page = await forever.list_threads_page(limit=2)
        assert [i.thread for i in page.threads] == ["x0", "x2"]
        assert page.next_cursor is not None
        rest = await forever.list_threads_page(limit=2, cursor=page.next_cursor)
        assert [i.thread for i in rest.threads] == ["x4", "x9"] and rest.next_cursor is None


# -- faults ----------------------------------------------------------------------


async def _kill_when_blocked(admin: aioredis.Redis, name: str) -> None:
    for _ in range(500):
        blocked = [c for c in await _connections(admin, name) if "b" in c["flags"]]
        if blocked:
            for conn in blocked:
                await admin.execute_command("CLIENT", "KILL", "ID", conn["id"])
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the write never reached the server")


@pytest.mark.parametrize("call", ["put", "prune", "delete_thread"])
async def test_connection_killed_mid_call(admin: aioredis.Redis, prefix: str, call: str) -> None:
    name = f"aftest-fault-{uuid.uuid4().hex}"
    async with RedisCheckpointer(_url(name), prefix=prefix) as cp:
        # A driver retry would re-send the script once the pause lifts.
        assert cp._client.connection_pool.connection_kwargs["retry"].get_retries() == 0
        await cp.put(make_checkpoint("t", 0))
        await cp.put(make_checkpoint("t", 1))
        operations = {
            "put": lambda: cp.put(make_checkpoint("t", 1, state={"lost": True})),
            "prune": lambda: cp.prune("t", before_step=5),
            "delete_thread": lambda: cp.delete_thread("t"),
        }
        await admin.execute_command("CLIENT", "PAUSE", 5_000, "WRITE")
        try:
            task = asyncio.ensure_future(operations[call]())
            await _kill_when_blocked(admin, name)
        finally:
            await admin.execute_command("CLIENT", "UNPAUSE")
        with pytest.raises(StoreUnavailable) as info:
            await task
        assert info.value.retryable and isinstance(info.value.__cause__, RedisConnectionError)
        assert [(c.step, c.revision, c.state) async for c in cp.history("t")] == [
            (0, 1, {"step": 0}),
            (1, 1, {"step": 1}),
        ]
        await cp.put(make_checkpoint("t", 1), if_revision=1)
        assert await cp.prune("t", before_step=1) == 1


async def test_unreachable_server_is_store_unavailable() -> None:
    async with RedisCheckpointer("redis://127.0.0.1:1/0", prefix="nowhere") as cp:
        with pytest.raises(StoreUnavailable) as info:
            await cp.get("t")
        assert isinstance(info.value.__cause__, RedisConnectionError)


# -- corruption ------------------------------------------------------------------


async def test_damaged_metadata_summary_and_types_raise_corrupted(
    admin: aioredis.Redis, prefix: str
) -> None:
    s, d, h = thread_keys(prefix, "", "t")
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
        other = await admin.hget(thread_keys(prefix, "", "u")[1], b"%020d" % 0)
        await admin.hset(d, b"%020d" % 0, other)
        with pytest.raises(CheckpointCorrupted):
            await cp.get("t", 0)
        await admin.set(h, b"{not json")
        with pytest.raises(CheckpointCorrupted):
            await cp.list_threads()
        await admin.zadd(namespace_keys(prefix, "")[0], {b"\xff": 0})
        with pytest.raises(CheckpointCorrupted):
            await cp.list_threads_page()
        await admin.unlink(s)
        await admin.set(s, b"a string, not a sorted set")
        with pytest.raises(CheckpointCorrupted):
            await cp.get("t")
        assert (await cp.get("u")) is not None
