from __future__ import annotations

import asyncio
import os
import shlex
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
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
#: The collection a harness's stores are named after, and their events' collection.
COLLECTION = "checkpoints"
EVENTS = f"{COLLECTION}_durable_events"


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


@dataclass
class Commands(monitoring.CommandListener):
    """Every command a client sends: its name and its body (``event_listeners=[...]``)."""

    sent: list[tuple[str, Doc]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [name for name, _ in self.sent]

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent.append((event.command_name, dict(event.command)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class MongoStore:
    """A fresh database on the session's mongod, a client of the test's own, and
    stores on it: ``open`` leaves that client open, ``store`` makes its own."""

    def __init__(self, uri: str, client: AsyncMongoClient[Doc], database: str) -> None:
        self.uri, self.client, self.database = uri, client, database
        #: Checkpoints and thread documents (summaries and records).
        self.raw: AsyncCollection[Doc] = client[database][COLLECTION]
        self.events: AsyncCollection[Doc] = client[database][EVENTS]

    def open(self, **kwargs: Any) -> MongoCheckpointer:
        kwargs.setdefault("database", self.database)
        return MongoCheckpointer(client=self.client, **kwargs)

    def store(self, **kwargs: Any) -> MongoCheckpointer:
        kwargs.setdefault("database", self.database)
        return MongoCheckpointer(self.uri, **kwargs)

    @asynccontextmanager
    async def profiling(self, collection: str = COLLECTION) -> AsyncIterator[list[Doc]]:
        """Profile the database within the block; the list then holds every query,
        command and getMore run on ``collection``, in order."""
        db = self.client[self.database]
        found: list[Doc] = []
        await db.command("profile", 2)
        try:
            yield found
        finally:
            await db.command("profile", 0)
        ops = db["system.profile"].find({"ns": f"{self.database}.{collection}"})
        found.extend(await ops.to_list())
        await db["system.profile"].drop()


@asynccontextmanager
async def mongo_store() -> AsyncIterator[MongoStore]:
    async with scratch_database() as (uri, client, database):
        yield MongoStore(uri, client, database)


async def scratch() -> AsyncIterator[MongoStore]:
    """Fixture body (``scratch = pytest.fixture(scratch)``): the database is dropped after."""
    async with mongo_store() as opened:
        yield opened


async def quiet_scratch() -> AsyncIterator[MongoStore]:
    """Fixture body: a database on a mongod of the test's own, for tests that read the
    server's counters (journal syncs): another test's writes on the session's server
    would move them too."""
    server = private_mongod()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(server.uri)
    try:
        yield MongoStore(server.uri, client, "agentflow_quiet")
    finally:
        await client.close()
        server.cleanup()


@dataclass(frozen=True)
class Explained:
    """What the server did for one read command: index keys and documents read, and
    every plan stage (a ``$unionWith`` sub-pipeline's included)."""

    keys: int
    docs: int
    stages: frozenset[str]


def _walk(plan: object, found: dict[str, Any]) -> None:
    """Gather what the executed plans did (the planner's candidates left out)."""
    if isinstance(plan, dict):
        for name, value in plan.items():
            if name in ("queryPlanner", "allPlansExecution"):
                continue
            if name in ("totalKeysExamined", "totalDocsExamined"):
                found[name] = found.get(name, 0) + int(value)
            elif name == "stage":
                found.setdefault("stages", set()).add(value)
            _walk(value, found)
    elif isinstance(plan, list):
        for item in plan:
            _walk(item, found)


async def explain(client: AsyncMongoClient[Doc], command: Doc) -> Explained:
    """Run ``command`` (as a client sent it) again under ``explain``."""
    plain = {name: value for name, value in command.items() if not name.startswith("$")}
    plain.pop("lsid", None)
    database = client[command["$db"]]
    report = await database.command("explain", plain, verbosity="executionStats")
    found: dict[str, Any] = {}
    _walk(report, found)
    return Explained(
        found.get("totalKeysExamined", 0),
        found.get("totalDocsExamined", 0),
        frozenset(found.get("stages", ())),
    )


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
async def replica_set(*flags: str) -> AsyncIterator[tuple[MongodProcess, str]]:
    """A private one-member replica set (an oplog, retryable writes) and its URI."""
    server = private_mongod("--replSet", "rs0", *flags)
    try:
        admin: AsyncMongoClient[Doc] = AsyncMongoClient(server.uri)
        try:
            members = [{"_id": 0, "host": server.host}]
            await admin.admin.command("replSetInitiate", {"_id": "rs0", "members": members})
            for _ in range(300):
                if (await admin.admin.command("hello")).get("isWritablePrimary"):
                    break
                await asyncio.sleep(0.1)
        finally:
            await admin.close()
        yield server, server.uri.replace("directConnection=true", "replicaSet=rs0")
    finally:
        server.cleanup()


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    async with scratch_database() as (uri, client, database):
        collection = client[database][COLLECTION]
        events = client[database][EVENTS]

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

        async def corrupt_run(namespace: str | None, key: str) -> None:
            run = {"_id": {"n": namespace or "", "t": key}, "revision": {"$exists": True}}
            changed = await collection.update_one(run, {"$set": {"body": b'{"not": 1}'}})
            assert changed.matched_count == 1, f"no stored run {(namespace, key)}"

        def part_of(
            namespace: str | None, key: str, part: str
        ) -> tuple[AsyncCollection[Doc], Doc, str]:
            """The collection, document and field path of one stored part."""
            if part == "event":
                return events, {"_id": {"n": namespace or "", "e": key}}, "b"
            run = {"_id": {"n": namespace or "", "t": key}}
            return collection, run, "body" if part == "body" else f"journal.{part}"

        async def read_part(namespace: str | None, key: str, part: str) -> bytes:
            where, doc, path = part_of(namespace, key, part)
            found = await where.find_one(doc)
            assert found is not None, f"no stored {part} for {(namespace, key)}"
            value: Any = found
            for name in path.split("."):
                value = value[int(name)] if isinstance(value, list) else value[name]
            assert isinstance(value, bytes), f"no stored {part} for {(namespace, key)}"
            return value

        async def write_part(namespace: str | None, key: str, part: str, data: bytes) -> None:
            where, doc, path = part_of(namespace, key, part)
            changed = await where.update_one(doc, {"$set": {path: data}})
            assert changed.matched_count == 1, f"no stored {part} for {(namespace, key)}"

        yield BackendHarness(
            name="mongodb",
            factory=MongoCheckpointer,
            kwargs={"uri": uri, "database": database},
            atomic_steps=False,
            corrupt=corrupt,
            damage_revision=damage_revision,
            read_payload=read_payload,
            write_payload=write_payload,
            corrupt_run=corrupt_run,
            contents=client[database].list_collection_names,
            read_part=read_part,
            write_part=write_part,
        )
