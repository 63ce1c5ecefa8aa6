"""PostgreSQL setup: table names, the one schema version of every table, the migration
from version 1, the cursor secret, URLs, pools, input PostgreSQL cannot hold (the
migration from today's layout: test_postgres_migration.py)."""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from typing import Any

import pytest

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import JsonCodec, RecordKey
from agentflow.checkpoint.postgres import SCHEMA_VERSION, PostgresCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointError, IncompatibleSchema, InvalidArgument
from tests.backends.postgres import (
    DSN,
    TABLE_SUFFIXES,
    Connection,
    admin_session,
    drop_tables,
    scratch_table,
    summary_drift,
    unique_table,
)

admin = pytest.fixture(admin_session)
table = pytest.fixture(scratch_table)


@pytest.mark.parametrize(
    "bad",
    ["", "1abc", "a-b", 'x"; DROP TABLE t; --', "Upper", "a" * 64, "ü", "a b", None, 7],
)
def test_bad_identifiers_are_refused(bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        PostgresCheckpointer(table=bad)
    if bad is not None:
        with pytest.raises(InvalidArgument):
            PostgresCheckpointer(table="ok", schema=bad)


def test_a_table_name_leaves_room_for_every_tables_suffix() -> None:
    PostgresCheckpointer(table="a" * 47, schema="s" * 63)  # "<table>_durable_journal" fits
    with pytest.raises(InvalidArgument):
        PostgresCheckpointer(table="a" * 48)


async def test_reserved_word_table_in_own_schema(admin: Connection) -> None:
    schema = f"s_{uuid.uuid4().hex[:12]}"
    try:
        async with PostgresCheckpointer(DSN, table="select", schema=schema) as cp:
            await cp.put(make_checkpoint("t", 0))
            assert (await cp.get("t")) is not None
        names = await admin.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", schema
        )
        assert [r[0] for r in names] == [f"select{suffix}" for suffix in sorted(TABLE_SUFFIXES)]
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def test_setup_is_idempotent_and_concurrent(admin: Connection, table: str) -> None:
    checkpointers = [PostgresCheckpointer(DSN, table=table) for _ in range(4)]
    try:
        await asyncio.gather(*(cp.setup() for cp in checkpointers for _ in range(5)))
        await checkpointers[0].put(make_checkpoint("t", 0))
        await checkpointers[1].setup()
        assert (await checkpointers[2].get("t")) is not None
    finally:
        await asyncio.gather(*(cp.close() for cp in checkpointers))
    rows = await admin.fetch(f'SELECT component, version FROM "{table}_meta"')
    assert [tuple(r) for r in rows] == [("checkpoints", SCHEMA_VERSION)]
    for suffix, column in (
        ("", "payload"),
        ("_durable_bodies", "body"),
        ("_durable_events", "event"),
    ):
        compression = await admin.fetchval(
            "SELECT attcompression FROM pg_attribute WHERE attrelid = $1::regclass"
            " AND attname = $2",
            f"{table}{suffix}",
            column,
        )
        assert compression == b"l"  # lz4


