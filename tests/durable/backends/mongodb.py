"""MongoDB durable harness: a fresh database per test on the session's mongod, and the
helpers the MongoDB durable tests share (a scratch database, a private replica set,
a command recorder)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient, monitoring
from pymongo.asynchronous.collection import AsyncCollection

from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable.stores.mongodb import MongoDurableStore
from agentflow.durable.stores.mongodb_events import MongoRunEventStore
from agentflow.durable.testing import DurableHarness
from tests.backends.mongodb import private_mongod, scratch_database
from tests.support.mongod import MongodProcess

Doc = dict[str, Any]
#: The collection a harness's stores are named after (``<name>_durable_runs``, ...).
COLLECTION = "checkpoints"


@dataclass
class Scratch:
    """A fresh database on the session's mongod and an admin client (the test's own)."""

    uri: str
    client: AsyncMongoClient[Doc]
    database: str

    @property
    def runs(self) -> AsyncCollection[Doc]:
        return self.client[self.database][f"{COLLECTION}_durable_runs"]

    @property
    def events(self) -> AsyncCollection[Doc]:
        return self.client[self.database][f"{COLLECTION}_durable_events"]

    def store(self, **kwargs: Any) -> MongoDurableStore:
        kwargs.setdefault("database", self.database)
        return MongoDurableStore(self.uri, **kwargs)

    def event_store(self, **kwargs: Any) -> MongoRunEventStore:
        kwargs.setdefault("database", self.database)
        return MongoRunEventStore(self.uri, **kwargs)


async def scratch() -> AsyncIterator[Scratch]:
    """Fixture body (``scratch = pytest.fixture(scratch)``): the database is dropped after."""
    async with scratch_database() as (uri, client, database):
        yield Scratch(uri, client, database)


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
async def harness(tmp_path: Path) -> AsyncIterator[DurableHarness]:
    async with scratch_database() as (uri, client, database):
        runs = client[database][f"{COLLECTION}_durable_runs"]

        async def corrupt(namespace: str | None, key: str) -> None:
            run = {"_id": {"n": namespace or "", "k": key}}
            changed = await runs.update_one(run, {"$set": {"body": b'{"not": 1}'}})
            assert changed.matched_count == 1, f"no stored run {(namespace, key)}"

        events = client[database][f"{COLLECTION}_durable_events"]

        def part_of(
            namespace: str | None, key: str, part: str
        ) -> tuple[AsyncCollection[Doc], Doc, str]:
            """The collection, document and field path of one stored part."""
            if part == "event":
                return events, {"_id": {"n": namespace or "", "e": key}}, "b"
            run = {"_id": {"n": namespace or "", "k": key}}
            return runs, run, "body" if part == "body" else f"journal.{part}"

        async def read_part(namespace: str | None, key: str, part: str) -> bytes:
            collection, doc, path = part_of(namespace, key, part)
            found = await collection.find_one(doc)
            assert found is not None, f"no stored {part} for {(namespace, key)}"
            value: Any = found
            for name in path.split("."):
                value = value[int(name)] if isinstance(value, list) else value[name]
            assert isinstance(value, bytes), f"no stored {part} for {(namespace, key)}"
            return value

        async def write_part(namespace: str | None, key: str, part: str, data: bytes) -> None:
            collection, doc, path = part_of(namespace, key, part)
            changed = await collection.update_one(doc, {"$set": {path: data}})
            assert changed.matched_count == 1, f"no stored {part} for {(namespace, key)}"

        def stores(namespace: str | None, sealing: KeyRing | None = None) -> MongoDurableStore:
            return MongoDurableStore(uri, database=database, namespace=namespace, sealing=sealing)

        def event_stores(
            namespace: str | None, sealing: KeyRing | None = None
        ) -> MongoRunEventStore:
            return MongoRunEventStore(uri, database=database, namespace=namespace, sealing=sealing)

        yield DurableHarness(
            name="mongodb",
            stores=stores,
            event_stores=event_stores,
            corrupt=corrupt,
            readers=lambda namespace: MongoDurableStore(
                uri, database=database, namespace=namespace, create=False
            ),
            contents=client[database].list_collection_names,
            sealed_stores=stores,
            sealed_event_stores=event_stores,
            read_part=read_part,
            write_part=write_part,
        )
