"""PostgreSQL durable harness: a fresh table set per test at ``AGENTFLOW_POSTGRES_DSN``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.durable.stores.postgres import PostgresDurableStore
from agentflow.durable.stores.postgres_events import PostgresRunEventStore
from agentflow.durable.testing import DurableHarness
from tests.backends.postgres import DSN, Connection, admin_connection, drop_tables, unique_table

#: The tables a durable store creates for ``table``, beside the checkpointer's.
DURABLE_SUFFIXES = ("_durable_journal", "_durable_bodies", "_durable_runs", "_durable_events")


async def drop_durable_tables(admin: Connection, table: str) -> None:
    """Drop every table a durable store (and the checkpointer setup it runs) created."""
    names = ", ".join(f'"{table}{suffix}"' for suffix in DURABLE_SUFFIXES)
    await admin.execute(f"DROP TABLE IF EXISTS {names}")
    await drop_tables(admin, table)


async def tables_of(admin: Connection, table: str) -> list[str]:
    """The tables named after ``table`` (the checkpointer's and the durable ones)."""
    rows = await admin.fetch(
        "SELECT table_name FROM information_schema.tables WHERE starts_with(table_name, $1)"
        " ORDER BY table_name",
        table,
    )
    return [row[0] for row in rows]


async def scratch_durable_table(admin: Connection) -> AsyncIterator[str]:
    """Fixture body (``table = pytest.fixture(scratch_durable_table)``): dropped after."""
    name = unique_table()
    yield name
    await drop_durable_tables(admin, name)


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[DurableHarness]:
    admin = await admin_connection()
    table = unique_table()

    async def corrupt(namespace: str | None, key: str) -> None:
        status = await admin.execute(
            f'UPDATE "{table}_durable_bodies" SET body = $3 WHERE namespace = $1 AND key = $2',
            namespace or "",
            key,
            b'{"not": 1}',
        )
        assert status == "UPDATE 1", f"no stored body for {(namespace, key)}"

    try:
        yield DurableHarness(
            name="postgres",
            stores=lambda namespace: PostgresDurableStore(DSN, table=table, namespace=namespace),
            event_stores=lambda namespace: PostgresRunEventStore(
                DSN, table=table, namespace=namespace
            ),
            corrupt=corrupt,
            readers=lambda namespace: PostgresDurableStore(
                DSN, table=table, namespace=namespace, create=False
            ),
            contents=lambda: tables_of(admin, table),
        )
    finally:
        await drop_durable_tables(admin, table)
        await admin.close()
