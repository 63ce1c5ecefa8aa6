"""What is specific to the SQLite durable store: one statement per write, pages
written, the threads shared with the checkpointer, its schema and URL."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager, closing
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.sqlite.workers import acquire_pair, release_pair
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.durable import event_payload_digest
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import ClaimActive, LeaseLost, RecoveryRequired, RevisionConflict
from agentflow.durable.stores import open_durable_store, sqlite_sql
from agentflow.durable.stores.sqlite import SqliteDurableStore, from_url
from agentflow.durable.stores.sqlite_events import SqliteRunEventStore
from agentflow.durable.stores.sqlite_file import SqliteFileStore
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LIVE_MS, take
from agentflow.errors import (
    CheckpointCorrupted,
    IncompatibleSchema,
    InvalidStoreUrl,
    StoreClosed,
    StoreNotFound,
)
from tests.durable.operations import every_operation

T = TypeVar("T")
#: Bytes of one WAL frame: a header and a page of the default size.
_FRAME = 24 + 4096


def _size(path: Path) -> int:
    return path.stat().st_size


def _verbs(statements: list[str]) -> list[str]:
    """The first word of each statement a job ran, without the group's BEGIN and COMMIT."""
    return [s.split()[0].upper() for s in statements if s not in ("BEGIN IMMEDIATE", "COMMIT")]


@asynccontextmanager
async def traced(store: SqliteFileStore) -> AsyncIterator[list[str]]:
    """Every statement the file's writer and reader connections run inside the block."""
    statements: list[str] = []
    key = store._file.key
    pair = acquire_pair(key)

    def trace(callback: Any) -> list[Awaitable[Any]]:
        return [
            pair.writer.submit(lambda: lambda conn: conn.set_trace_callback(callback)),
            pair.reader.submit(lambda conn: conn.set_trace_callback(callback)),
        ]

    try:
        await asyncio.gather(*trace(statements.append))
        statements.clear()
        yield statements
    finally:
        await asyncio.gather(*trace(None))
        await release_pair(key, pair)


async def test_each_operation_is_one_statement(tmp_path: Path) -> None:
    path = tmp_path / "durable.db"
    ran: dict[str, list[str]] = {}
    async with SqliteDurableStore(path) as store, SqliteRunEventStore(path) as events:
        await store.load("warm-up")  # the first use checks the schema version
        await events.replay("warm-up")
        async with traced(store) as seen:

            async def op(name: str, call: Awaitable[T]) -> T:
                seen.clear()
                try:
                    return await call
                finally:
                    ran[name] = _verbs(seen)

            await every_operation(store, events, op, "events.sqlite")
    assert ran == {
        "create": ["INSERT"],
        "claim": ["UPDATE", "SELECT"],  # the claim, then the body it returns
        "renew": ["UPDATE"],
        "record_operation": ["UPDATE"],
        "refused": ["UPDATE", "SELECT"],  # the head, to name the refusal
        "progress": ["UPDATE"],
        "finalize_claimed": ["UPDATE"],
        "record_event_delivery": ["UPDATE"],
        "acknowledge_terminal": ["UPDATE"],
        "load": ["SELECT"],
        "list_runs": ["SELECT"],
        "delete": ["DELETE"],
        "append_once": ["INSERT"],
        "append_once again": ["INSERT", "SELECT"],  # the first acceptance's cursor
        "replay": ["SELECT"],
    }


async def test_renewals_claims_and_journal_writes_leave_the_body_pages_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "durable.db"
    wal = Path(f"{path}-wal")
    frames: dict[str, int] = {}
    async with SqliteDurableStore(path) as store:
        await store.create(make_record(shared_state={"notes": "x" * 300_000}))
        pair = acquire_pair(store._file.key)
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
            await release_pair(store._file.key, pair)
    assert frames["progress"] >= 70  # the body is ~74 pages, and a body write writes them
    assert frames["renew"] == 1  # one integer, overwritten in place
    assert frames["claim"] <= 3 and frames["journal"] <= 3


async def test_leases_are_judged_on_the_clock_read_inside_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_700_000_000_000]
    monkeypatch.setattr("agentflow.durable.stores.sqlite.wall_clock_ms", lambda: now[0])
    async with SqliteDurableStore(tmp_path / "durable.db") as store:
        await store.create(make_record())
        held = await take(store, "owner-a", lease_ms=1_000)
        assert held.lease_expires_at_ms == now[0] + 1_000
        now[0] += 999  # live until the expiry itself
        with pytest.raises(ClaimActive):
            await take(store, "owner-b", mode=ClaimMode.RECOVERY)
        assert await store.renew_claim("run-1", claim_token="owner-a", lease_ms=1) == now[0] + 1
        now[0] += 1  # expiry == now: lapsed
        with pytest.raises(LeaseLost):
            await store.renew_claim("run-1", claim_token="owner-a", lease_ms=1_000)
        with pytest.raises(RecoveryRequired):
            await take(store, "owner-b")
        taken = await take(store, "owner-b", mode=ClaimMode.RECOVERY, lease_ms=5)
    assert (taken.claim_token, taken.lease_expires_at_ms) == ("owner-b", now[0] + 5)


def _writer_threads() -> int:
    return sum(thread.name == "agentflow-sqlite-writer" for thread in threading.enumerate())


