"""The PostgreSQL durable store's setup: its tables beside the checkpointer's, versions,
schemas, names, URLs, connections, and input PostgreSQL cannot hold."""

from __future__ import annotations

import asyncio

import pytest

from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.durable import event_payload_digest
from agentflow.durable.stores.postgres import PostgresDurableStore, from_url
from agentflow.durable.stores.postgres_events import PostgresRunEventStore
from agentflow.durable.stores.postgres_sql import DURABLE_SCHEMA_VERSION, DurableSql
from agentflow.durable.testing import make_record
from agentflow.durable.testing.claims import take
from agentflow.errors import (
    CheckpointCorrupted,
    IncompatibleSchema,
    InvalidArgument,
    InvalidStoreUrl,
    StoreClosed,
    StoreUnavailable,
)
from tests.backends.postgres import DSN, Connection, admin_session, logging_pool, unique_table
from tests.durable.backends.postgres import scratch_durable_table

admin = pytest.fixture(admin_session)
table = pytest.fixture(scratch_durable_table)
_PARTS = ("runs", "bodies", "journal", "events")


async def _meta(admin: Connection, table: str) -> dict[str, int]:
    rows = await admin.fetch(f'SELECT component, version FROM "{table}_meta"')
    return {row["component"]: row["version"] for row in rows}


async def test_tables_are_created_beside_a_checkpointer_and_versioned(
    admin: Connection, table: str
) -> None:
    async with PostgresCheckpointer(DSN, table=table) as checkpointer:
        await checkpointer.put(make_checkpoint("t", 0))
    before = await _meta(admin, table)
    async with PostgresDurableStore(DSN, table=table) as store:
        await store.create(make_record())
    assert await _meta(admin, table) == {**before, "durable": DURABLE_SCHEMA_VERSION}
    async with (
        PostgresCheckpointer(DSN, table=table) as checkpointer,
        PostgresDurableStore(DSN, table=table) as store,
    ):
        assert await checkpointer.get("t") is not None and await store.load("run-1") is not None


@pytest.mark.parametrize(
    ("version", "error"), [(DURABLE_SCHEMA_VERSION + 1, IncompatibleSchema), (0, None)]
)
async def test_a_newer_or_damaged_version_is_refused(
    admin: Connection, table: str, version: int, error: type[Exception] | None
) -> None:
    async with PostgresCheckpointer(DSN, table=table) as checkpointer:
        await checkpointer.put(make_checkpoint("t", 0))
    await admin.execute(f"INSERT INTO \"{table}_meta\" VALUES ('durable', $1)", version)
    async with PostgresDurableStore(DSN, table=table) as store:
        with pytest.raises(error or CheckpointCorrupted) as caught:
            await store.create(make_record())
    if error is None:
        assert not isinstance(caught.value, IncompatibleSchema)
    tables = await admin.fetchval(
        "SELECT count(*) FROM pg_tables WHERE tablename LIKE $1", f"{table}_durable%"
    )
    assert tables == 0


async def test_first_uses_racing_create_the_tables_once(admin: Connection, table: str) -> None:
    stores = [PostgresDurableStore(DSN, table=table, namespace=f"n{i}") for i in range(6)]
    try:
        await asyncio.gather(*(s.create(make_record()) for s in stores))
        assert all([await s.load("run-1") is not None for s in stores])
    finally:
        for store in stores:
            await store.close()
    assert (await _meta(admin, table))["durable"] == DURABLE_SCHEMA_VERSION


async def test_from_url_closing_and_an_injected_pool(table: str) -> None:
    store = from_url(DSN, namespace="t")
    assert store.namespace == "t" and "checkpoints" in repr(store)
    await store.close()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.load("run-1")
    for url in ("sqlite:///x.db", "redis://localhost"):
        with pytest.raises(InvalidStoreUrl):
            from_url(url)
    pool = await logging_pool([])
    try:
        async with PostgresDurableStore(pool=pool, table=table) as borrowed:
            await borrowed.create(make_record())
        assert await pool.fetchval("SELECT 1") == 1  # the caller's pool stays open
    finally:
        await pool.close()


async def test_bad_names_and_an_unreachable_server() -> None:
    for name in ("Upper", "x" * 48, "a-b"):
        with pytest.raises(InvalidArgument):
            DurableSql(name, None)
    async with PostgresDurableStore("postgresql://postgres@127.0.0.1:1/test") as store:
        with pytest.raises(StoreUnavailable) as caught:
            await store.load("run-1")
    assert caught.value.__cause__ is not None and "127.0.0.1:1" in str(caught.value)


async def test_text_postgresql_cannot_hold_is_refused_and_nothing_stored(table: str) -> None:
    event = {"type": "step", "run_id": "run-a"}
    async with (
        PostgresDurableStore(DSN, table=table) as store,
        PostgresRunEventStore(DSN, table=table) as events,
    ):
        await store.create(make_record())
        for bad in ("nul\x00", "\ud800"):
            with pytest.raises(InvalidArgument):
                await events.append_once(bad, event_payload_digest(event), event)
            with pytest.raises(InvalidArgument):
                await take(store, bad)
        assert (await events.replay("run-a")).events == []
        loaded = await store.load("run-1")
    assert loaded is not None and (loaded.revision, loaded.claim_token) == (0, None)


async def test_a_schema_holds_every_table(admin: Connection) -> None:
    schema = unique_table()
    try:
        async with (
            PostgresDurableStore(DSN, table="runs", schema=schema) as store,
            PostgresRunEventStore(DSN, table="runs", schema=schema) as events,
        ):
            await store.create(make_record())
            event = {"type": "step", "run_id": "run-1"}
            await events.append_once("e", event_payload_digest(event), event)
            assert await store.load("run-1") is not None
        rows = await admin.fetch("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    suffixes = ("", "_threads", "_meta", *(f"_durable_{part}" for part in _PARTS))
    assert sorted(row[0] for row in rows) == sorted(f"runs{suffix}" for suffix in suffixes)
