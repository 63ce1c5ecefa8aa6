"""A store written by agentflow before the one-store refactor (checkpoint layout 2
beside durable layout 1) opens as one store of layout 3 and goes on.

The data is tests/data/migration/redis/dump.json, made by the old code itself
(make_dump.py beside it, run from a worktree of commit aeb9750): in namespace
``acme``, sealed, a run paused on a human interrupt, a run waiting for
reconciliation after a lost reply and three events (one of a child run); in
the default namespace a finished run.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentflow.checkpoint.redis import Keys, RedisCheckpointer
from agentflow.checkpoint.redis.keys import LAYOUT
from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable import OperationState, ReconciliationDecision
from agentflow.durable.enums import CheckpointStatus
from agentflow.errors import CheckpointCorrupted, IncompatibleSchema
from tests.backends.redis import REDIS_URL, admin_session, assert_consistent, scratch_prefix
from tests.runtime import graphs

DUMP = Path(__file__).parents[1] / "data" / "migration" / "redis" / "dump.json"
admin = pytest.fixture(admin_session)
prefix = pytest.fixture(scratch_prefix)


def _dump() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DUMP.read_text())
    return loaded


async def _load(admin: aioredis.Redis, prefix: str) -> None:
    """Every key of the dump under ``prefix``, as the old code left it."""

    def raw(text: str) -> bytes:
        return base64.b64decode(text)

    for entry in _dump()["keys"]:
        key, value = prefix.encode() + raw(entry["key"]), entry["value"]
        if entry["type"] == "string":
            await admin.set(key, raw(value))
        elif entry["type"] == "hash":
            await admin.hset(key, mapping={raw(f): raw(v) for f, v in value.items()})
        else:
            await admin.zadd(key, {raw(member): score for member, score in value})


@pytest.fixture
async def old(admin: aioredis.Redis, prefix: str) -> AsyncIterator[str]:
    """A prefix holding the old layout."""
    await _load(admin, prefix)
    yield prefix


def _ring() -> KeyRing:
    spec = _dump()["keyring"]
    return KeyRing.from_source(lambda: spec)


async def test_the_old_layout_reads_back_whole_as_one_store(
    admin: aioredis.Redis, old: str
) -> None:
    acme, default = Keys(old, "acme"), Keys(old, "")
    assert await admin.mget(acme.version, acme.runs[2]) == [b"2", b"1"]
    async with RedisCheckpointer(REDIS_URL, prefix=old, namespace="acme", sealing=_ring()) as store:
        listed = {i.thread: i for i in await store.list_threads()}
        assert await admin.mget(acme.version, acme.runs[2]) == [LAYOUT, LAYOUT]
        assert {t: i.status for t, i in listed.items()} == {
            "ambiguous": "reconciliation_required",
            "paused": "interrupted",
        }
        assert listed["ambiguous"].run_status == "reconciliation_required"
        waiting = await store.list_threads_page(status="reconciliation_required")
        assert [i.thread for i in waiting.threads] == ["ambiguous"]
        assert (await store.list_threads_page(status="running")).threads == []
        # checkpoints, sealed with the ring: every step of both runs
        paused = await store.get("paused")
        assert paused is not None and paused.interrupted and paused.interrupt_node == "ask"
        assert paused.state["log"] == ["prepare"]
        assert [c.step async for c in store.history("paused")] == [0, 1, 2]
        raw = await admin.hget(acme.thread("paused")[1], b"%020d" % paused.step)
        assert isinstance(raw, bytes) and b"prepare" not in raw
        # records, with their journals
        record = await store.load("ambiguous")
        assert record is not None and record.status is CheckpointStatus.RECONCILIATION_REQUIRED
        (call,) = record.tool_journal
        assert (call.tool_name, call.state) == ("charge", OperationState.AMBIGUOUS)
        held = await store.load("paused")
        assert held is not None and held.status is CheckpointStatus.RUNNING
        assert held.claim_token is None and held.cycle_index == 1
        assert [run.key for run in (await store.list_runs()).runs] == ["ambiguous", "paused"]
        # events, the child's through its parent too
        assert [e.event_id for e in (await store.replay("paused")).events] == [
            "evt-paused-1",
            "evt-paused-2",
        ]
        family = await store.replay("paused", include_children=True)
        assert [e.event_id for e in family.events] == [
            "evt-paused-1",
            "evt-child-1",
            "evt-paused-2",
        ]
        assert family.events[1].event["parent_run_id"] == "paused"
        await store.delete_thread("child")  # its event leaves the parent's index
        family = await store.replay("paused", include_children=True)
        assert [e.event_id for e in family.events] == ["evt-paused-1", "evt-paused-2"]
        await assert_consistent(admin, old, "acme", ["ambiguous", "paused"])
    async with RedisCheckpointer(REDIS_URL, prefix=old, namespace="acme") as unsealed:
        with pytest.raises(CheckpointCorrupted):
            await unsealed.get("paused")
    async with RedisCheckpointer(REDIS_URL, prefix=old) as plain:
        (done,) = await plain.list_threads()
        assert await admin.get(default.version) == LAYOUT
        assert (done.thread, done.status) == ("plain", "done")
        finished = await plain.load("plain")
        assert finished is not None and finished.status is CheckpointStatus.COMPLETED


async def test_the_old_runs_resume_through_the_runtime(admin: aioredis.Redis, old: str) -> None:
    async with RedisCheckpointer(REDIS_URL, prefix=old, namespace="acme", sealing=_ring()) as store:
        approval = graphs.approval_graph().compile(store)
        answered = await approval.resume("paused", "yes")
        assert answered.status == "done"
        assert answered.state["log"] == ["prepare", "answer yes", "finish"]
        lost = graphs.lost_reply_graph().compile(store)
        record = await store.load("ambiguous")
        assert record is not None
        (call,) = record.tool_journal
        # the operator saw the charge in the ledger: no second charge
        decision = ReconciliationDecision.replay_result({"charged": 700})
        await lost.reconcile("ambiguous", call.operation_id, decision, attempt=1)
        settled = await lost.resume("ambiguous")
        assert settled.status == "done" and settled.state["receipt"] == {"charged": 700}
        statuses = {i.thread: i.status for i in await store.list_threads()}
        assert statuses == {"ambiguous": "done", "paused": "done"}


async def test_processes_migrating_at_once_agree(admin: aioredis.Redis, old: str) -> None:
    stores = [RedisCheckpointer(REDIS_URL, prefix=old, namespace="acme") for _ in range(4)]
    try:
        pages = await asyncio.gather(
            *(s.list_threads_page(status="reconciliation_required") for s in stores)
        )
        assert [[i.thread for i in page.threads] for page in pages] == [["ambiguous"]] * 4
        await assert_consistent(admin, old, "acme", ["ambiguous", "paused"])
    finally:
        for store in stores:
            await store.close()


async def test_a_newer_durable_layout_is_refused_and_left_alone(
    admin: aioredis.Redis, old: str
) -> None:
    acme = Keys(old, "acme")
    await admin.set(acme.runs[2], b"4")
    before = {key: await admin.dump(key) async for key in admin.scan_iter(match=f"{old}:*")}
    async with RedisCheckpointer(REDIS_URL, prefix=old, namespace="acme") as store:
        with pytest.raises(IncompatibleSchema):
            await store.load("paused")
        with pytest.raises(IncompatibleSchema):
            await store.get("paused")
    after = {key: await admin.dump(key) async for key in admin.scan_iter(match=f"{old}:*")}
    assert after == before
