"""Redis-specific behaviour beyond the conformance suite, on the real server."""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentflow.checkpoint import open_store
from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.redis import Keys, RedisCheckpointer
from agentflow.checkpoint.redis import store as redis_module
from agentflow.checkpoint.redis.keys import instant_bound, sortable_instant
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import (
    CheckpointConflict,
    InvalidArgument,
    InvalidCursor,
    InvalidThreadId,
)
from tests.backends.redis import (
    REDIS_URL,
    admin_session,
    assert_consistent,
    connections,
    drop_prefix,
    named_url,
    scratch_prefix,
    stored_keys,
    unique_prefix,
)

admin = pytest.fixture(admin_session)
prefix = pytest.fixture(scratch_prefix)
HOSTILE = ["a:b:cp:1", "*", "{x}", "}{", "\\", "a.b", "a", "b", "?[a]", "t.YQ.Yg"]
NOW = "2026-06-01T12:00:00Z"


def _waiting(thread: str, step: int, wake_at: str, **fields: Any) -> Checkpoint:
    return make_checkpoint(thread, step, next=("n",), interrupted=True, wake_at=wake_at, **fields)


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
    owned = RedisCheckpointer(named_url(name), prefix=prefix)
    assert (await owned.get("t")) is not None
    assert len(await connections(admin, name)) == 1
    await owned.close()
    await owned.close()
    for _ in range(50):
        if not await connections(admin, name):
            break
        await asyncio.sleep(0.01)
    assert await connections(admin, name) == []


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
    assert await stored_keys(admin, f"{prefix}:") == set()


async def test_open_store_opens_a_namespaced_checkpointer(prefix: str) -> None:
    url = f"{REDIS_URL}?client_name=aftest-open-store"
    async with RedisCheckpointer(REDIS_URL, prefix="agentflow", namespace=prefix) as direct:
        await direct.put(make_checkpoint("t", 0))
        opened = open_store(url, namespace=prefix)
        assert isinstance(opened, RedisCheckpointer)
        async with opened:
            got = await opened.get("t")
            assert got is not None and got.revision == 1
        await direct.delete_thread("t")


# -- key structure ------------------------------------------------------------


async def test_hostile_ids_never_shape_or_share_keys(admin: aioredis.Redis, prefix: str) -> None:
    namespaces = (None, "a", "a.b", "{x}", "*")
    pairs = [(ns, t) for ns in namespaces for t in HOSTILE]
    for ns, thread in pairs:
        async with RedisCheckpointer(REDIS_URL, prefix=prefix, namespace=ns) as cp:
            await cp.put(make_checkpoint(thread, 0, state={"ns": ns, "t": thread}))
    owner: dict[bytes, tuple[str | None, str]] = {}
    for ns, thread in pairs:
        keys = Keys(prefix, ns or "").thread(thread)
        tags = {key[key.index(b"{") + 1 : key.index(b"}")] for key in keys}
        assert len(tags) == 1 and next(iter(tags)).startswith(b"t.")
        for key in keys:
            assert key.count(b"{") == key.count(b"}") == 1
            assert not set(key[len(prefix) :]) & set(b"*?[]\\")
            assert owner.setdefault(key, (ns, thread)) == (ns, thread)
    expected = {k for ns, t in pairs for k in Keys(prefix, ns or "").thread(t)}
    for ns in namespaces:
        layout = Keys(prefix, ns or "")
        idx, _, sums, st, _, _ = layout.threads
        expected |= {idx, sums, st, layout.version, layout.runs[2]}
    assert await stored_keys(admin, f"{prefix}:") == expected
    for ns, thread in pairs:
        async with RedisCheckpointer(REDIS_URL, prefix=prefix, namespace=ns) as cp:
            got = await cp.get(thread)
            assert got is not None and got.state == {"ns": ns, "t": thread}
            assert [i.thread for i in await cp.list_threads()] == sorted(HOSTILE)


