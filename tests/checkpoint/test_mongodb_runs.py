"""What is specific to the MongoDB store's records: one command per operation, the fields each
write changes (the oplog's diffs) and the journal bytes it costs, the server's clock, a record
as fields of its thread's document, covered listing pages, and bad input refused before it is
sent."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable
from dataclasses import fields
from typing import Any, TypeVar

import pytest
from pymongo import AsyncMongoClient

from agentflow.checkpoint.envelope import BODY, RunParts
from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.rows import RunHead, encode_body, encode_entry
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    ClaimActive,
    DurableError,
    LeaseLost,
    RecoveryRequired,
)
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS, claimed, take
from agentflow.errors import InvalidArgument
from tests.backends.mongodb import Commands, Doc, MongoStore, replica_set
from tests.backends.mongodb import scratch as scratch_body
from tests.durable.operations import every_operation

T = TypeVar("T")
scratch = pytest.fixture(scratch_body)
#: A body part that does not compress (WiredTiger compresses its journal).
_BLOB = secrets.token_hex(100_000)
_WRITES = ("findAndModify", "insert", "update", "delete")


async def test_each_operation_is_one_command(scratch: MongoStore) -> None:
    commands = Commands()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(scratch.uri, event_listeners=[commands])
    seen: dict[str, list[str]] = {}
    store = MongoCheckpointer(client=client, database=scratch.database)
    try:
        await store.load("warm-up")  # the first call reads (and here creates) the layout

        async def op(name: str, call: Awaitable[T]) -> T:
            commands.sent.clear()
            try:
                return await call
            finally:
                seen[name] = commands.names()

        await every_operation(store, store, op, "events.mongodb")
        writes = [body for name, body in commands.sent if name in _WRITES]
    finally:
        await store.close()
        await client.close()
    one = ["findAndModify"]
    assert seen == {
        "create": ["update"],  # an upsert of the record's fields on its thread's document
        "claim": one,
        "renew": one,
        "record_operation": one,
        "refused": [*one, "find"],  # the head, to name the refusal
        "progress": one,
        "finalize_claimed": one,
        "record_event_delivery": one,
        "acknowledge_terminal": one,
        "load": ["find"],
        "list_runs": ["find", "findAndModify"],  # the store's cursor secret, read once
        # the thread whole: the record (its lease checked in the same command), the
        # document it leaves empty, the events, the checkpoints, and the summary checked
        "delete": [*one, "delete", "delete", "delete", "find", "find"],
        "append_once": ["aggregate", "insert"],  # where the sequences end, then the event
        "append_once again": ["aggregate"],
        "replay": ["aggregate"],
    }
    assert all(body["writeConcern"] == {"j": True} for body in writes)


def _touched(diff: Doc) -> dict[str, Any]:
    """The fields an oplog diff changes: top-level names, and sub-diffs by name."""
    fields: dict[str, Any] = {}
    for section, value in diff.items():
        if section in ("u", "i", "d"):
            fields |= dict.fromkeys(value, True)
        elif section.startswith("s"):
            fields[section[1:]] = _touched(value)
        elif section != "a":  # "a": the sub-diff is an array's
            fields[section] = True
    return fields


async def test_each_write_changes_only_its_fields_and_logs_only_them() -> None:
    async with replica_set() as (_, uri):
        admin: AsyncMongoClient[Doc] = AsyncMongoClient(uri)
        oplog = admin["local"]["oplog.rs"]
        changed: dict[str, Any] = {}
        logged: dict[str, int] = {}

        async def log_bytes() -> int:
            status = await admin.admin.command("serverStatus")
            return int(status["wiredTiger"]["log"]["log bytes written"])

        async def op(name: str, call: Awaitable[T]) -> T:
            before = await log_bytes()
            result = await call
            logged[name] = await log_bytes() - before
            ns = "d.checkpoints"
            entry = await oplog.find({"ns": ns}).sort("$natural", -1).limit(1).to_list()
            changed[name] = _touched(entry[0]["o"]["diff"])
            return result

        try:
            async with MongoCheckpointer(uri, database="d") as store:
                await store.create(make_record(shared_state={"blob": _BLOB}))
                record = await op("claim", take(store, "owner-a"))
                await op(
                    "renew", store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS)
                )
                entry = make_tool_entry("run-1", 1)
                record = await op(
                    "journal", store.record_operation(record, entry, claim_token="owner-a")
                )
                await op("same body", store.progress(record, claim_token="owner-a"))
                record = await store.load("run-1") or record
                record.shared_state = {"blob": secrets.token_hex(100_000)}
                await op("new body", store.progress(record, claim_token="owner-a"))
        finally:
            await admin.close()
    assert changed == {
        "claim": dict.fromkeys(
            ("revision", "claim_token", "claimed_cycle", "lease_expires_at_ms"), True
        ),
        "renew": {"lease_expires_at_ms": True},
        "journal": {"revision": True, "journal": {"tool": {"u0": True}}},  # one entry
        "same body": {"revision": True},  # MongoDB stores what changed, whatever the $set names
        "new body": {"revision": True, "body": True},
    }
    small = ("claim", "renew", "journal", "same body")
    assert all(logged[name] < len(_BLOB) // 20 for name in small), logged
    assert logged["new body"] > len(_BLOB) // 4, logged  # the log compresses a little


async def _server_ms(client: AsyncMongoClient[Doc]) -> int:
    found = await (
        await client.admin.aggregate([{"$documents": [{"now": {"$toLong": "$$NOW"}}]}])
    ).to_list()
    return int(found[0]["now"])


@pytest.mark.parametrize("skew_s", [-86_400.0, 86_400.0])
async def test_leases_run_on_the_servers_clock_whatever_this_machine_reads(
    scratch: MongoStore, monkeypatch: pytest.MonkeyPatch, skew_s: float
) -> None:
    """With this process's clock a day off either way, leases still start, stay live and
    lapse on the server's: an early clock would keep a lapsed lease, a late one steal a
    live one."""
    real_ns = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() + int(skew_s * 1e9))
    monkeypatch.setattr(time, "time", lambda: real_ns() / 1e9 + skew_s)
    async with scratch.store() as store:
        await store.create(make_record())
        window = await _server_ms(scratch.client)
        held = await take(store, "owner-a", lease_ms=60_000)
        renewed = await store.renew_claim("run-1", claim_token="owner-a", lease_ms=90_000)
        window_end = await _server_ms(scratch.client)
        with pytest.raises(ClaimActive):
            await take(store, "owner-b", mode=ClaimMode.RECOVERY)
        lapsed = {"$set": {"lease_expires_at_ms": await _server_ms(scratch.client) - 1}}
        await scratch.raw.update_one({"_id.t": "run-1"}, lapsed)
        with pytest.raises(LeaseLost):
            await store.renew_claim("run-1", claim_token="owner-a", lease_ms=30_000)
        with pytest.raises(RecoveryRequired):
            await take(store, "owner-b")
        taken = await take(store, "owner-b", mode=ClaimMode.RECOVERY)
    assert held.lease_expires_at_ms is not None
    assert window + 60_000 <= held.lease_expires_at_ms <= window_end + 60_000
    assert window + 90_000 <= renewed <= window_end + 90_000
    assert taken.claim_token == "owner-b" and taken.resume_attempt == 2


async def test_a_record_is_fields_of_its_threads_document(scratch: MongoStore) -> None:
    async with scratch.store(namespace="tenant-a") as a, scratch.store(namespace="tenant-b") as b:
        record = await claimed(a, "shared")
        entry = make_tool_entry("shared", 1)
        record = await a.record_operation(record, entry, claim_token="owner-a")
        await b.create(make_record("shared", shared_state={"tenant": "b"}))
        with pytest.raises(LeaseLost):  # b's run is unclaimed: a's claim means nothing there
            await b.progress(record, claim_token="owner-a")
    stored = await scratch.raw.find({"_id.n": {"$exists": True}}).sort("_id.n").to_list()
    assert [doc["_id"] for doc in stored] == [
        {"n": "tenant-a", "t": "shared"},
        {"n": "tenant-b", "t": "shared"},
    ]
    mine = stored[0]
    assert set(mine) == {
        "_id",
        *(field.name for field in fields(RunHead)),
        "body",
        "journal",
        "df",  # the run definition's digest, for a worker fleet's claims
    }
    assert mine["df"] == record.run_definition_digest
    parts = RunParts("tenant-a")
    assert mine["body"] == parts.seal("shared", BODY, encode_body(record))
    assert mine["status"] == "running"
    stored_entry = parts.seal("shared", "tool.0", encode_entry(entry))
    assert mine["journal"] == {"model": [], "tool": [stored_entry]}
    assert (mine["revision"], mine["claim_token"], mine["claimed_cycle"]) == (2, "owner-a", 1)


async def test_listing_pages_read_index_entries_only(scratch: MongoStore) -> None:
    """A page is a covered query: no document (and so no body) is read."""
    db = scratch.client[scratch.database]
    async with scratch.store() as store:
        for n in range(30):
            await store.create(make_record(f"run-{n:02}", shared_state={"blob": "y" * 5_000}))
        await take(store, "owner-a", key="run-07")
        await db.command("profile", 2)
        try:
            page = await store.list_runs(
                limit=5, cursor=(await store.list_runs(limit=5)).next_cursor
            )
            running = await store.list_runs(status=CheckpointStatus.RUNNING, limit=5)
        finally:
            await db.command("profile", 0)
    profiled = (
        await db["system.profile"].find({"ns": scratch.raw.full_name, "op": "query"}).to_list()
    )
    assert [run.key for run in page.runs] == [f"run-{n:02}" for n in range(5, 10)]
    assert [run.key for run in running.runs] == [f"run-{n:02}" for n in range(5)]
    assert len(profiled) == 3
    for entry in profiled:
        assert entry["docsExamined"] == 0 and entry["keysExamined"] <= 6, entry
    plans = [entry["planSummary"] for entry in profiled]  # the index's key pattern
    assert [plan.split(", ")[:2] for plan in plans] == [
        ["IXSCAN { _id.n: 1", "_id.t: 1"],
        ["IXSCAN { _id.n: 1", "_id.t: 1"],
        ["IXSCAN { _id.n: 1", "status: 1"],
    ]


async def test_input_bson_cannot_hold_is_refused_and_nothing_is_written(
    scratch: MongoStore,
) -> None:
    lone = "owner-\ud800"
    async with scratch.store() as store:
        events = store
        record = await claimed(store)
        codes = []
        for call in (
            take(store, lone, mode=ClaimMode.RECOVERY),
            store.renew_claim("run-1", claim_token=lone, lease_ms=LIVE_MS),
            events.append_once(f"evt-{lone}", "a" * 64, {"run_id": "r"}),
            events.replay(f"run-{lone}"),
        ):
            with pytest.raises(DurableError) as caught:
                await call
            codes.append(caught.value.code)
        too_big = make_tool_entry("run-1", 1, arguments={"blob": "z" * 17_000_000})
        with pytest.raises(InvalidArgument):
            await store.record_operation(record, too_big, claim_token="owner-a")
        with pytest.raises(InvalidArgument):
            await store.create(make_record("huge", shared_state={"blob": "z" * 17_000_000}))
        loaded = await store.load("run-1")
        assert await store.load("huge") is None
    assert codes == ["checkpoint_claim_invalid"] * 2 + ["checkpoint_value_invalid"] * 2
    assert loaded is not None and loaded.to_dict() == record.to_dict()
