"""What is specific to the SQLite store's records and events: one transaction per write,
a journal write of one row, pages written, the clock read inside the write, tenants on
one file, the statements' index plans, and racing processes."""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager, closing
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer, from_url
from agentflow.checkpoint.sqlite import sql as statements
from agentflow.checkpoint.sqlite.workers import acquire_pair, release_pair
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.durable import event_payload_digest
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import ClaimActive, LeaseLost, RecoveryRequired
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS, take
from agentflow.errors import InvalidStoreUrl, StoreClosed
from tests.durable.operations import every_operation
from tests.durable.racing import race_processes

T = TypeVar("T")
#: Bytes of one WAL frame: a header and a page of the default size.
_FRAME = 24 + 4096


def _size(path: Path) -> int:
    return path.stat().st_size


@asynccontextmanager
async def traced(store: SqliteCheckpointer) -> AsyncIterator[list[str]]:
    """Every statement the file's writer and reader connections run inside the block."""
    statements_run: list[str] = []
    pair = acquire_pair(store._key)

    def trace(callback: Any) -> list[Awaitable[Any]]:
        return [
            pair.writer.submit(lambda: lambda conn: conn.set_trace_callback(callback)),
            pair.reader.submit(lambda conn: conn.set_trace_callback(callback)),
        ]

    try:
        await asyncio.gather(*trace(statements_run.append))
        statements_run.clear()
        yield statements_run
    finally:
        await asyncio.gather(*trace(None))
        await release_pair(store._key, pair)


def _verbs(seen: list[str]) -> list[str]:
    """The first word of each statement, BEGIN and COMMIT as ``[`` and ``]``."""
    marks = {"BEGIN IMMEDIATE": "[", "COMMIT": "]"}
    return [marks.get(s) or s.split()[0].upper() for s in seen]


async def test_each_write_is_one_transaction_its_guard_first(tmp_path: Path) -> None:
    ran: dict[str, list[str]] = {}
    async with SqliteCheckpointer(tmp_path / "s.db") as store:
        await store.load("warm-up")  # the first use opens and checks the schema
        await store.put(make_checkpoint("run-1", 0))  # a summary whose status records set
        for key in ("warm-a", "warm-b"):  # and a cursor secret, read once per store
            await store.create(make_record(key))
        await store.list_runs(limit=1)
        async with traced(store) as seen:

            async def op(name: str, call: Awaitable[T]) -> T:
                seen.clear()
                try:
                    return await call
                finally:
                    ran[name] = _verbs(seen)

            await every_operation(store, store, op, "events.sqlite")
    assert ran == {
        "create": ["[", "INSERT", "UPDATE", "]"],  # both rows, then the thread's status
        "claim": ["[", "UPDATE", "UPDATE", "SELECT", "]"],  # + the claimed record, as a load
        "renew": ["[", "UPDATE", "]"],
        # The guarded head, the one entry's row, the thread's status: O(1) in the journal.
        "record_operation": ["[", "UPDATE", "INSERT", "UPDATE", "]"],
        "refused": ["[", "UPDATE", "SELECT", "]"],  # the head, to name the refusal
        "progress": ["[", "UPDATE", "DELETE", "DELETE", "INSERT", "UPDATE", "]"],
        "finalize_claimed": ["[", "UPDATE", "DELETE", "DELETE", "UPDATE", "]"],
        "record_event_delivery": ["[", "UPDATE", "UPDATE", "]"],
        "acknowledge_terminal": ["[", "UPDATE", "UPDATE", "]"],
        "load": ["SELECT"],  # head, body and journal rows in one statement: one snapshot
        "list_runs": ["SELECT"],
        # The lease (a live one refuses), record, journal, status, events, steps, summary.
        "delete": ["[", "SELECT", "DELETE", "DELETE", "UPDATE", "DELETE", "DELETE", "DELETE", "]"],
        "append_once": ["[", "INSERT", "]"],
        "append_once again": ["[", "INSERT", "SELECT", "]"],  # the first acceptance's cursor
        "replay": ["SELECT"],
    }