async def test_prefixes_that_extend_each_other_stay_apart(
    admin: aioredis.Redis, prefix: str
) -> None:
    variants = [prefix, f"{prefix}:", f"{prefix}:a", f"{prefix}*", f"{prefix}:t.", f"{prefix}:n."]
    variants += [f"{prefix}:secret", f"{prefix}:s"]
    for i, p in enumerate(variants):
        async with RedisCheckpointer(REDIS_URL, prefix=p) as cp:
            await cp.put(make_checkpoint("t", 0, state={"i": i}))
            await cp.put(make_checkpoint("u", 0))
            assert (await cp.list_threads_page(limit=1)).next_cursor is not None
    for i, p in enumerate(variants):
        async with RedisCheckpointer(REDIS_URL, prefix=p) as cp:
            got = await cp.get("t")
            assert got is not None and got.state == {"i": i} and got.revision == 1
            page = await cp.list_threads_page(limit=1)
            assert page.next_cursor is not None
            rest = await cp.list_threads_page(cursor=page.next_cursor)
            assert [info.thread for info in rest.threads] == ["u"]
            await cp.delete_thread("t")
            await cp.delete_thread("u")
            keys = Keys(p, "")
            await admin.unlink(*keys.threads, keys.version, keys.runs[2], keys.secret)
    assert await stored_keys(admin, prefix) == set()


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


async def test_instants_before_1970_never_reach_a_key(admin: aioredis.Redis, prefix: str) -> None:
    """Before year 1 an instant would shift to a negative, unsortable number."""
    early = ["0001-01-01T00:00:00+14:00", "0001-01-01T00:00:00Z", "1969-12-31T23:59:59.999999Z"]
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        for ts in early:
            with pytest.raises(InvalidArgument):
                await cp.put(make_checkpoint("t", 0, ts=ts))
            with pytest.raises(InvalidArgument):
                await cp.put(_waiting("t", 0, ts))
        assert await stored_keys(admin, f"{prefix}:") == set()
        await cp.put(_waiting("t", 0, "1970-01-01T00:00:00Z", ts="1970-01-01T00:00:00Z"))
        assert await cp.prune("t", older_than=early[0]) == 0
        far_east = timezone(timedelta(hours=14))
        assert (await cp.list_due(datetime(1, 1, 1, tzinfo=far_east))).threads == []
        assert [i.thread for i in (await cp.list_due(NOW)).threads] == ["t"]
        meta = await admin.hget(Keys(prefix, "").thread("t")[1], b"%020dm" % 0)
        assert isinstance(meta, bytes) and meta.split(b":")[2].isdigit()
    with pytest.raises(InvalidArgument):
        sortable_instant(-1)
    assert instant_bound(-(10**18)) == b"0" * 18 < sortable_instant(0)
    assert instant_bound(10**18) == b"9" * 18


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


