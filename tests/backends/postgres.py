"""PostgreSQL harness: a fresh table set per test on the server at ``AGENTFLOW_POSTGRES_DSN``:
checkpoints, records and events of one store."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg

from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.testing import BackendHarness
from tests.backends import server_missing

DSN = os.environ.get("AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
#: The tables one store creates for ``table`` (referencing tables first, for DROP).
TABLE_SUFFIXES = (
    "_durable_journal",
    "_durable_bodies",
    "_durable_runs",
    "_durable_events",
    "",
    "_threads",
    "_meta",
)


#: An asyncpg connection (asyncpg has no type hints).
Connection = Any


async def admin_connection() -> Connection:
    """A plain connection for inspecting and sabotaging the store, or a skip."""
    try:
        conn: Connection = await asyncpg.connect(DSN, timeout=5)
        return conn
    except (OSError, asyncpg.PostgresError) as exc:
        server_missing("PostgreSQL", exc)
        raise


def unique_table() -> str:
    """A table name no other test uses."""
    return f"t_{uuid.uuid4().hex[:16]}"


async def drop_tables(conn: Connection, table: str) -> None:
    names = ", ".join(f'"{table}{suffix}"' for suffix in TABLE_SUFFIXES)
    await conn.execute(f"DROP TABLE IF EXISTS {names}")


async def tables_of(admin: Connection, table: str) -> list[str]:
    """The tables named after ``table``."""
    rows = await admin.fetch(
        "SELECT table_name FROM information_schema.tables WHERE starts_with(table_name, $1)"
        " ORDER BY table_name",
        table,
    )
    return [row[0] for row in rows]


def part_row(table: str, key: str, part: str) -> tuple[str, str, str, list[object]]:
    """The table, column, row condition (after ``namespace = $1``) and its
    arguments of one stored part of a record or event."""
    if part == "event":
        return f"{table}_durable_events", "event", "event_id = $2", [key]
    if part == "body":
        return f"{table}_durable_bodies", "body", "key = $2", [key]
    kind, _, index = part.partition(".")
    condition = "key = $2 AND kind = $3 AND idx = $4"
    return f"{table}_durable_journal", "entry", condition, [key, kind, int(index)]


async def admin_session() -> AsyncIterator[Connection]:
    """Fixture body (``admin = pytest.fixture(admin_session)``): an admin connection."""
    conn = await admin_connection()
    yield conn
    await conn.close()


async def scratch_table(admin: Connection) -> AsyncIterator[str]:
    """Fixture body (``table = pytest.fixture(scratch_table)``): a table name, dropped after."""
    name = unique_table()
    yield name
    await drop_tables(admin, name)


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    admin = await admin_connection()
    table = unique_table()

    where = "WHERE namespace = $1 AND thread = $2 AND step = $3"

    async def overwrite(
        change: str, namespace: str | None, thread: str, step: int, *values: object
    ) -> None:
        status = await admin.execute(
            f'UPDATE "{table}" SET {change} {where}', namespace or "", thread, step, *values
        )
        assert status == "UPDATE 1", f"no stored row for {(namespace, thread, step)}"

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        await overwrite("payload = '\\xff7b'", namespace, thread, step)

    async def damage_revision(namespace: str | None, thread: str, step: int) -> None:
        await overwrite("revision = -7", namespace, thread, step)

    async def read_payload(namespace: str | None, thread: str, step: int) -> bytes:
        rows = await admin.fetch(
            f'SELECT payload FROM "{table}" {where}', namespace or "", thread, step
        )
        assert len(rows) == 1, f"no stored row for {(namespace, thread, step)}"
        payload: bytes = rows[0][0]
        return payload

    async def write_payload(namespace: str | None, thread: str, step: int, data: bytes) -> None:
        await overwrite("payload = $4", namespace, thread, step, data)

    async def corrupt_run(namespace: str | None, key: str) -> None:
        await write_part(namespace, key, "body", b'{"not": 1}')

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

    try:
        yield BackendHarness(
            name="postgres",
            factory=PostgresCheckpointer,
            kwargs={"dsn": DSN, "table": table},
            corrupt=corrupt,
            damage_revision=damage_revision,
            read_payload=read_payload,
            write_payload=write_payload,
            corrupt_run=corrupt_run,
            contents=lambda: tables_of(admin, table),
            read_part=read_part,
            write_part=write_part,
        )
    finally:
        await drop_tables(admin, table)
        await admin.close()


async def logging_pool(log: list[tuple[str, tuple[object, ...]]]) -> Any:
    """A caller's pool that records every statement its connections send.

    Its release does not run asyncpg's reset query, like the pool the
    checkpointer creates, so the log holds exactly what the checkpointer sent.
    """

    def record(query: Any) -> None:
        log.append((query.query, tuple(query.args)))

    async def init(conn: Connection) -> None:
        conn.add_query_logger(record)

    async def keep(conn: Connection) -> None:
        return None

    return await asyncpg.create_pool(DSN, min_size=1, max_size=4, init=init, reset=keep)


async def settle_logs() -> None:
    """Query loggers run through call_soon; let them drain."""
    for _ in range(3):
        await asyncio.sleep(0)


async def blocked_backend(admin: Connection, locker: Connection) -> int:
    """The pid of the backend waiting on a lock that ``locker`` holds."""
    locker_pid = locker.get_server_pid()
    for _ in range(500):
        pid = await admin.fetchval(
            "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", locker_pid
        )
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.01)
    raise AssertionError("no backend ever waited on the locker")


#: A thread's status from its latest step, as ThreadInfo.status defines it.
_STATUS = """CASE WHEN l.done THEN 'done' WHEN NOT l.interrupted THEN 'running'
    WHEN l.wake_at IS NULL THEN 'interrupted' ELSE 'waiting' END"""


async def summary_drift(admin: Connection, table: str) -> list[Any]:
    """Rows where the thread summary differs from the latest checkpoint (should be none)."""
    rows: list[Any] = await admin.fetch(
        f"""
        WITH latest AS (
            SELECT DISTINCT ON (namespace, thread)
                namespace, thread, step, interrupted, done, ts, wake_at, wake_us
            FROM "{table}" ORDER BY namespace, thread, step DESC
        )
        SELECT * FROM latest l FULL JOIN "{table}_threads" s USING (namespace, thread)
        WHERE l.step IS DISTINCT FROM s.latest_step OR l.interrupted IS DISTINCT FROM s.interrupted
           OR l.done IS DISTINCT FROM s.done OR l.ts IS DISTINCT FROM s.ts
           OR l.wake_at IS DISTINCT FROM s.wake_at OR l.wake_us IS DISTINCT FROM s.wake_us
           OR {_STATUS} IS DISTINCT FROM s.status
        """
    )
    return rows