async def test_a_journal_write_costs_the_same_however_long_the_journal(tmp_path: Path) -> None:
    """Each entry is its own row: the 60th costs the statements and pages of the 1st."""
    path = tmp_path / "s.db"
    wal = Path(f"{path}-wal")
    async with SqliteCheckpointer(path) as store:
        await store.create(make_record())
        record = await take(store, "owner-a")
        pair = acquire_pair(store._key)
        try:
            await pair.writer.submit(
                lambda: lambda conn: conn.execute("PRAGMA wal_autocheckpoint=0")
            )
            frames = []
            for call in range(1, 61):
                entry = make_tool_entry("run-1", 1, call).start()
                before = _size(wal)
                record = await store.record_operation(record, entry, claim_token="owner-a")
                frames.append((_size(wal) - before) // _FRAME)
        finally:
            await release_pair(store._key, pair)
        loaded = await store.load("run-1")
    assert loaded is not None and len(loaded.tool_journal) == 60
    # A page split now and then; the typical write is the same few pages throughout.
    assert statistics.median(frames[-20:]) == statistics.median(frames[:20]) <= 3, frames


async def test_renewals_claims_and_journal_writes_leave_the_body_pages_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    wal = Path(f"{path}-wal")
    frames: dict[str, int] = {}
    async with SqliteCheckpointer(path) as store:
        await store.create(make_record(shared_state={"notes": "x" * 300_000}))
        pair = acquire_pair(store._key)
        try:  # frames then only ever append, so the log's growth counts pages written
            await pair.writer.submit(
                lambda: lambda conn: conn.execute("PRAGMA wal_autocheckpoint=0")
            )

            async def written(name: str, call: Awaitable[T]) -> T:
                before = _size(wal)
                result = await call
                frames[name] = (_size(wal) - before) // _FRAME
                return result

            record = await written("claim", take(store, "owner-a"))
            await written(
                "renew", store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS)
            )
            record = await written(
                "journal",
                store.record_operation(record, make_tool_entry("run-1", 1), claim_token="owner-a"),
            )
            record.shared_state = {"notes": "y" * 300_000}
            await written("progress", store.progress(record, claim_token="owner-a"))
        finally:
            await release_pair(store._key, pair)
    assert frames["progress"] >= 70  # the body is ~74 pages, and a body write writes them
    assert frames["renew"] == 1  # one integer, overwritten in place
    assert frames["claim"] <= 3 and frames["journal"] <= 3


async def test_leases_are_judged_on_the_clock_read_inside_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_700_000_000_000]
    monkeypatch.setattr("agentflow.checkpoint.sqlite.runs.wall_clock_ms", lambda: now[0])
    async with SqliteCheckpointer(tmp_path / "s.db") as store:
        await store.create(make_record())
        held = await take(store, "owner-a", lease_ms=1_000)
        assert held.lease_expires_at_ms == now[0] + 1_000
        now[0] += 999  # live until the expiry itself
        with pytest.raises(ClaimActive):
            await take(store, "owner-b", mode=ClaimMode.RECOVERY)
        with pytest.raises(ClaimActive):
            await store.delete("run-1")
        assert await store.renew_claim("run-1", claim_token="owner-a", lease_ms=1) == now[0] + 1
        now[0] += 1  # expiry == now: lapsed
        with pytest.raises(LeaseLost):
            await store.renew_claim("run-1", claim_token="owner-a", lease_ms=1_000)
        with pytest.raises(RecoveryRequired):
            await take(store, "owner-b")
        taken = await take(store, "owner-b", mode=ClaimMode.RECOVERY, lease_ms=5)
        assert (taken.claim_token, taken.lease_expires_at_ms) == ("owner-b", now[0] + 5)
        now[0] += 5
        assert await store.delete("run-1") is True  # lapsed on the same clock


