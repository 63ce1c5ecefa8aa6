"""The MongoDB store as one thing: a step's commit is one ordered command and one journal
sync, a refused one writes nothing, a thread's delete is refused on a lease live on the
server's clock, and a thread's status comes from its record, set by the record's own
update and listed through O(page) indexes."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import ClaimActive, DurableCorrupted, LeaseLost, RevisionConflict
from agentflow.durable.run.journal import OperationError
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LAPSED_MS, LIVE_MS, lapse, take
from agentflow.errors import CheckpointConflict
from agentflow.runtime import END, START, Graph, NodeContext
from tests.backends.mongodb import Commands, Doc, MongoStore
from tests.backends.mongodb import quiet_scratch as quiet_body
from tests.backends.mongodb import scratch as scratch_body

scratch = pytest.fixture(scratch_body)
quiet = pytest.fixture(quiet_body)


def _thread(key: str = "t") -> Doc:
    return {"_id": {"n": "", "t": key}}


async def _claimed(
    store: MongoCheckpointer, key: str = "t", lease_ms: int = LIVE_MS
) -> DurableCheckpoint:
    await store.create(make_record(key))
    return await take(store, "owner-a", key=key, lease_ms=lease_ms)


async def _journal_syncs(client: AsyncMongoClient[Doc]) -> int:
    status = await client.admin.command("serverStatus")
    return int(status["wiredTiger"]["log"]["log sync operations"])


async def test_a_step_commit_is_one_command_and_one_journal_sync(quiet: MongoStore) -> None:
    scratch = quiet
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri, event_listeners=[commands])
    steps = 20
    try:
        async with MongoCheckpointer(client=client, database=scratch.database) as store:
            await store.put(make_checkpoint("t", 0))
            record = await _claimed(store)
            commands.sent.clear()
            entry = make_tool_entry("t", 1).start()
            record = await store.commit_step(
                make_checkpoint("t", 1), record, [entry], claim_token="owner-a"
            )
            sent = list(commands.sent)
            before = await _journal_syncs(scratch.client)
            for step in range(2, steps + 2):
                entry = make_tool_entry("t", 1, step).start()
                record = await store.commit_step(
                    make_checkpoint("t", step), record, [entry], claim_token="owner-a"
                )
            together = await _journal_syncs(scratch.client) - before
            before = await _journal_syncs(scratch.client)
            for step in range(steps + 2, 2 * steps + 2):  # the same as the two writes
                entry = make_tool_entry("t", 1, step).start()
                record = await store.record_operations(record, [entry], claim_token="owner-a")
                await store.put(make_checkpoint("t", step), if_revision=0)
            apart = await _journal_syncs(scratch.client) - before
    finally:
        await client.close()
    assert [name for name, _ in sent] == ["update", "find"]  # the writes, then the kept lease
    update = sent[0][1]
    assert update["ordered"] is True and update["writeConcern"] == {"j": True}
    assert len(update["updates"]) == 3  # the record, the step, the summary: in this order
    assert update["updates"][0]["q"]["_id"] == {"n": "", "t": "t"}
    assert update["updates"][1]["q"]["_id"] == {"n": "", "t": "t", "s": 1}
    assert steps <= together <= steps + 2, together  # one sync a step (idle costs none)
    assert apart >= 2 * steps, apart


async def _stored(scratch: MongoStore) -> list[Doc]:
    return await scratch.raw.find({"_id.t": "t"}).sort("_id", 1).to_list()


async def test_a_refused_step_commit_writes_nothing(scratch: MongoStore) -> None:
    async with scratch.store() as store:
        await store.put(make_checkpoint("t", 0))
        stale = await _claimed(store, lease_ms=LAPSED_MS)
        entry = make_tool_entry("t", 1).start()
        fresh = await store.record_operations(stale, [entry], claim_token="owner-a")
        before = await _stored(scratch)
        with pytest.raises(RevisionConflict):  # a snapshot the store moved past
            await store.commit_step(make_checkpoint("t", 1), stale, [], claim_token="owner-a")
        assert await _stored(scratch) == before
        await lapse()
        recovered = await take(store, "owner-b", key="t", mode=ClaimMode.RECOVERY)
        before = await _stored(scratch)
        with pytest.raises(LeaseLost):  # a holder fenced by a recovery
            await store.commit_step(make_checkpoint("t", 1), fresh, [], claim_token="owner-a")
        assert await _stored(scratch) == before
        await scratch.raw.update_one(_thread(), {"$set": {"journal.tool": "damaged"}})
        before = await _stored(scratch)
        with pytest.raises(DurableCorrupted):  # the guard holds, the shape does not
            await store.commit_step(make_checkpoint("t", 1), recovered, [], claim_token="owner-b")
        assert await _stored(scratch) == before
        assert await store.get("t", 1) is None


async def test_a_step_that_exists_is_refused_after_the_record_was_written(
    scratch: MongoStore,
) -> None:
    """MongoDB commits each statement on its own (a standalone server has no
    transactions): the record goes first, so the refusal keeps the receipt, as
    docs/mongodb.md says."""
    async with scratch.store() as store:
        await store.put(make_checkpoint("t", 0))
        await store.put(make_checkpoint("t", 1, state={"first": True}))
        record = await _claimed(store)
        entry = make_tool_entry("t", 1).start()
        with pytest.raises(CheckpointConflict):
            await store.commit_step(make_checkpoint("t", 1), record, [entry], claim_token="owner-a")
        kept = await store.get("t", 1)
        loaded = await store.load("t")
        (listed,) = await store.list_threads()
    assert kept is not None and kept.state == {"first": True} and kept.revision == 1
    assert loaded is not None and loaded.revision == record.revision + 1
    assert [e.operation_id for e in loaded.tool_journal] == [entry.operation_id]
    assert (listed.latest_step, listed.status) == (1, "done")  # the stored step's summary


async def test_a_delete_is_decided_on_the_servers_clock(
    scratch: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With this process's clock a day ahead, a live lease still refuses the delete."""
    real_ns = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + 86_400 * 10**9)
    monkeypatch.setattr(time, "time", lambda: real_ns() / 1e9 + 86_400)
    async with scratch.store() as store:
        await store.put(make_checkpoint("t", 0))
        await _claimed(store, lease_ms=60_000)
        before = await _stored(scratch)
        with pytest.raises(ClaimActive):
            await store.delete_thread("t")
        assert await _stored(scratch) == before
        await scratch.raw.update_one(_thread(), {"$set": {"lease_expires_at_ms": 1}})
        await store.delete_thread("t")
        assert await _stored(scratch) == []


