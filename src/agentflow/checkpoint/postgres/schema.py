"""Creating the PostgreSQL tables, and bringing a store of an older version up to date.

Setup is one transaction under a transaction-scoped advisory lock, so any
number of processes may run it at once, the lock cannot outlive it on a pooled
connection, and a failed setup or migration leaves nothing behind (every DDL
statement here is transactional). A current version executes no DDL.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from agentflow.checkpoint.postgres.sql import LZ4_AVAILABLE, SETUP_LOCK_KEY
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import IncompatibleSchema, InvalidArgument, StoreNotFound

__all__ = ["SCHEMA_VERSION", "prepare"]

#: Version of the tables this module creates; a store recording a newer one is refused.
SCHEMA_VERSION: Final = 2


def _instant(wake_at: str) -> int | None:
    """A stored wake time in µs; None (never due) for text older releases let in."""
    try:
        return parse_instant(wake_at)
    except InvalidArgument:
        return None


async def _to_v2(conn: Any, sql: dict[str, str]) -> None:
    await conn.execute(sql["to_v2.add_columns"])
    timers = await conn.fetch(sql["to_v2.wake_timers"])
    instants = [(ns, thread, step, _instant(wake_at)) for ns, thread, step, wake_at in timers]
    await conn.executemany(sql["to_v2.set_wake"], instants)
    await conn.execute(sql["to_v2.summary_wake"])


#: The step from each older version to the next one.
_MIGRATIONS: Final[dict[int, Callable[[Any, dict[str, str]], Awaitable[None]]]] = {1: _to_v2}


async def prepare(
    conn: Any, sql: dict[str, str], meta: str, table: str, *, create: bool = True
) -> None:
    """Create the tables of ``sql`` on ``conn`` if absent (``create=False``: raise
    StoreNotFound instead), or migrate them to :data:`SCHEMA_VERSION`; raise
    IncompatibleSchema for a newer store."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", SETUP_LOCK_KEY)
        version = None
        if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", meta):
            version = await conn.fetchval(sql["read_version"])
        if version == SCHEMA_VERSION:
            return
        if version is None:
            if not create:
                raise StoreNotFound(f"no store: table {table} does not exist")
            await conn.execute(sql["create"])
            if await conn.fetchval(LZ4_AVAILABLE):
                await conn.execute(sql["use_lz4"])
        elif version in _MIGRATIONS:
            for older in range(version, SCHEMA_VERSION):
                await _MIGRATIONS[older](conn, sql)
        else:
            raise IncompatibleSchema(
                f"{table} has agentflow schema version {version}, which this agentflow"
                f" (schema version {SCHEMA_VERSION}) cannot read: upgrade agentflow"
            )
        await conn.execute(sql["record_version"], SCHEMA_VERSION)
