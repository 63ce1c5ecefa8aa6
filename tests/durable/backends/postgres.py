"""PostgreSQL durable harness: a fresh table set per test at ``AGENTFLOW_POSTGRES_DSN``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.checkpoint.sealing import KeyRing
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


def part_row(table: str, key: str, part: str) -> tuple[str, str, str, list[object]]:
    """The table, column, row condition (after ``namespace = $1``) and its
    arguments of one stored part."""
    if part == "event":
        return f"{table}_durable_events", "event", "event_id = $2", [key]
    if part == "body":
        return f"{table}_durable_bodies", "body", "key = $2", [key]
    kind, _, index = part.partition(".")
    condition = "key = $2 AND kind = $3 AND idx = $4"
    return f"{table}_durable_journal", "entry", condition, [key, kind, int(index)]


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

    async def read_part(namespace: str | None, key: str, part: str) -> bytes:
        name, column, condition, args = part_row(table, key, part)
        found = await admin.fetchval(
            f'SELECT {column} FROM "{name}" WHERE namespace = $1 AND {condition}',
            namespace or "",
            *args,
        )
        assert isinstance(found, bytes), f"no stored {part} for {(namespace, key)}"
        return found

    async def write_part(namespace: str | None, key: str, part: str, data: bytes) -> None:
        name, column, condition, args = part_row(table, key, part)
        status = await admin.execute(
            f'UPDATE "{name}" SET {column} = ${len(args) + 2} WHERE namespace = $1 AND {condition}',
            namespace or "",
            *args,
            data,
        )
        assert status == "UPDATE 1", f"no stored {part} for {(namespace, key)}"

    def stores(namespace: str | None, sealing: KeyRing | None = None) -> PostgresDurableStore:
        return PostgresDurableStore(DSN, table=table, namespace=namespace, sealing=sealing)

    def event_stores(
        namespace: str | None, sealing: KeyRing | None = None
    ) -> PostgresRunEventStore:
        return PostgresRunEventStore(DSN, table=table, namespace=namespace, sealing=sealing)

    try:
        yield DurableHarness(
            name="postgres",
            stores=stores,
            event_stores=event_stores,
            corrupt=corrupt,
            readers=lambda namespace: PostgresDurableStore(
                DSN, table=table, namespace=namespace, create=False
            ),
            contents=lambda: tables_of(admin, table),
            sealed_stores=stores,
            sealed_event_stores=event_stores,
            read_part=read_part,
            write_part=write_part,
        )
    finally:
        await drop_durable_tables(admin, table)
        await admin.close()