async def test_a_records_status_is_its_threads_in_the_same_update(scratch: MongoStore) -> None:
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri, event_listeners=[commands])
    try:
        async with MongoCheckpointer(client=client, database=scratch.database) as store:
            await store.put(make_checkpoint("t", 0, next=("charge",)))
            record = await _claimed(store)
            entry = make_tool_entry("t", 1).start()
            record = await store.record_operations(
                record, [entry, entry.mark_ambiguous()], claim_token="owner-a"
            )
            commands.sent.clear()
            record = await store.suspend(record, claim_token="owner-a")
            suspended = commands.names()
            imposed = (await scratch.raw.find_one(_thread()) or {}).get("rs")
            await store.put(make_checkpoint("t", 1, next=("charge",)))
            kept = (await scratch.raw.find_one(_thread()) or {}).get("rs")
            claimed = await take(store, "owner-b", key="t", mode=ClaimMode.RECOVERY)
            cleared = (await scratch.raw.find_one(_thread()) or {}).get("rs", "gone")
            failure = OperationError("aborted", "the operator aborted the call")
            settled = entry.mark_ambiguous().fail(failure)  # no finalize over an ambiguous call
            claimed = await store.record_operations(claimed, [settled], claim_token="owner-b")
            claimed.status = CheckpointStatus.FAILED
            claimed.terminal_result = {"status": "failed", "error": {"code": "aborted"}}
            await store.finalize_claimed(claimed, claim_token="owner-b")
            failed = (await scratch.raw.find_one(_thread()) or {}).get("rs")
            await store._delete_run("t", force=False)  # the record alone: the thread stays
            deleted = await scratch.raw.find_one(_thread())
            (listed,) = await store.list_threads()
    finally:
        await client.close()
    assert suspended == ["findAndModify"]
    assert (imposed, kept, cleared, failed) == (
        "reconciliation_required",
        "reconciliation_required",
        "gone",
        "failed",
    )
    assert deleted is not None and "rs" not in deleted and "body" not in deleted
    assert deleted["ls"] == 1 and (listed.status, listed.run_status) == ("running", None)


