"""PostgreSQL harness: a fresh table set per test on the server at ``POSTGRES_DSN``."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg

from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.testing import BackendHarness
from tests.backends import server_missing

DSN = os.environ.get("AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
#: The tables one checkpointer creates for ``table``.
TABLE_SUFFIXES = ("", "_threads", "_meta")


async def admin_connection() -> asyncpg.Connection:
    """A plain connection for inspecting and sabotaging the store, or a skip."""
    try:
        return await asyncpg.connect(DSN, timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        server_missing("PostgreSQL", exc)
        raise


def unique_table() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


async def drop_tables(conn: asyncpg.Connection, table: str) -> None:
    names = ", ".join(f'"{table}{suffix}"' for suffix in TABLE_SUFFIXES)
    await conn.execute(f"DROP TABLE IF EXISTS {names}")


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    admin = await admin_connection()
    table = unique_table()

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        await admin.execute(
            f'UPDATE "{table}" SET payload = $4 WHERE namespace = $1 AND thread = $2 AND step = $3',
            namespace or "",
            thread,
            step,
            b"\xff{",
        )

    try:
        yield BackendHarness(
            name="postgres",
            factory=PostgresCheckpointer,
            kwargs={"dsn": DSN, "table": table},
            corrupt=corrupt,
        )
    finally:
        await drop_tables(admin, table)
        await admin.close()
