"""A checkpointer and its durable store on each backend, and a count of what they write.

Each opener yields a fresh, empty pair on one database (a scratch file,
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

from agentflow.checkpoint.base import Checkpointer
from agentflow.durable import DurableStore, OperationJournalEntry
from agentflow.durable.rows import encode_entry

DSN = os.environ.get("AGENTFLOW_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AGENTFLOW_REDIS_URL", "redis://127.0.0.1:6379/0")

#: The ``DurableStore`` methods that write.
DURABLE_WRITES = (
    "create",
    "claim",
    "renew_claim",
    "progress",
    "record_operation",
    "suspend",
    "commit",
    "finalize_claimed",
    "finalize",
    "record_event_delivery",
    "acknowledge_terminal",
    "delete",
)

Pair = tuple[Checkpointer, DurableStore]


@dataclass
class Writes:
    """Calls of each write method (``put`` for the checkpointer's) and the journal
    entry bytes ``record_operation`` wrote (the entry as the row layout encodes it)."""

    calls: Counter[str] = field(default_factory=Counter)
    entry_bytes: int = 0
    #: Seconds each call took, by method.
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def total(self, *, durable_only: bool = False) -> int:
        return sum(n for name, n in self.calls.items() if not durable_only or name != "put")

    def since(self, before: Writes) -> Writes:
        return Writes(self.calls - before.calls, self.entry_bytes - before.entry_bytes)

    def copy(self) -> Writes:
        return Writes(Counter(self.calls), self.entry_bytes)


def count_writes(checkpointer: Checkpointer, durable: DurableStore) -> Writes:
    """Wrap the write methods of both (on the instances) so every call is counted.

    The runtime only sees the public protocols, so counting them is counting
    every write the backend is asked to make (each is one statement, script
    or command on every backend).
    """
    writes = Writes()

    def counted(name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            writes.calls[name] += 1
            if name == "record_operation":
                entry = args[1] if len(args) > 1 else kwargs["entry"]
                assert isinstance(entry, OperationJournalEntry)
                writes.entry_bytes += len(encode_entry(entry))
            start = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                writes.seconds.setdefault(name, []).append(time.perf_counter() - start)

        return call

    for name in DURABLE_WRITES:
        setattr(durable, name, counted(name, getattr(durable, name)))
    setattr(checkpointer, "put", counted("put", checkpointer.put))  # noqa: B010
    return writes


@asynccontextmanager
async def memory_pair() -> AsyncIterator[Pair]:
    from agentflow.checkpoint.memory import MemoryCheckpointer
    from agentflow.durable import MemoryDurableStore

    yield MemoryCheckpointer(), MemoryDurableStore()


@asynccontextmanager
async def sqlite_pair() -> AsyncIterator[Pair]:
    from agentflow.checkpoint.sqlite import SqliteCheckpointer
    from agentflow.durable.stores.sqlite import SqliteDurableStore

    with tempfile.TemporaryDirectory(prefix="bench-durable-") as tmp:
        path = Path(tmp) / "runs.db"
        async with (
            SqliteCheckpointer(path, synchronous="FULL") as checkpointer,
            SqliteDurableStore(path, synchronous="FULL") as durable,
        ):
            yield checkpointer, durable


@asynccontextmanager
async def file_pair() -> AsyncIterator[Pair]:
    from agentflow.checkpoint.file import FileCheckpointer
    from agentflow.durable.stores.file import FileDurableStore

    with tempfile.TemporaryDirectory(prefix="bench-durable-") as tmp:
        async with FileCheckpointer(tmp) as checkpointer, FileDurableStore(tmp) as durable:
            yield checkpointer, durable


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
async def postgres_pair() -> AsyncIterator[Pair]:
    from agentflow.checkpoint.postgres import PostgresCheckpointer
    from agentflow.durable.stores.postgres import PostgresDurableStore

    async with (
        postgres_schema() as schema,
        PostgresCheckpointer(DSN, schema=schema) as checkpointer,
        PostgresDurableStore(DSN, schema=schema) as durable,
    ):
        yield checkpointer, durable


@asynccontextmanager
async def redis_pair() -> AsyncIterator[Pair]:
    import redis.asyncio as aioredis

    from agentflow.checkpoint.redis import RedisCheckpointer
    from agentflow.durable.stores.redis import RedisDurableStore

    prefix = f"bench-durable-{uuid.uuid4().hex[:12]}"
    try:
        async with (
            RedisCheckpointer(REDIS_URL, prefix=prefix) as checkpointer,
            RedisDurableStore(REDIS_URL, prefix=prefix) as durable,
        ):
            yield checkpointer, durable
    finally:
        admin = aioredis.from_url(REDIS_URL)
        try:
            async for key in admin.scan_iter(match=f"{prefix}:*", count=1_000):
                await admin.delete(key)
        finally:
            await admin.aclose()


@asynccontextmanager
async def mongodb_pair() -> AsyncIterator[Pair]:
    from pymongo import AsyncMongoClient
    from tests.support.mongod import mongodb_uri

    from agentflow.checkpoint.mongodb import MongoCheckpointer
    from agentflow.durable.stores.mongodb import MongoDurableStore

    uri = mongodb_uri()
    database = f"bench_durable_{uuid.uuid4().hex[:12]}"
    try:
        async with (
            MongoCheckpointer(uri, database=database) as checkpointer,
            MongoDurableStore(uri, database=database) as durable,
        ):
            yield checkpointer, durable
    finally:
        admin: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
        try:
            await admin.drop_database(database)
        finally:
            await admin.close()


#: Backend name -> a fresh pair on it.
PAIRS: dict[str, Callable[[], AbstractAsyncContextManager[Pair]]] = {
    "SQLite": sqlite_pair,
    "PostgreSQL": postgres_pair,
    "Redis": redis_pair,
    "MongoDB": mongodb_pair,
    "file": file_pair,
    "memory": memory_pair,
}