async def test_a_status_listing_reads_only_its_page(scratch: MongoStore) -> None:
    async with scratch.store(journal=False) as store:
        for n in range(200):
            await store.put(make_checkpoint(f"t-{n:03d}", 0, next=("charge",)))
        held = [f"t-{n:03d}" for n in range(5, 200, 40)]
        for key in held:
            record = await _claimed(store, key)
            entry = make_tool_entry(key, 1).start()
            record = await store.record_operations(
                record, [entry, entry.mark_ambiguous()], claim_token="owner-a"
            )
            await store.suspend(record, claim_token="owner-a")
        async with scratch.profiling() as ops:
            waiting = await store.list_threads_page(status="reconciliation_required", limit=2)
            after = await store.list_threads_page(
                status="reconciliation_required", limit=2, cursor=waiting.next_cursor
            )
            running = await store.list_threads_page(status="running", limit=10)
    queries = [op for op in ops if op["op"] == "query"]
    assert [i.thread for i in waiting.threads + after.threads] == held[:4]
    assert [i.thread for i in running.threads] == [
        f"t-{n:03d}" for n in range(11) if f"t-{n:03d}" not in held
    ]
    assert [op["planSummary"] for op in queries] == [
        "IXSCAN { tn: 1, rs: 1, tt: 1 }",
        "IXSCAN { tn: 1, rs: 1, tt: 1 }",
        "IXSCAN { tn: 1, st: 1, rs: 1, tt: 1 }",
    ]
    assert [op["docsExamined"] for op in queries] == [3, 3, 11]  # a page and one more
    assert all(op["keysExamined"] <= op["docsExamined"] + 1 for op in queries), queries


def _calling(idempotent: bool, calls: int, steps: int) -> Graph:
    """``steps`` graph steps, each making ``calls`` journaled tool calls."""

    async def step(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        for call in range(calls):
            arguments = {"i": state["i"], "call": call}
            await ctx.tool("charge", arguments, lambda _: {"ok": True}, idempotent=idempotent)
        return {"i": state["i"] + 1}

    def again(state: Mapping[str, Any]) -> str:
        return "step" if state["i"] < steps else END

    graph = Graph(f"calling-{idempotent}-{calls}").add_node("step", step)
    return graph.add_edge(START, "step").add_conditional_edges("step", again, ["step", END])


@pytest.mark.parametrize(
    ("idempotent", "calls", "least", "most"),
    [(False, 1, 2.0, 2.4), (True, 1, 1.0, 1.4), (False, 20, 1.05, 1.3)],
    ids=["at-most-once", "idempotent", "20-calls"],
)
async def test_journal_syncs_per_graph_step(
    quiet: MongoStore, idempotent: bool, calls: int, least: float, most: float
) -> None:
    """Through the runtime, per call: an at-most-once call's ``started`` entry and the
    step's commit (its receipt rides it) are two journal syncs; an idempotent call
    writes nothing before it goes out, so its step is one; in a node of 20 calls each
    receipt rides the next call's ``started`` entry and the last the step's commit.
    The run's claim and end add the rest."""
    scratch, steps = quiet, 20
    async with scratch.store() as store:
        await store.setup()
        # a lease far longer than the run: no renewal is due, whatever the load
        compiled = _calling(idempotent, calls, steps).compile(store, claim_ttl=timedelta(hours=1))
        before = await _journal_syncs(scratch.client)
        result = await compiled.run({"i": 0}, thread="t")
        syncs = await _journal_syncs(scratch.client) - before
    assert result.status == "done"
    assert least <= syncs / (steps * calls) <= most, syncs
