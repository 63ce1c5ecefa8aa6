"""A store written in Redis layout 1 keeps working once this code opens it.

Layout 1 is written here key by key, as its scripts wrote it: the step index
and data hash of each thread (metadata ``revision:write-id:instant:summary``
with a plain JSON summary), the thread's summary in its own ``:h`` key, and
the namespace's thread index and expiry set. No status or due index.
"""

from __future__ import annotations

import os
from typing import Any, cast

import orjson
import pytest
import redis.asyncio as aioredis

from agentflow.checkpoint.redis import Keys, RedisCheckpointer, migration
from agentflow.checkpoint.redis.keys import sortable_instant
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import IncompatibleSchema
from tests.backends.redis import REDIS_URL, admin_session, assert_consistent, scratch_prefix

NOW = "2026-06-01T12:00:00Z"


admin = pytest.fixture(admin_session)
prefix = pytest.fixture(scratch_prefix)


def _legacy_summary(prefix: str, namespace: str, thread: str) -> bytes:
    """The key layout 1 kept a thread's summary in."""
    return Keys(prefix, namespace).thread(thread)[0][:-1] + b"h"


def _info_json(step: int, fields: dict[str, Any]) -> bytes:
    done = not fields["next"] and not fields["interrupted"]
    summary = {
        "latest_step": step,
        "interrupted": fields["interrupted"],
        "done": done,
        "ts": fields["ts"],
        "wake_at": fields["wake_at"],
    }
    return orjson.dumps(summary)


async def _write_layout1(
    admin: aioredis.Redis,
    prefix: str,
    namespace: str,
    thread: str,
    steps: list[dict[str, Any]],
    *,
    revision: int = 1,
) -> None:
    """``thread`` with one step per entry of ``steps`` (checkpoint fields)."""
    s, d = Keys(prefix, namespace).thread(thread)
    for step, fields in enumerate(steps):
        payload = {"v": 1, "thread": thread, "step": step, "state": {"step": step}}
        payload |= {"parent": None, "interrupt_node": None, "interrupt_payload": None}
        payload |= {"extra": {}, **fields}
        member = b"%020d" % step
        instant = sortable_instant(parse_instant(fields["ts"]))
        meta = b"%d:%s:%s:%s" % (revision, os.urandom(16).hex().encode(), instant, b"")
        meta += _info_json(step, fields)
        await admin.zadd(s, {member: 0})
        await admin.hset(d, mapping={member: orjson.dumps(payload), member + b"m": meta})
    summary = _info_json(len(steps) - 1, steps[-1])
    await admin.set(_legacy_summary(prefix, namespace, thread), summary)
    await admin.zadd(Keys(prefix, namespace).threads[0], {thread.encode(): 0})


def _fields(ts: str, next: tuple[str, ...] = ("n",), **more: Any) -> dict[str, Any]:
    return {"ts": ts, "next": list(next), "interrupted": False, "wake_at": None, **more}


async def _threads_of(cp: RedisCheckpointer, **query: Any) -> list[str]:
    return [info.thread for info in (await cp.list_threads_page(**query)).threads]