async def test_a_refused_write_is_a_result_in_its_group(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteCheckpointer(path) as store, SqliteCheckpointer(path, namespace="t") as t:
        await t.put(make_checkpoint("run-1", 0))
        await t.create(make_record())
        record = await take(t, "owner-a")
        # A refusal inside the shared transaction rolls back nothing queued beside it.
        stale = replace(record, revision=0)
        outcomes = await asyncio.gather(
            store.put(make_checkpoint("run-1", 1)),
            t.progress(stale, claim_token="owner-a"),
            t.commit_step(make_checkpoint("run-1", 1), stale, [], claim_token="owner-a"),
            t.put(make_checkpoint("run-1", 2)),
            return_exceptions=True,
        )
        assert [type(o).__name__ for o in outcomes] == [
            "str",
            "RevisionConflict",
            "RevisionConflict",
            "str",
        ]
        other = await store.get("run-1")
        assert other is not None and other.step == 1
        assert [c.step async for c in t.history("run-1")] == [0, 2]  # the refused step is not
        loaded = await t.load("run-1")
        assert loaded is not None and loaded.revision == record.revision


async def test_tenants_on_one_file_claim_and_fence_apart(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with (
        SqliteCheckpointer(path, namespace="a") as a,
        SqliteCheckpointer(path, namespace="b") as b,
    ):
        for store in (a, b):
            await store.create(make_record("shared"))
        mine = await take(a, "owner-a", key="shared")
        theirs = await take(b, "owner-b", key="shared")
        with pytest.raises(ClaimActive):
            await take(a, "owner-x", key="shared", mode=ClaimMode.RECOVERY)
        with pytest.raises(LeaseLost):
            await b.progress(mine, claim_token="owner-a")
        await a.progress(mine, claim_token="owner-a")
        assert [r.revision for r in (await b.list_runs()).runs] == [theirs.revision]
        assert (await a.delete("shared", force=True), await b.load("shared") is not None) == (
            True,
            True,
        )
        assert a.database == b.database == f"sqlite:///{path.resolve()}"


async def test_first_uses_racing_create_the_tables_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    stores = [SqliteCheckpointer(path, namespace=f"n{i}", busy_timeout=30) for i in range(6)]
    try:
        await asyncio.gather(*(s.create(make_record()) for s in stores))
        assert all([await s.load("run-1") is not None for s in stores])
    finally:
        for store in stores:
            await store.close()


async def test_from_url_and_closing(tmp_path: Path) -> None:
    store = from_url(f"sqlite:///{tmp_path}/u.db", namespace="t")
    assert store.path == tmp_path / "u.db" and store.namespace == "t"
    await store.create(make_record())
    await store.close()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.load("run-1")
    with pytest.raises(StoreClosed):
        await store.append_once("e", event_payload_digest({"a": 1}), {"a": 1})
    async with from_url(f"sqlite:///{tmp_path}/u.db", namespace="t") as again:
        assert await again.load("run-1") is not None
    with pytest.raises(InvalidStoreUrl):
        from_url("sqlite://")


async def test_pages_loads_and_replays_read_only_their_index_ranges(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteCheckpointer(path) as store:
        await store.load("create-the-tables")
    params = {
        "namespace": "",
        "status": "running",
        "after": "",
        "limit": 10,
        "run_id": "r",
        "key": "r",
    }
    with closing(sqlite3.connect(path)) as conn:
        plans = {
            name: " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
            for name, sql in (
                ("status", statements.LIST_RUNS_STATUS),
                ("all", statements.LIST_RUNS),
                ("load", statements.LOAD),
                ("replay", statements.REPLAY),
                ("family", statements.REPLAY_FAMILY),
            )
        }
        threads = conn.execute(
            f"EXPLAIN QUERY PLAN {statements.LIST_STATUS_AFTER}", ("", "failed", "", 10)
        )
        plans["threads"] = " | ".join(row[3] for row in threads)
    for name, plan in plans.items():
        assert "SCAN" not in plan, plan
        # A load sorts one run's own rows (head, body, entries), nothing else.
        assert "TEMP B-TREE" not in plan or name == "load", plan
    assert plans["load"].count("SEARCH") == 2, plans["load"]
    assert "agentflow_runs_by_status (namespace=? AND status=? AND key>?)" in plans["status"]
    assert "(namespace=? AND key>?)" in plans["all"]
    assert "agentflow_events_by_run (namespace=? AND run_id=? AND seq>?)" in plans["replay"]
    assert "agentflow_events_by_parent" in plans["family"] and "MERGE" in plans["family"]
    assert "agentflow_threads_by_status (namespace=? AND <expr>=? AND thread>?)" in plans["threads"]


async def test_racing_processes_claim_and_append_exactly_once(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    async with SqliteCheckpointer(path) as store:
        opener = partial(SqliteCheckpointer, path, busy_timeout=60)
        await race_processes(store, (opener, opener))
