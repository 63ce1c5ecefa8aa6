"""The Redis store as one thing: commit_step and a thread's delete are one script
each (seen with MONITOR and in the append-only file), a refused or failing one
writes nothing, re-sent ones land once, leases are judged on the server's
clock, and a thread's status comes from its record in O(page) listings."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentflow.checkpoint.redis import Keys, RedisCheckpointer, from_url
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.durable import event_payload_digest
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import ClaimActive, DurableCorrupted, DurableError
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import claimed, take
from agentflow.errors import CheckpointConflict, CheckpointCorrupted
from tests.backends.redis import (
    REDIS_URL,
    admin_session,
    assert_consistent,
    by_client,
    by_script,
    monitored,
    private_redis,
    scratch_prefix,
)

admin = pytest.fixture(admin_session)
prefix = pytest.fixture(scratch_prefix)
_WRITES = frozenset({"HSET", "HDEL", "ZADD", "ZREM", "SET", "UNLINK", "PEXPIREAT", "PERSIST"})


async def _ambiguous(store: Store, key: str) -> DurableCheckpoint:
    """A record of ``key`` suspended with an ambiguous call: reconciliation_required."""
    record = await claimed(store, key)
    entry = make_tool_entry(key, 1).start()
    record = await store.record_operations(
        record, [entry, entry.mark_ambiguous()], claim_token="owner-a"
    )
    return await store.suspend(record, claim_token="owner-a")


async def _append(store: Store, event_id: str, **event: Any) -> None:
    await store.append_once(event_id, event_payload_digest(event), event)


async def test_commit_step_is_one_script_and_a_refused_one_writes_nothing(
    tmp_path: Path,
) -> None:
    async with monitored(tmp_path) as (url, feed), RedisCheckpointer(url) as store:
        await store.put(make_checkpoint("t", 0, next=("charge",)))
        record = await claimed(store, "t")
        started = make_tool_entry("t", 1).start()
        record = await store.record_operations(record, [started], claim_token="owner-a")
        settled = started.succeed({"charged": 12})
        step = make_checkpoint("t", 1, next=("next",))
        stored, sent = await feed.during(
            store.commit_step(step, record, [settled], claim_token="owner-a")
        )
        assert isinstance(stored, DurableCheckpoint) and stored.revision == record.revision + 1
        assert by_client(sent) == ["EVALSHA"]
        # the record's hash and the step's data and index, then the summary: one script
        hset = [s.args[1] for s in sent if s.lua and s.name == "HSET"]
        run, (index, data) = Keys("agentflow", "").run("t"), Keys("agentflow", "").thread("t")
        assert hset == [run, data, Keys("agentflow", "").threads[2]]
        assert [s.args[1] for s in sent if s.lua and s.name == "ZADD"] == [index]
        for refused in (
            store.commit_step(make_checkpoint("t", 2), record, [], claim_token="owner-a"),
            store.commit_step(make_checkpoint("t", 1), stored, [], claim_token="owner-a"),
        ):
            error, sent = await feed.during(refused)
            assert isinstance(error, DurableError | CheckpointConflict), error
            assert by_client(sent) == ["EVALSHA"]
            assert not _WRITES & set(by_script(sent)), by_script(sent)
        loaded = await store.load("t")
        assert loaded is not None and loaded.to_dict() == stored.to_dict()
        assert [c.step async for c in store.history("t")] == [0, 1]


async def test_a_commit_step_is_one_transaction_of_the_append_only_file(tmp_path: Path) -> None:
    """With ``appendfsync always`` Redis writes and fsyncs each transaction before it
    replies: a commit_step costs one of them, as a put does."""
    async with (
        private_redis(tmp_path, "--appendonly", "yes", "--appendfsync", "always") as url,
        RedisCheckpointer(url) as store,
    ):
        await store.put(make_checkpoint("t", 0, next=("charge",)))
        record = await claimed(store, "t")
        (aof,) = sorted((tmp_path / "appendonlydir").glob("*.incr.aof"))
        for step in range(1, 4):
            before = aof.read_bytes()
            started = make_tool_entry("t", 1, step).start()
            record = await store.commit_step(
                make_checkpoint("t", step, next=("n",)), record, [started], claim_token="owner-a"
            )
            added = aof.read_bytes()[len(before) :]
            assert added.count(b"MULTI\r\n") == added.count(b"EXEC\r\n") == 1
            assert added.startswith(b"*1\r\n$5\r\nMULTI\r\n")


async def test_a_failing_commit_step_writes_nothing(admin: aioredis.Redis, prefix: str) -> None:
    keys = Keys(prefix, "")
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
        await store.put(make_checkpoint("t", 0, next=("charge",)))
        record = await claimed(store, "t")
        due = keys.threads[4]
        await admin.set(due, b"not a sorted set")  # the waiting step would join it
        run = await admin.hgetall(keys.run("t"))
        waiting = make_checkpoint(
            "t", 1, next=("n",), interrupted=True, wake_at="2030-01-01T00:00:00Z"
        )
        with pytest.raises(CheckpointCorrupted):
            await store.commit_step(waiting, record, [], claim_token="owner-a")
        assert await admin.hgetall(keys.run("t")) == run
        assert await store.get("t", 1) is None
        await admin.unlink(due)
        stored = await store.commit_step(waiting, record, [], claim_token="owner-a")
        assert stored.revision == record.revision + 1
        assert [i.thread for i in (await store.list_due("2031-01-01T00:00:00Z")).threads] == ["t"]


async def test_a_re_sent_commit_step_answers_as_it_did(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-sent after its reply was lost, even once the record was written again:
    it writes nothing and answers that it was applied."""
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
        await store.put(make_checkpoint("t", 0, next=("charge",)))
        record = await claimed(store, "t")
        script, sent = store._lua["commit"], []

        async def kept(*, keys: list[bytes], args: list[bytes]) -> Any:
            sent.append((keys, args))
            return await script(keys=keys, args=args)

        monkeypatch.setitem(store._lua, "commit", kept)
        stored = await store.commit_step(
            make_checkpoint("t", 1, next=("n",)), record, [], claim_token="owner-a"
        )
        later = await store.progress(stored, claim_token="owner-a")
        ((keys, args),) = sent
        assert (await script(keys=keys, args=args))[0] == 1
        loaded, step = await store.load("t"), await store.get("t", 1)
        assert loaded is not None and loaded.revision == later.revision
        assert step is not None and step.revision == 1