async def test_a_resent_write_lands_once(prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver that re-sends a script after losing its reply must not bump twice."""
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        await cp.put(make_checkpoint("t", 0))
        script = cp._lua["put"]
        replies: list[Any] = []

        async def sent_twice(*, keys: list[bytes], args: tuple[bytes, ...]) -> Any:
            replies.append(await script(keys=keys, args=args))
            replies.append(await script(keys=keys, args=args))
            return replies[-1]

        monkeypatch.setitem(cp._lua, "put", sent_twice)
        await cp.put(make_checkpoint("t", 0, state={"again": True}))
        await cp.put(make_checkpoint("t", 1))
        assert replies == [[1, 2], [1, 2], [1, 1], [1, 1]]
        got = await cp.get("t", 0)
        assert got is not None and got.revision == 2 and got.state == {"again": True}
        assert [i.latest_step for i in await cp.list_threads()] == [1]


async def test_delete_and_prune_racing_puts_leave_no_orphans(
    admin: aioredis.Redis, prefix: str
) -> None:
    threads = ["r0", "r1", "r2"]
    rng = random.Random(3)
    async with RedisCheckpointer(REDIS_URL, prefix=prefix, namespace="race") as cp:

        async def writer(thread: str) -> None:
            for step in range(60):
                ts = f"2026-01-01T00:{step % 60:02d}:00+00:00"
                kind = step % 3
                if kind == 0:
                    await cp.put(make_checkpoint(thread, step % 20, ts=ts))
                elif kind == 1:
                    await cp.put(
                        _waiting(thread, step % 20, f"2026-01-01T01:{step:02d}:00Z", ts=ts)
                    )
                else:
                    await cp.put(make_checkpoint(thread, step % 20, ts=ts, next=("n",)))

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
        due = {i.thread for i in (await cp.list_due("2027-01-01T00:00:00Z")).threads}
        for thread in threads:
            latest = await cp.get(thread)
            assert (latest.step if latest else None) == (
                listed[thread].latest_step if thread in listed else None
            )
            assert (thread in due) == (latest is not None and latest.wake_at is not None)


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
        await cp.put(_waiting("t", 1, "2026-05-01T00:00:00Z", ts="2026-01-02T00:00:00Z"))
        await cp.put(make_checkpoint("t", 2, ts="2020-01-01T00:00:00Z", next=("n",)))
        assert [i.thread for i in (await cp.list_threads_page(status="running")).threads] == ["t"]
        assert await cp.prune("t", older_than="2021-01-01T00:00:00Z") == 1
        (info,) = await cp.list_threads()
        assert (info.latest_step, info.status, info.ts) == (1, "waiting", "2026-01-02T00:00:00Z")
        assert [i.thread for i in (await cp.list_due(NOW)).threads] == ["t"]
        assert (await cp.list_threads_page(status="running")).threads == []
        await assert_consistent(admin, prefix, "", ["t"])
        assert await cp.prune("t", before_step=5) == 2
        await assert_consistent(admin, prefix, "", ["t"])
        assert await admin.zcard(Keys(prefix, "").threads[0]) == 0
        assert (await cp.list_due(NOW)).threads == []


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


# -- listing costs and the cursor secret -------------------------------------------


async def test_due_and_status_pages_read_what_they_return(
    admin: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10,000 suspended threads, 200 of them due: a due pass reads about the
    due rows, and a status page about its own rows, not the others (the
    benchmark shows the same at 100,000 and 1,000)."""
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        waits = [(f"due-{i:04d}", f"2026-06-01T11:{i % 60:02d}:00Z") for i in range(200)]
        for first in range(0, len(waits), 50):
            await asyncio.gather(*(cp.put(_waiting(t, 0, w)) for t, w in waits[first : first + 50]))
        for i in range(10):
            await cp.put(make_checkpoint(f"run-{i}", 0, next=("n",)))
        later = "2030-01-01T00:00:00Z"
        info = b'{"latest_step":0,"interrupted":true,"done":false,"ts":"%s","wake_at":"%s"}'
        wake = sortable_instant(int(datetime.fromisoformat(later).timestamp()) * 10**6)
        summary = b"w" + wake + info % (later.encode(), later.encode())
        idx, _, sums, st, due = Keys(prefix, "").threads[:5]
        for first in range(0, 9_800, 4_900):  # as put writes them, in bulk
            names = [b"future-%06d" % i for i in range(first, first + 4_900)]
            await admin.hset(sums, mapping=dict.fromkeys(names, summary))
            await admin.zadd(idx, dict.fromkeys(names, 0))
            await admin.zadd(st, {b"w" + name: 0 for name in names})
            await admin.zadd(due, {wake + name: 0 for name in names})
        script, read = cp._lua["page"], []

        async def counted(*, keys: list[bytes], args: tuple[Any, ...]) -> Any:
            reply = await script(keys=keys, args=args)
            read.append(len(reply) // 3)  # thread, summary, imposed status
            return reply

        monkeypatch.setitem(cp._lua, "page", counted)
        seen: list[str] = []
        cursor: str | None = None
        while True:
            page = await cp.list_due(NOW, limit=20, cursor=cursor)
            seen += [info.thread for info in page.threads]
            if (cursor := page.next_cursor) is None:
                break
        assert seen == [t for t, _ in sorted(waits, key=lambda w: (w[1], w[0]))]
        assert sum(read) <= 2 * len(waits)
        read.clear()
        running = await cp.list_threads_page(limit=5, status="running")
        assert [i.thread for i in running.threads] == [f"run-{i}" for i in range(5)]
        assert sum(read) <= 6
        assert len(await cp.list_threads(limit=10_000)) == 10_000  # in several scripts


async def test_one_cursor_secret_per_prefix_even_when_created_at_once(
    admin: aioredis.Redis, prefix: str
) -> None:
    opened = [RedisCheckpointer(REDIS_URL, prefix=prefix) for _ in range(8)]
    try:
        secrets = await asyncio.gather(*(cp._cursor_secret() for cp in opened))
        assert len(set(secrets)) == 1 and len(secrets[0]) == 32
        assert await admin.get(Keys(prefix, "").secret) == secrets[0]
        for name in "abc":
            await opened[0].put(make_checkpoint(name, 0))
        cursor = (await opened[1].list_threads_page(limit=1)).next_cursor
        assert cursor is not None
        rest = await opened[2].list_threads_page(cursor=cursor)
        assert [i.thread for i in rest.threads] == ["b", "c"]
    finally:
        for cp in opened:
            await cp.close()
    other = unique_prefix()
    try:
        async with RedisCheckpointer(REDIS_URL, prefix=other) as foreign:
            for name in "abc":
                await foreign.put(make_checkpoint(name, 0))
            with pytest.raises(InvalidCursor):
                await foreign.list_threads_page(cursor=cursor)
    finally:
        await drop_prefix(admin, other)


# -- ttl -----------------------------------------------------------------------


async def _pttls(admin: aioredis.Redis, keys: list[bytes]) -> list[int]:
    return [await admin.pttl(key) for key in keys]


async def test_ttl_covers_every_key_and_is_refreshed(admin: aioredis.Redis, prefix: str) -> None:
    keys = Keys(prefix, "").thread("t")
    exp = Keys(prefix, "").threads[1]
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
    assert await _pttls(admin, keys) == [-1] * 2
    assert await admin.zscore(exp, b"t") is None


async def test_expired_threads_leave_every_listing(admin: aioredis.Redis, prefix: str) -> None:
    idx, exp = Keys(prefix, "").threads[:2]
    async with (
        RedisCheckpointer(REDIS_URL, prefix=prefix, ttl=0.2) as short,
        RedisCheckpointer(REDIS_URL, prefix=prefix) as forever,
    ):
        # more expired threads than one sweep removes
        for i in range(300):
            await short.put(_waiting(f"x{i:03d}", 0, "2026-01-01T00:00:00Z"))
        for name in ("a", "y", "z"):
            await forever.put(_waiting(name, 0, "2026-01-01T00:00:00Z"))
        await short.put(make_checkpoint("back", 0))
        await asyncio.sleep(0.3)
        assert await short.get("x000") is None and await short.get("back") is None
        await forever.put(make_checkpoint("back", 0))  # expired, then written for good
        page = await forever.list_threads_page(limit=2)
        assert [i.thread for i in page.threads] == ["a", "back"]
        assert page.next_cursor is not None
        rest = await forever.list_threads_page(limit=2, cursor=page.next_cursor)
        assert [i.thread for i in rest.threads] == ["y", "z"] and rest.next_cursor is None
        assert [i.thread for i in (await forever.list_due(NOW)).threads] == ["a", "y", "z"]
        waiting = await forever.list_threads_page(status="waiting")
        assert [i.thread for i in waiting.threads] == ["a", "y", "z"]
        for _ in range(3):
            await forever.list_threads()
        assert set(await admin.zrange(idx, 0, -1)) == {b"a", b"back", b"y", b"z"}
        assert await admin.zcard(exp) == 0
        await assert_consistent(admin, prefix, "", ["a", "back", "x000", "x299"])