async def test_one_writer_serves_checkpoints_runs_and_events(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    before = _writer_threads()
    async with (
        SqliteCheckpointer(path) as checkpointer,
        SqliteDurableStore(path, namespace="t") as store,
        SqliteRunEventStore(path, namespace="t") as events,
    ):
        await checkpointer.put(make_checkpoint("run-1", 0))
        await store.create(make_record())
        record = await take(store, "owner-a")
        event = {"type": "step", "run_id": "run-1"}
        await events.append_once("e", event_payload_digest(event), event)
        assert _writer_threads() == before + 1
        # A refused write is a result inside the shared transaction, so a
        # checkpoint put queued beside it in the same group still commits.
        stale = replace(record, revision=0)
        outcomes = await asyncio.gather(
            checkpointer.put(make_checkpoint("run-1", 1)),
            store.progress(stale, claim_token="owner-a"),
            return_exceptions=True,
        )
        assert not isinstance(outcomes[0], BaseException)
        assert isinstance(outcomes[1], RevisionConflict)
        latest = await checkpointer.get("run-1")
        assert latest is not None and latest.step == 1
    assert _writer_threads() == before


async def test_tenants_on_one_file_claim_and_fence_apart(tmp_path: Path) -> None:
    path = tmp_path / "durable.db"
    async with (
        SqliteDurableStore(path, namespace="a") as a,
        SqliteDurableStore(path, namespace="b") as b,
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
        assert (await a.delete("shared"), await b.load("shared") is not None) == (True, True)


def _meta(path: Path) -> dict[str, Any]:
    with closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT key, value FROM agentflow_meta").fetchall())


async def test_tables_are_created_beside_a_checkpoint_file_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.db"
    async with SqliteCheckpointer(path) as checkpointer:
        await checkpointer.put(make_checkpoint("t", 0))
    before = _meta(path)
    async with SqliteDurableStore(path) as store:
        await store.create(make_record())
    after = _meta(path)
    assert after["schema_version"] == before["schema_version"]
    assert after["durable_schema_version"] == sqlite_sql.DURABLE_SCHEMA_VERSION
    async with SqliteCheckpointer(path) as checkpointer, SqliteDurableStore(path) as store:
        assert await checkpointer.get("t") is not None and await store.load("run-1") is not None


@pytest.mark.parametrize(
    ("version", "error"), [(sqlite_sql.DURABLE_SCHEMA_VERSION + 1, IncompatibleSchema), ("x", None)]
)
async def test_a_newer_or_damaged_version_is_refused(
    tmp_path: Path, version: object, error: type[Exception] | None
) -> None:
    path = tmp_path / "durable.db"
    async with SqliteCheckpointer(path) as checkpointer:
        await checkpointer.put(make_checkpoint("t", 0))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("INSERT INTO agentflow_meta VALUES ('durable_schema_version', ?)", (version,))
    async with SqliteDurableStore(path) as store:
        with pytest.raises(error or CheckpointCorrupted) as caught:
            await store.create(make_record())
    if error is None:
        assert not isinstance(caught.value, IncompatibleSchema)
    with closing(sqlite3.connect(path)) as conn:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%durable%'")
        assert tables.fetchall() == []


async def test_first_uses_racing_create_the_tables_once(tmp_path: Path) -> None:
    path = tmp_path / "durable.db"
    stores = [SqliteDurableStore(path, namespace=f"n{i}") for i in range(6)]
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
    async with from_url(f"sqlite:///{tmp_path}/u.db", namespace="t") as again:
        assert await again.load("run-1") is not None
    with pytest.raises(InvalidStoreUrl):
        from_url("sqlite://")


async def test_a_checkpointers_file_opened_without_create_gets_no_durable_tables(
    tmp_path: Path,
) -> None:
    path = tmp_path / "checkpoints.db"
    async with SqliteCheckpointer(path) as checkpointer:
        await checkpointer.put(make_checkpoint())

    def tables() -> list[str]:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
            return [row[0] for row in conn.execute("SELECT name FROM sqlite_master")]

    before = tables()
    with pytest.raises(StoreNotFound):
        async with open_durable_store(f"sqlite:///{path}", create=False) as store:
            await store.list_runs()
    assert tables() == before and not any("durable" in name for name in before)


async def test_pages_and_replays_read_only_their_index_ranges(tmp_path: Path) -> None:
    path = tmp_path / "durable.db"
    async with SqliteDurableStore(path) as store:
        await store.load("create-the-tables")
    params = {"namespace": "", "status": "running", "after": "", "limit": 10, "run_id": "r"}
    with closing(sqlite3.connect(path)) as conn:
        plans = {
            name: " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
            for name, sql in (
                ("status", sqlite_sql.LIST_STATUS_AFTER),
                ("all", sqlite_sql.LIST_AFTER),
                ("replay", sqlite_sql.REPLAY),
                ("family", sqlite_sql.REPLAY_FAMILY),
            )
        }
    for plan in plans.values():
        assert "SCAN" not in plan and "TEMP B-TREE" not in plan, plan
    assert (
        "agentflow_durable_runs_by_status (namespace=? AND status=? AND key>?)" in plans["status"]
    )
    assert "(namespace=? AND key>?)" in plans["all"]
    assert "agentflow_durable_events_by_run (namespace=? AND run_id=? AND seq>?)" in plans["replay"]
    assert "agentflow_durable_events_by_parent" in plans["family"] and "MERGE" in plans["family"]
