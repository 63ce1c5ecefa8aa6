"""What is specific to the PostgreSQL store's records and events: one statement per
write, rows a write leaves alone, the server's clock, tenancy, and the index ranges
pages read."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from agentflow.checkpoint.envelope import RunParts
from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.postgres.runs_sql import Statements
from agentflow.checkpoint.rows import encode_entry
from agentflow.durable import (
    OPERATOR_ABORT_CODE,
    EventCursor,
    EventOutboxEntry,
    event_payload_digest,
)
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    ClaimActive,
    LeaseLost,
    RecoveryRequired,
    RevisionConflict,
)
from agentflow.durable.testing import make_record, make_tool_entry
from agentflow.durable.testing.claims import LAPSED_MS, LIVE_MS, lapse, take
from agentflow.durable.wire.validators import CapabilityRef
from tests.backends.postgres import (
    DSN,
    Connection,
    admin_connection,
    admin_session,
    blocked_backend,
    logging_pool,
    scratch_table,
    settle_logs,
)

T = TypeVar("T")
Log = list[tuple[str, tuple[object, ...]]]

admin = pytest.fixture(admin_session)
_SERVER_MS = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"


table = pytest.fixture(scratch_table)


async def _rows(admin: Connection, table: str, part: str, columns: str) -> list[Any]:
    rows: list[Any] = await admin.fetch(
        f'SELECT {columns} FROM "{table}_durable_{part}" ORDER BY 1'
    )
    return rows


async def test_each_operation_is_one_statement(table: str) -> None:
    log: Log = []
    pool = await logging_pool(log)
    ran: dict[str, int] = {}
    try:
        store = events = PostgresCheckpointer(pool=pool, table=table)
        await store.load("warm-up")  # the first use sets the tables up
        warm = {"type": "warm-up"}  # the first append reads the cursor secret
        await events.append_once("warm", event_payload_digest(warm), warm)

        async def op(name: str, call: Awaitable[T]) -> T:
            await settle_logs()
            log.clear()
            try:
                return await call
            finally:
                await settle_logs()
                ran[name] = len(log)

        pending = EventOutboxEntry.pending("evt-1", {"type": "run_completed"})
        await op("create", store.create(make_record(event_outbox=[pending])))
        record = await op("claim", take(store, "owner-a"))
        with pytest.raises(ClaimActive):
            await op("refused claim", take(store, "owner-b", mode=ClaimMode.RECOVERY))
        await op("renew_claim", store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS))
        with pytest.raises(LeaseLost):
            await op(
                "refused renewal",
                store.renew_claim("run-1", claim_token="owner-b", lease_ms=LIVE_MS),
            )
        entry = make_tool_entry("run-1", 1)
        record = await op(
            "record_operation", store.record_operation(record, entry, claim_token="owner-a")
        )
        with pytest.raises(RevisionConflict):
            await op(
                "refused write", store.progress(replace(record, revision=1), claim_token="owner-a")
            )
        record = await op("progress", store.progress(record, claim_token="owner-a"))
        record = await op(
            "commit",
            store.commit(replace(record, cycle_index=1), claim_token="owner-a"),
        )
        record = await take(store, "owner-a", cycle=2)
        record = await store.record_operation(
            record, make_tool_entry("run-1", 2).start(), claim_token="owner-a"
        )
        record = await store.record_operation(
            record, record.tool_journal[0].mark_ambiguous(), claim_token="owner-a"
        )
        record = await op("suspend", store.suspend(record, claim_token="owner-a"))
        record = await take(store, "owner-c", cycle=2, mode=ClaimMode.RECOVERY)
        record = await store.record_operation(  # settled: a finalize refuses an ambiguous call
            record, record.tool_journal[0].succeed({"ok": True}), claim_token="owner-c"
        )
        terminal = {"status": "completed"}
        record = await op(
            "finalize_claimed",
            store.finalize_claimed(
                replace(record, status=CheckpointStatus.COMPLETED, terminal_result=terminal),
                claim_token="owner-c",
            ),
        )
        cursor = EventCursor(CapabilityRef("events.postgres", "1"), {"sequence": 1}, "evt-1")
        record = await op(
            "record_event_delivery",
            store.record_event_delivery(
                record,
                claim_token=None,
                event_id="evt-1",
                payload_digest=pending.payload_digest,
                cursor=cursor,
            ),
        )
        await op("acknowledge_terminal", store.acknowledge_terminal(record))
        await store.create(make_record("run-2"))
        await op(
            "finalize",
            store.finalize(
                replace(
                    make_record("run-2"),
                    status=CheckpointStatus.FAILED,
                    terminal_result={"status": "failed", "error_code": OPERATOR_ABORT_CODE},
                )
            ),
        )
        await op("load", store.load("run-1"))
        await op("list_runs", store.list_runs(status=CheckpointStatus.COMPLETED))
        event = {"type": "step", "run_id": "run-1", "parent_run_id": "root"}
        digest = event_payload_digest(event)
        await op("append_once", events.append_once("e", digest, event))
        await op("append_once again", events.append_once("e", digest, event))
        await op("replay", events.replay("run-1", include_children=True))
        await op("delete", store.delete("run-1"))
        await store.close()
    finally:
        await pool.close()
    refusals = {"refused claim", "refused renewal", "refused write"}
    # A delete is a transaction: BEGIN, the record, its events and steps in one
    # statement, the summary locked and rebuilt, COMMIT.
    assert ran.pop("delete") == 5
    assert {name: count for name, count in ran.items() if name not in refusals} == {
        name: 1 for name in ran if name not in refusals
    }
    assert {name: ran[name] for name in refusals} == {name: 2 for name in refusals}


async def test_claims_renewals_and_journal_writes_leave_the_body_and_other_entries(
    admin: Connection, table: str
) -> None:
    async with PostgresCheckpointer(DSN, table=table) as store:
        await store.create(make_record(shared_state={"notes": "x" * 300_000}))
        body = await _rows(admin, table, "bodies", "key, xmin::text")
        record = await take(store, "owner-a")
        await store.renew_claim("run-1", claim_token="owner-a", lease_ms=LIVE_MS)
        first, second = make_tool_entry("run-1", 1, 1), make_tool_entry("run-1", 1, 2)
        record = await store.record_operation(record, first, claim_token="owner-a")
        record = await store.record_operation(record, second, claim_token="owner-a")
        assert await _rows(admin, table, "bodies", "key, xmin::text") == body
        entries = await _rows(admin, table, "journal", "idx, xmin::text, entry, xmax::text")
        record = await store.record_operation(record, first.start(), claim_token="owner-a")
        moved = await _rows(admin, table, "journal", "idx, xmin::text, entry, xmax::text")
        assert moved[1] == entries[1]  # only the entry that moved was written
        assert moved[0][1] != entries[0][1]
        assert moved[0][2] == RunParts("").seal("run-1", "tool.0", encode_entry(first.start()))
        record.shared_state = {"notes": "y"}
        record = await store.progress(record, claim_token="owner-a")
        assert await _rows(admin, table, "bodies", "key, xmin::text") != body
        assert await _rows(admin, table, "journal", "idx, xmin::text, entry, xmax::text") == moved
        await store.commit(replace(record, cycle_index=1), claim_token="owner-a")
        assert await _rows(admin, table, "journal", "idx") == []


async def test_a_claim_that_waited_for_a_writer_returns_what_the_writer_wrote(
    admin: Connection, table: str
) -> None:
    async with PostgresCheckpointer(DSN, table=table) as store:
        await store.create(make_record())
        await take(store, "slow-holder", lease_ms=LAPSED_MS)
        await lapse()
        started = make_tool_entry("run-1", 1).start()
        writer = await admin_connection()
        try:
            transaction = writer.transaction()
            await transaction.start()
            # The lapsed holder's journal write, committed while the claim waits for the row.
            await writer.execute(
                f'UPDATE "{table}_durable_runs" SET revision = revision + 1 WHERE key = $1',
                "run-1",
            )
            await writer.execute(
                f'INSERT INTO "{table}_durable_journal" VALUES ($1, $2, $3, $4, $5)',
                "",
                "run-1",
                "tool",
                0,
                encode_entry(started),
            )
            claim = asyncio.create_task(take(store, "owner-b", mode=ClaimMode.RECOVERY))
            await blocked_backend(admin, writer)
            await transaction.commit()
            record = await claim
        finally:
            await writer.close()
    assert (record.revision, record.claim_token) == (3, "owner-b")
    assert record.tool_journal == [started]


class _Skewed:
    """Moves this process's wall clock by ``offset_s`` (the store must not read it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self._time, self._time_ns = time.time, time.time_ns

    def by(self, offset_s: float) -> None:
        real, real_ns = self._time, self._time_ns
        self._monkeypatch.setattr(time, "time", lambda: real() + offset_s)
        self._monkeypatch.setattr(time, "time_ns", lambda: real_ns() + int(offset_s * 1e9))