async def test_newer_schema_version_is_refused(admin: Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        await cp.setup()
    await admin.execute(f'UPDATE "{table}_meta" SET version = $1', SCHEMA_VERSION + 1)
    async with PostgresCheckpointer(DSN, table=table) as cp:
        with pytest.raises(IncompatibleSchema) as info:
            await cp.put(make_checkpoint("t", 0))
        assert info.value.code == "incompatible_schema" and not info.value.retryable
        assert f"version {SCHEMA_VERSION + 1}" in str(info.value) and "upgrade" in str(info.value)
        with pytest.raises(CheckpointError):
            await cp.setup()
    assert await admin.fetchval(f'SELECT count(*) FROM "{table}"') == 0


# -- migration from version 1 ---------------------------------------------------

#: The tables as version 1 created them.
_V1_TABLES = """
CREATE TABLE "{t}_meta" (component TEXT PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE "{t}" (
    namespace TEXT COLLATE "C" NOT NULL, thread TEXT COLLATE "C" NOT NULL,
    step BIGINT NOT NULL, revision BIGINT NOT NULL, ts_us BIGINT NOT NULL, ts TEXT NOT NULL,
    interrupted BOOLEAN NOT NULL, done BOOLEAN NOT NULL, wake_at TEXT, payload BYTEA NOT NULL,
    PRIMARY KEY (namespace, thread, step)
);
CREATE TABLE "{t}_threads" (
    namespace TEXT COLLATE "C" NOT NULL, thread TEXT COLLATE "C" NOT NULL,
    latest_step BIGINT NOT NULL, interrupted BOOLEAN NOT NULL, done BOOLEAN NOT NULL,
    ts TEXT NOT NULL, wake_at TEXT,
    PRIMARY KEY (namespace, thread)
) WITH (fillfactor = 70);
INSERT INTO "{t}_meta" VALUES ('checkpoints', 1);
"""
_TS = "2026-05-01T00:00:00+00:00"


def _waiting(thread: str, step: int, wake_at: str) -> Checkpoint:
    return make_checkpoint(thread, step, next=("n",), interrupted=True, wake_at=wake_at, ts=_TS)


#: What version 1 stored: every status, a wake time with an offset, one it
#: accepted although it is no timestamp, and a timer that was resumed.
_V1_CHECKPOINTS = [
    make_checkpoint("run", 0, next=("n",), ts=_TS),
    make_checkpoint("run", 1, next=("n",), ts=_TS),
    make_checkpoint("human", 0, next=("n",), interrupted=True, ts=_TS),
    _waiting("timer-a", 0, "2026-06-01T13:00:00+02:00"),
    _waiting("timer-b", 0, "2026-06-01T10:30:00Z"),
    _waiting("later", 0, "2026-06-02T00:00:00Z"),
    _waiting("odd", 0, "soon"),
    _waiting("woke", 0, "2026-06-01T09:00:00Z"),
    make_checkpoint("woke", 1, next=("n",), ts=_TS),
    make_checkpoint("fin", 0, ts=_TS),
]


async def _write_v1_store(admin: Connection, table: str, namespace: str) -> None:
    await admin.execute(_V1_TABLES.format(t=table))
    codec = JsonCodec()
    for cp in _V1_CHECKPOINTS:
        payload = codec.encode(cp, RecordKey(namespace, cp.thread, cp.step))
        row = (namespace, cp.thread, cp.step, parse_instant(cp.ts), cp.ts, cp.interrupted)
        await admin.execute(
            f'INSERT INTO "{table}" VALUES ($1, $2, $3, 2, $4, $5, $6, $7, $8, $9)',
            *row,
            cp.done,
            cp.wake_at,
            payload,
        )
        await admin.execute(
            f"""INSERT INTO "{table}_threads" VALUES ($1, $2, $3, $4, $5, $6, $7)
            ON CONFLICT (namespace, thread) DO UPDATE SET latest_step = EXCLUDED.latest_step,
                interrupted = EXCLUDED.interrupted, done = EXCLUDED.done, ts = EXCLUDED.ts,
                wake_at = EXCLUDED.wake_at""",
            namespace,
            cp.thread,
            cp.step,
            cp.interrupted,
            cp.done,
            cp.ts,
            cp.wake_at,
        )


async def _shape(admin: Connection, table: str) -> list[tuple[Any, ...]]:
    """Columns and indexes of ``table``'s tables, with the table name taken out."""
    columns = await admin.fetch(
        """SELECT replace(table_name, $1, '<t>'), ordinal_position, column_name, data_type,
            is_nullable, column_default, collation_name, is_identity
        FROM information_schema.columns WHERE starts_with(table_name, $1) ORDER BY 1, 2""",
        table,
    )
    indexes = await admin.fetch(
        """SELECT replace(indexdef, $1, '<t>') FROM pg_indexes
        WHERE starts_with(tablename, $1) ORDER BY 1""",
        table,
    )
    options = await admin.fetch(
        """SELECT replace(relname, $1, '<t>'), reloptions FROM pg_class
        WHERE starts_with(relname, $1) AND relkind = 'r' ORDER BY 1""",
        table,
    )
    return [tuple(r) for r in (*columns, *indexes, *options)]


async def test_a_version_1_store_is_migrated(admin: Connection, table: str) -> None:
    await _write_v1_store(admin, table, "acme")
    checkpointers = [PostgresCheckpointer(DSN, table=table, namespace="acme") for _ in range(3)]
    try:
        await asyncio.gather(*(cp.setup() for cp in checkpointers))
        cp = checkpointers[0]
        for stored in _V1_CHECKPOINTS:
            got = await cp.get(stored.thread, stored.step)
            assert got is not None and got.state == stored.state and got.revision == 2
        statuses = {
            status: [i.thread for i in (await cp.list_threads_page(status=status)).threads]
            for status in ("running", "interrupted", "waiting", "done")
        }
        assert statuses == {
            "running": ["run", "woke"],
            "interrupted": ["human"],
            "waiting": ["later", "odd", "timer-a", "timer-b"],
            "done": ["fin"],
        }
        due = await cp.list_due("2026-06-01T12:00:00Z")
        assert [i.thread for i in due.threads] == ["timer-b", "timer-a"]
        assert [i.thread for i in (await cp.list_due("2100-01-01T00:00:00Z")).threads] == [
            "timer-b",
            "timer-a",
            "later",
        ]
        assert await summary_drift(admin, table) == []
        await cp.prune("woke", before_step=1)
        await cp.put(_waiting("human", 1, "2026-06-01T11:30:00Z"))
        due = await cp.list_due("2026-06-01T12:00:00Z", limit=1)
        assert [i.thread for i in due.threads] == ["timer-b"] and due.next_cursor is not None
        rest = await cp.list_due("2026-06-01T12:00:00Z", cursor=due.next_cursor)
        assert [i.thread for i in rest.threads] == ["timer-a", "human"]
        assert await summary_drift(admin, table) == []
    finally:
        await asyncio.gather(*(cp.close() for cp in checkpointers))
    assert await admin.fetchval(f'SELECT version FROM "{table}_meta"') == SCHEMA_VERSION
    fresh = unique_table()
    try:
        async with PostgresCheckpointer(DSN, table=fresh) as new:
            await new.setup()
        assert await _shape(admin, table) == await _shape(admin, fresh)
    finally:
        await drop_tables(admin, fresh)


async def test_a_failed_migration_leaves_version_1(admin: Connection, table: str) -> None:
    await _write_v1_store(admin, table, "")
    # A view where a table was: its ALTER fails after the meta table's succeeded.
    await admin.execute(f'ALTER TABLE "{table}" RENAME TO "{table}_held"')
    await admin.execute(f'CREATE VIEW "{table}" AS SELECT * FROM "{table}_held"')
    try:
        async with PostgresCheckpointer(DSN, table=table) as cp:
            with pytest.raises(CheckpointError):
                await cp.setup()
        version = await admin.fetchval(f'SELECT version FROM "{table}_meta"')
        columns = await admin.fetchval(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = $1",
            f"{table}_meta",
        )
        assert (version, columns) == (1, 2)  # the meta table, altered first, is rolled back
    finally:
        await admin.execute(f'DROP VIEW "{table}"; ALTER TABLE "{table}_held" RENAME TO "{table}"')


# -- the cursor secret ------------------------------------------------------------


#: Generous: spawning four interpreters on a loaded 2-core box can take a minute.
_RENDEZVOUS_S = 300


def _issue_cursor(table: str, barrier: Any, results: Any) -> None:
    """In a child process: open the store, wait for the others, list one page."""

    async def run() -> str | None:
        async with PostgresCheckpointer(DSN, table=table) as cp:
            await cp.setup()
            await asyncio.to_thread(barrier.wait, _RENDEZVOUS_S)
            return (await cp.list_threads_page(limit=1)).next_cursor

    try:
        results.put(asyncio.run(run()))
    except Exception as exc:  # the parent asserts on what each child reports
        barrier.abort()  # and the others need not wait for this one
        results.put(f"failed: {exc!r}")


async def test_processes_racing_for_the_secret_end_with_one(admin: Connection, table: str) -> None:
    async with PostgresCheckpointer(DSN, table=table) as cp:
        for thread in "ab":
            await cp.put(make_checkpoint(thread, 0))
    secrets = f"SELECT count(*) FROM \"{table}_meta\" WHERE component = 'cursor_secret'"
    assert await admin.fetchval(secrets) == 0
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    children = [ctx.Process(target=_issue_cursor, args=(table, barrier, results)) for _ in range(4)]
    for child in children:
        child.start()
    cursors = [await asyncio.to_thread(results.get, True, 2 * _RENDEZVOUS_S) for _ in children]
    for child in children:
        await asyncio.to_thread(child.join, 60)
    assert [child.exitcode for child in children] == [0] * 4
    assert len(set(cursors)) == 1 and cursors[0] is not None
    assert await admin.fetchval(secrets) == 1
    async with PostgresCheckpointer(DSN, table=table) as cp:
        page = await cp.list_threads_page(cursor=cursors[0])
        assert [i.thread for i in page.threads] == ["b"]
