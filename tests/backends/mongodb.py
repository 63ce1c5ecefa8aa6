from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.testing import BackendHarness
from tests.backends import server_missing
from tests.support.mongod import mongodb_uri

#: Fail fast when no server answers, instead of PyMongo's 30 s default.
PROBE_TIMEOUT_MS = 5_000


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    """A fresh database per harness on the session's mongod, dropped afterwards."""
    try:
        uri = mongodb_uri()
    except (ImportError, RuntimeError, OSError) as exc:
        server_missing("mongod", exc)
    database = f"agentflow_test_{uuid.uuid4().hex[:16]}"
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        uri, serverSelectionTimeoutMS=PROBE_TIMEOUT_MS
    )
    try:
        await client.admin.command("ping")
    except PyMongoError as exc:
        await client.close()
        server_missing("mongod", exc)
    collection = client[database]["checkpoints"]

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        key = {"n": namespace or "", "t": thread, "s": step}
        result = await collection.update_one({"_id": key}, {"$set": {"payload": b"\xff{"}})
        assert result.matched_count == 1

    try:
        yield BackendHarness(
            name="mongodb",
            factory=MongoCheckpointer,
            kwargs={"uri": uri, "database": database},
            corrupt=corrupt,
        )
    finally:
        await client.drop_database(database)
        await client.close()