async def test_leases_are_judged_on_the_servers_clock(
    admin: Connection, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    skew = _Skewed(monkeypatch)
    day = 86_400.0
    async with PostgresCheckpointer(DSN, table=table) as store:
        await store.create(make_record())
        skew.by(-day)
        before = await admin.fetchval(_SERVER_MS)
        held = await take(store, "owner-a", lease_ms=60_000)
        after = await admin.fetchval(_SERVER_MS)
        assert held.lease_expires_at_ms is not None
        assert before + 60_000 <= held.lease_expires_at_ms <= after + 60_000
        skew.by(+day)  # a local clock a day ahead would see the lease lapsed
        with pytest.raises(ClaimActive):
            await take(store, "owner-b", mode=ClaimMode.RECOVERY)
        expiry = await store.renew_claim("run-1", claim_token="owner-a", lease_ms=30_000)
        assert expiry - 30_000 <= await admin.fetchval(_SERVER_MS)
        lapsed = await admin.fetchval(_SERVER_MS) - 1
        await admin.execute(f'UPDATE "{table}_durable_runs" SET lease_expires_at_ms = $1', lapsed)
        skew.by(-day)  # a local clock a day behind would see the lease live
        with pytest.raises(LeaseLost):
            await store.renew_claim("run-1", claim_token="owner-a", lease_ms=30_000)
        with pytest.raises(RecoveryRequired):
            await take(store, "owner-b")
        taken = await take(store, "owner-b", mode=ClaimMode.RECOVERY)
    assert taken.claim_token == "owner-b" and taken.resume_attempt == 2


async def test_tenants_on_one_table_claim_and_fence_apart(table: str) -> None:
    async with (
        PostgresCheckpointer(DSN, table=table, namespace="a") as a,
        PostgresCheckpointer(DSN, table=table, namespace="b") as b,
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
        await a.renew_claim("shared", claim_token="owner-a", lease_ms=LIVE_MS)
        assert (await a.delete("shared", force=True), await b.load("shared") is not None) == (
            True,
            True,
        )


async def _plan(admin: Connection, sql: Statements, name: str, **params: Any) -> str:
    statement = sql.runs[name]
    rows = await admin.fetch(f"EXPLAIN {statement.text}", *statement.args(params))
    return "\n".join(row[0] for row in rows)


async def test_pages_and_replays_read_only_their_index_ranges(
    admin: Connection, table: str
) -> None:
    async with PostgresCheckpointer(DSN, table=table) as store:
        await store.load("create-the-tables")
    runs, events = f'"{table}_durable_runs"', f'"{table}_durable_events"'
    await admin.execute(
        f"""INSERT INTO {runs} SELECT 'ns' || (n % 4), 'run-' || n, 0,
            CASE WHEN n % 3 = 0 THEN 'running' ELSE 'completed' END, 0, 1, NULL, NULL, NULL,
            n % 3 <> 0, false, false, 'x' FROM generate_series(1, 20000) AS n;
        INSERT INTO {events} (namespace, event_id, payload_digest, run_id, parent_run_id, event)
            SELECT 'ns' || (n % 2), 'e-' || n, 'd', 'run-' || (n % 10), 'run-' || (n % 9),
            '\\x7b7d' FROM generate_series(1, 20000) AS n;
        ANALYZE {runs}; ANALYZE {events}"""
    )
    sql = Statements(table, None)
    page = {"namespace": "ns1", "after": "run-5", "limit": 11}
    replay = {"namespace": "ns1", "run_id": "run-7", "after": 100, "limit": 11}
    plans = {
        "status": await _plan(admin, sql, "list_status_after", status="running", **page),
        "all": await _plan(admin, sql, "list_after", **page),
        "replay": await _plan(admin, sql, "replay", **replay),
        "family": await _plan(admin, sql, "replay_family", **replay),
    }
    for plan in plans.values():  # index ranges read in page order: no scan, no sort
        nodes = [line.strip(" ->").split("  (")[0] for line in plan.splitlines()]
        assert not any(node.startswith(("Seq Scan", "Bitmap")) for node in nodes), plan
        assert not {"Sort", "Incremental Sort"} & set(nodes), plan
    assert "Merge Append" in plans["family"]
    assert "status_key_idx" in plans["status"] and "_pkey" in plans["all"]
    assert "run_id_seq_idx" in plans["replay"]
    assert "run_id_seq_idx" in plans["family"] and "parent_run_id_seq_idx" in plans["family"]


async def test_a_delete_takes_the_body_and_every_entry(admin: Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as store:
        await store.create(make_record())
        record = await take(store, "owner-a")
        for position in (1, 2):
            entry = make_tool_entry("run-1", 1, position)
            record = await store.record_operation(record, entry, claim_token="owner-a")
        assert len(await _rows(admin, table, "journal", "idx")) == 2
        assert await store.delete("run-1", force=True)
        left = [await _rows(admin, table, part, "key") for part in ("bodies", "journal")]
        await store.create(make_record())
        fresh = await store.load("run-1")
    assert left == [[], []]
    assert fresh is not None and fresh.tool_journal == [] and fresh.revision == 0