async def test_delete_is_judged_on_the_servers_clock(
    admin: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_ns = time.time_ns
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
        await store.put(make_checkpoint("t", 0))
        await claimed(store, "t")
        monkeypatch.setattr(time, "time_ns", lambda: real_ns() + 86_400_000 * 1_000_000)
        monkeypatch.setattr(time, "time", lambda: real_ns() / 1e9 + 86_400)
        with pytest.raises(ClaimActive):  # this machine's clock is a day ahead: no matter
            await store.delete_thread("t")
        seconds, micros = await admin.time()
        run = Keys(prefix, "").run("t")
        await admin.hset(run, "lease_expires_at_ms", str(seconds * 1000 + micros // 1000 - 1))
        monkeypatch.setattr(time, "time_ns", lambda: real_ns() - 86_400_000 * 1_000_000)
        await store.delete_thread("t")  # lapsed on the server's clock
        assert await store.load("t") is None and await store.get("t") is None
        await admin.hset(run, "lease_expires_at_ms", b"soon")  # a damaged record
        await admin.hset(run, "revision", b"1")
        with pytest.raises(DurableCorrupted):
            await store.delete_thread("t")
        await store.delete_thread("t", force=True)
        assert await admin.exists(run) == 0


async def test_a_thread_delete_takes_its_events_out_of_their_parents(
    admin: aioredis.Redis, prefix: str
) -> None:
    keys = Keys(prefix, "")
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
        await _append(store, "e-parent", run_id="p")
        await _append(store, "e-child", run_id="c", parent_run_id="p")
        await _append(store, "e-other", run_id="o", parent_run_id="p")
        await store.put(make_checkpoint("c", 0))
        await store.create(make_record("c"))
        family = await store.replay("p", include_children=True)
        assert [e.event_id for e in family.events] == ["e-parent", "e-child", "e-other"]
        assert await store.delete("c") is True
        family = await store.replay("p", include_children=True)
        assert [e.event_id for e in family.events] == ["e-parent", "e-other"]
        events = await admin.hkeys(keys.events[2])
        assert sorted(events) == [b"1", b"1m", b"3", b"3m", b"3p"]
        assert sorted(await admin.hkeys(keys.events[1])) == [b"e-other", b"e-parent"]
        await _append(store, "e-child", run_id="c", parent_run_id="p")  # accepted anew
        assert [e.event_id for e in (await store.replay("c")).events] == ["e-child"]


async def test_a_record_imposes_its_status_before_and_after_the_threads_steps(
    admin: aioredis.Redis, prefix: str
) -> None:
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
        await _ambiguous(store, "early")  # no checkpoint yet: nothing listed
        assert (await store.list_threads_page()).threads == []
        await store.put(make_checkpoint("early", 0, next=("charge",)))
        (info,) = (await store.list_threads_page(status="reconciliation_required")).threads
        assert (info.thread, info.run_status, info.latest_step) == (
            "early",
            "reconciliation_required",
            0,
        )
        await store.delete_thread("early")
        await store.put(make_checkpoint("early", 0, next=("charge",)))  # the record is gone
        (info,) = (await store.list_threads_page(status="running")).threads
        assert info.run_status is None
        await assert_consistent(admin, prefix, "", ["early"])


async def test_status_pages_read_their_own_threads(
    admin: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2,000 running threads and 3 awaiting reconciliation: a page of the 3 reads 3."""
    keys = Keys(prefix, "")
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
        for key in ("q1", "q2", "q3"):
            await store.put(make_checkpoint(key, 0, next=("charge",)))
            await _ambiguous(store, key)
        summary = await admin.hget(keys.threads[2], b"q1")
        assert isinstance(summary, bytes)
        running = b"r" + summary[1:]
        names = [b"run-%04d" % i for i in range(2_000)]
        await admin.hset(keys.threads[2], mapping=dict.fromkeys(names, running))
        await admin.zadd(keys.threads[0], dict.fromkeys(names, 0))
        await admin.zadd(keys.threads[3], {b"r" + name: 0 for name in names})
        script, read = store._lua["page"], []

        async def counted(*, keys: list[bytes], args: tuple[Any, ...]) -> Any:
            reply = await script(keys=keys, args=args)
            read.append(len(reply) // 3)
            return reply

        monkeypatch.setitem(store._lua, "page", counted)
        page = await store.list_threads_page(status="reconciliation_required", limit=2)
        assert [i.thread for i in page.threads] == ["q1", "q2"] and sum(read) == 3
        assert page.next_cursor is not None
        rest = await store.list_threads_page(
            status="reconciliation_required", cursor=page.next_cursor
        )
        assert [i.thread for i in rest.threads] == ["q3"]
        listed = await store.list_threads_page(status="running", limit=3)
        assert [i.thread for i in listed.threads] == ["run-0000", "run-0001", "run-0002"]
        everything = {i.thread: i.status for i in await store.list_threads(limit=10)}
        assert everything["q1"] == "reconciliation_required"
        taken = await take(store, "owner-b", key="q2", mode=ClaimMode.RECOVERY)
        assert taken.claim_token == "owner-b"
        still = await store.list_threads_page(status="reconciliation_required")
        assert [i.thread for i in still.threads] == ["q1", "q3"]


async def test_database_names_the_server_and_prefix(prefix: str) -> None:
    stores = [
        RedisCheckpointer(REDIS_URL, prefix=prefix),
        from_url(REDIS_URL, namespace="other"),
        RedisCheckpointer("redis://:hunter2@127.0.0.1:6379/0", prefix=prefix),
        RedisCheckpointer("redis://127.0.0.1:6379/1", prefix=prefix),
        RedisCheckpointer(REDIS_URL, prefix=f"{prefix}-b"),
    ]
    try:
        names = [store.database for store in stores]
        assert names[0] == names[2] and "hunter2" not in names[2]
        assert names[0] != names[1] and names[0] != names[3] and names[0] != names[4]
        assert names[0] == f"redis://127.0.0.1:6379/0 prefix={prefix!r}"
    finally:
        for store in stores:
            await store.close()
