from __future__ import annotations

import os
import shlex
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import PyMongoError

from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.testing import BackendHarness
from tests.backends import server_missing
from tests.support.mongod import MongodProcess, mongodb_uri

#: Fail fast when no server answers, instead of PyMongo's 30 s default.
PROBE_TIMEOUT_MS = 5_000
Doc = dict[str, Any]


@asynccontextmanager
async def scratch_database() -> AsyncIterator[tuple[str, AsyncMongoClient[Doc], str]]:
    """``(uri, client, database)``: a fresh database on the session's mongod, dropped after."""
    try:
        uri = mongodb_uri()
    except (ImportError, RuntimeError, OSError) as exc:
        server_missing("mongod", exc)
    client: AsyncMongoClient[Doc] = AsyncMongoClient(uri, serverSelectionTimeoutMS=PROBE_TIMEOUT_MS)
    try:
        await client.admin.command("ping")
    except PyMongoError as exc:
        await client.close()
        server_missing("mongod", exc)
    database = f"agentflow_test_{uuid.uuid4().hex[:16]}"
    try:
        yield uri, client, database
    finally:
        await client.drop_database(database)
        await client.close()


def private_mongod(*flags: str) -> MongodProcess:
    """A mongod of the test's own (restartable without disturbing a shared server).

    MongodProcess starts whatever binary it is given, so extra ``flags`` go
    through a two-line wrapper script and its start, wait and cleanup logic
    stays in one place.
    """
    try:
        server = MongodProcess()
    except (ImportError, RuntimeError, OSError) as exc:
        server_missing("mongod binary", exc)
    if flags:
        server.stop()
        wrapper = Path(server.dbpath, "mongod-with-flags")
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.join([server.binary, *flags])} "$@"\n')
        os.chmod(wrapper, 0o700)
        server.binary = str(wrapper)
        server.start()
        assert_owns_port(server)
    return server


def assert_owns_port(server: MongodProcess) -> None:
    """Fail clearly if the mongod answering on the port is not the one we started.

    MongodProcess restarts on the same port, and while ours is down another
    test session's mongod can take it: the symptoms would otherwise be driver
    errors from a server of the wrong kind.
    """
    with MongoClient(server.uri, serverSelectionTimeoutMS=PROBE_TIMEOUT_MS) as client:
        pid = client.admin.command("serverStatus")["pid"]
    assert server.proc is not None and pid == server.proc.pid, (
        f"port {server.port} was taken by another mongod (pid {pid}) while ours restarted"
    )


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    async with scratch_database() as (uri, client, database):
        collection = client[database]["checkpoints"]

        async def corrupt(namespace: str | None, thread: str, step: int) -> None:
            key = {"n": namespace or "", "t": thread, "s": step}
            result = await collection.update_one({"_id": key}, {"$set": {"payload": b"\xff{"}})
            assert result.matched_count == 1

        yield BackendHarness(
            name="mongodb",
            factory=MongoCheckpointer,
            kwargs={"uri": uri, "database": database},
            corrupt=corrupt,
        )
