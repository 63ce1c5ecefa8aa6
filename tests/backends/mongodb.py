from __future__ import annotations

import os
import shlex
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient, monitoring
from pymongo.asynchronous.collection import AsyncCollection
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


class CommandNames(monitoring.CommandListener):
    """The names of the commands a client sends, in order (``event_listeners=[...]``)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class MongoStore:
    """A fresh database on the session's mongod, a client of the test's own, and
    checkpointers on it that leave that client open."""

    def __init__(self, uri: str, client: AsyncMongoClient[Doc], database: str) -> None:
        self.uri, self.client, self.database = uri, client, database
        self.raw: AsyncCollection[Doc] = client[database]["checkpoints"]

    def open(self, **kwargs: Any) -> MongoCheckpointer:
        kwargs.setdefault("database", self.database)
        return MongoCheckpointer(client=self.client, **kwargs)

    @asynccontextmanager
    async def profiling(self) -> AsyncIterator[list[Doc]]:
        """Profile the database within the block; the list then holds every query,
        command and getMore run on the collection, in order."""
        db = self.client[self.database]
        found: list[Doc] = []
        await db.command("profile", 2)
        try:
            yield found
        finally:
            await db.command("profile", 0)
        ops = db["system.profile"].find({"ns": f"{self.database}.checkpoints"})
        found.extend(await ops.to_list())
        await db["system.profile"].drop()


@asynccontextmanager
async def mongo_store() -> AsyncIterator[MongoStore]:
    async with scratch_database() as (uri, client, database):
        yield MongoStore(uri, client, database)


def private_mongod(*flags: str) -> MongodProcess:
    """A mongod of the test's own, on a unix socket in its private directory, so it
    can be stopped and restarted while nobody else can take its address.

    MongodProcess starts whatever binary it is given, so extra ``flags`` go
    through a two-line wrapper script and its start, wait and cleanup logic
    stays in one place.
    """
    try:
        server = MongodProcess(unix_socket=True)
    except (ImportError, RuntimeError, OSError) as exc:
        server_missing("mongod binary", exc)
    if flags:
        server.stop()
        wrapper = Path(server.dbpath, "mongod-with-flags")
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.join([server.binary, *flags])} "$@"\n')
        os.chmod(wrapper, 0o700)
        server.binary = str(wrapper)
        server.start()
    return server


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    async with scratch_database() as (uri, client, database):
        collection = client[database]["checkpoints"]

        async def damage(namespace: str | None, thread: str, step: int, fields: Doc) -> None:
            key = {"n": namespace or "", "t": thread, "s": step}
            result = await collection.update_one({"_id": key}, {"$set": fields})
            assert result.matched_count == 1

        async def corrupt(namespace: str | None, thread: str, step: int) -> None:
            await damage(namespace, thread, step, {"payload": b"\xff{"})

        async def damage_revision(namespace: str | None, thread: str, step: int) -> None:
            # BSON stores any type: text where an int belongs, as no put writes it.
            await damage(namespace, thread, step, {"rev": "abc"})

        async def read_payload(namespace: str | None, thread: str, step: int) -> bytes:
            key = {"n": namespace or "", "t": thread, "s": step}
            found = await collection.find_one({"_id": key}, {"payload": 1})
            assert found is not None, f"no stored step {(namespace, thread, step)}"
            payload: bytes = found["payload"]
            return payload

        async def write_payload(namespace: str | None, thread: str, step: int, data: bytes) -> None:
            await damage(namespace, thread, step, {"payload": data})

        yield BackendHarness(
            name="mongodb",
            factory=MongoCheckpointer,
            kwargs={"uri": uri, "database": database},
            corrupt=corrupt,
            damage_revision=damage_revision,
            read_payload=read_payload,
            write_payload=write_payload,
        )