async def test_a_layout1_store_is_migrated_on_first_use(admin: aioredis.Redis, prefix: str) -> None:
    day = "2026-01-01T00:00:00Z"
    wake = "2026-06-01T13:00:00+02:00"  # 11:00Z: due at NOW
    await _write_layout1(admin, prefix, "", "run", [_fields(day), _fields(day)], revision=3)
    await _write_layout1(admin, prefix, "", "human", [_fields(day, interrupted=True)])
    await _write_layout1(admin, prefix, "", "wait", [_fields(day, interrupted=True, wake_at=wake)])
    await _write_layout1(admin, prefix, "", "fin", [_fields(day, next=())])
    # step 1 is older than step 0: an older_than prune makes step 0 the latest
    older = [
        _fields("2026-01-02T00:00:00Z", interrupted=True, wake_at=wake),
        _fields("2025-12-31T00:00:00Z"),
    ]
    await _write_layout1(admin, prefix, "", "pr", older)
    await _write_layout1(admin, prefix, "acme", "other", [_fields(day)])
    legacy = _legacy_summary(prefix, "", "run")

    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        infos = await cp.list_threads()
        assert [(i.thread, i.latest_step, i.status) for i in infos] == [
            ("fin", 0, "done"),
            ("human", 0, "interrupted"),
            ("pr", 1, "running"),
            ("run", 1, "running"),
            ("wait", 0, "waiting"),
        ]
        assert infos[-1].wake_at == wake and infos[0].ts == day
        assert await admin.exists(legacy) == 0
        assert await admin.get(Keys(prefix, "").version) == b"3"
        assert await _threads_of(cp, status="running") == ["pr", "run"]
        assert await _threads_of(cp, status="waiting") == ["wait"]
        assert [i.thread for i in (await cp.list_due(NOW)).threads] == ["wait"]

        got = await cp.get("run")
        assert got is not None and (got.step, got.revision, got.state) == (1, 3, {"step": 1})
        assert [c.revision async for c in cp.history("run")] == [3, 3]
        await cp.put(got, if_revision=3)
        assert [c.revision async for c in cp.history("run")] == [3, 4]

        assert await cp.prune("pr", older_than="2026-01-01T00:00:00Z") == 1
        (pr,) = [i for i in await cp.list_threads() if i.thread == "pr"]
        assert (pr.latest_step, pr.status, pr.wake_at) == (0, "waiting", wake)
        assert [i.thread for i in (await cp.list_due(NOW)).threads] == ["pr", "wait"]
        await cp.delete_thread("fin")
        assert await _threads_of(cp, status="done") == []
        await assert_consistent(admin, prefix, "", ["fin", "human", "pr", "run", "wait"])

    other_summary = _legacy_summary(prefix, "acme", "other")
    assert await admin.exists(other_summary) == 1  # a namespace migrates when it is opened
    async with RedisCheckpointer(REDIS_URL, prefix=prefix, namespace="acme") as acme:
        assert await _threads_of(acme, status="running") == ["other"]
    assert await admin.exists(other_summary) == 0


async def test_migration_pages_the_index_and_keeps_newer_summaries(
    admin: aioredis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(migration, "_PAGE", 2)
    version = Keys(prefix, "").version
    day = "2026-01-01T00:00:00Z"
    for i in range(5):
        await _write_layout1(admin, prefix, "", f"t{i}", [_fields(day)])
    # a thread whose summary expired with its keys: nothing left to migrate
    await admin.zadd(Keys(prefix, "").threads[0], {b"gone": 0})
    await admin.zadd(Keys(prefix, "").threads[1], {b"gone": 1})
    # a layout-2 write that lands before the migration reaches its thread
    await admin.set(version, b"3")
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as early:
        await early.put(make_checkpoint("t3", 1))
    await admin.delete(version)
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        infos = await cp.list_threads()
    assert [(i.thread, i.latest_step, i.status) for i in infos] == [
        ("t0", 0, "running"),
        ("t1", 0, "running"),
        ("t2", 0, "running"),
        ("t3", 1, "done"),
        ("t4", 0, "running"),
    ]
    assert {cast(bytes, k) async for k in admin.scan_iter(match=f"{prefix}:*:h")} == set()
    assert await admin.get(version) == b"3"


async def test_a_newer_layout_is_refused_and_left_alone(admin: aioredis.Redis, prefix: str) -> None:
    version = Keys(prefix, "").version
    await admin.set(version, b"4")
    async with RedisCheckpointer(REDIS_URL, prefix=prefix) as cp:
        for call in (cp.get("t"), cp.list_threads()):
            with pytest.raises(IncompatibleSchema):
                await call
        with pytest.raises(IncompatibleSchema):
            await cp.put(make_checkpoint("t", 0))
    assert {cast(bytes, k) async for k in admin.scan_iter(match=f"{prefix}:*")} == {version}
