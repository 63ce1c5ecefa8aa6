"""A store on each backend, and a count of what it is asked to write.

Each opener yields a fresh, empty store on one database (a scratch file,
schema, key prefix or database, removed afterwards), at the durability the
backend benchmarks use: SQLite WAL + ``synchronous=FULL``, PostgreSQL
``synchronous_commit=on``, MongoDB ``j:true``, the file store fsyncing each
write, Redis as the server runs.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentflow.checkpoint.rows import encode_entry
from agentflow.checkpoint.store import Store
from agentflow.durable import OperationJournalEntry

DSN = os.environ.get("AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AGENTFLOW_REDIS_URL", "redis://127.0.0.1:6379/0")

#: The store methods that write (each one transaction, script or command; ``put`` is the
#: checkpoints', the others the records').
WRITES = (
    "put",
    "commit_step",
    "create",
    "claim",
    "renew_claim",
    "progress",
    "record_operations",
    "suspend",
    "commit",
    "finalize_claimed",
    "finalize",
    "record_event_delivery",
    "acknowledge_terminal",
    "delete",
)


@dataclass
class Writes:
    """Calls of each write method and the journal entry bytes written (each entry as
    the row layout encodes it)."""

    calls: Counter[str] = field(default_factory=Counter)
    entry_bytes: int = 0
    #: Seconds each call took, by method.
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def total(self, *, durable_only: bool = False) -> int:
        """Writes made; ``durable_only``: those a run adds to its steps' (not ``put``)."""
        return sum(n for name, n in self.calls.items() if not durable_only or name != "put")

    def since(self, before: Writes) -> Writes:
        return Writes(self.calls - before.calls, self.entry_bytes - before.entry_bytes)

    def copy(self) -> Writes:
        return Writes(Counter(self.calls), self.entry_bytes)


def count_writes(store: Store) -> Writes:
    """Wrap the write methods of ``store`` (on the instance) so every call is counted.

    The runtime only sees the public protocol, so counting it is counting every
    write the backend is asked to make (each is one statement, script or
    command on every backend; ``commit_step`` one transaction on SQL ones).
    """
    writes = Writes()

    def counted(name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            writes.calls[name] += 1
            if name in ("record_operations", "commit_step"):
                entries = args[-1] if args else kwargs["entries"]
                for entry in entries:
                    assert isinstance(entry, OperationJournalEntry)
                    writes.entry_bytes += len(encode_entry(entry))
            start = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                writes.seconds.setdefault(name, []).append(time.perf_counter() - start)

        return call

    for name in WRITES:
        setattr(store, name, counted(name, getattr(store, name)))
    return writes


@asynccontextmanager
async def memory_store() -> AsyncIterator[Store]:
    from agentflow.checkpoint.memory import MemoryCheckpointer

    yield MemoryCheckpointer()


@asynccontextmanager
async def sqlite_store() -> AsyncIterator[Store]:
    from agentflow.checkpoint.sqlite import SqliteCheckpointer

    with tempfile.TemporaryDirectory(prefix="bench-durable-") as tmp:
        async with SqliteCheckpointer(Path(tmp) / "runs.db", synchronous="FULL") as store:
            yield store


@asynccontextmanager
async def file_store() -> AsyncIterator[Store]:
    from agentflow.checkpoint.file import FileCheckpointer

    with tempfile.TemporaryDirectory(prefix="bench-durable-") as tmp:
        async with FileCheckpointer(tmp) as store:
            yield store


async def postgres_admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(DSN)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@asynccontextmanager
async def postgres_schema() -> AsyncIterator[str]:
    """A scratch schema, dropped with everything in it afterwards."""
    schema = f"bench_durable_{uuid.uuid4().hex[:12]}"
    await postgres_admin(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        await postgres_admin(f'DROP SCHEMA "{schema}" CASCADE')


@asynccontextmanager
async def postgres_store() -> AsyncIterator[Store]:
    from agentflow.checkpoint.postgres import PostgresCheckpointer

    async with postgres_schema() as schema, PostgresCheckpointer(DSN, schema=schema) as store:
        yield store


@asynccontextmanager
async def redis_store() -> AsyncIterator[Store]:
    import redis.asyncio as aioredis

    from agentflow.checkpoint.redis import RedisCheckpointer

    prefix = f"bench-durable-{uuid.uuid4().hex[:12]}"
    try:
        async with RedisCheckpointer(REDIS_URL, prefix=prefix) as store:
            yield store
    finally:
        admin = aioredis.from_url(REDIS_URL)
        try:
            async for key in admin.scan_iter(match=f"{prefix}:*", count=1_000):
                await admin.delete(key)
        finally:
            await admin.aclose()


@asynccontextmanager
async def mongodb_store() -> AsyncIterator[Store]:
    from pymongo import AsyncMongoClient
    from tests.support.mongod import mongodb_uri

    from agentflow.checkpoint.mongodb import MongoCheckpointer

    uri = mongodb_uri()
    database = f"bench_durable_{uuid.uuid4().hex[:12]}"
    try:
        async with MongoCheckpointer(uri, database=database) as store:
            yield store
    finally:
        admin: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
        try:
            await admin.drop_database(database)
        finally:
            await admin.close()


#: Backend name -> a fresh store on it.
STORES: dict[str, Callable[[], AbstractAsyncContextManager[Store]]] = {
    "SQLite": sqlite_store,
    "PostgreSQL": postgres_store,
    "Redis": redis_store,
    "MongoDB": mongodb_store,
    "file": file_store,
    "memory": memory_store,
}
