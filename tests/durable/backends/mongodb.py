"""MongoDB durable harness: a fresh database per test on the session's mongod."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.durable.stores.mongodb import MongoDurableStore
from agentflow.durable.stores.mongodb_events import MongoRunEventStore
from agentflow.durable.testing import DurableHarness
from tests.backends.mongodb import scratch_database

#: The collection a harness's stores are named after (``<name>_durable_runs``, ...).
COLLECTION = "checkpoints"


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[DurableHarness]:
    async with scratch_database() as (uri, client, database):
        runs = client[database][f"{COLLECTION}_durable_runs"]

        async def corrupt(namespace: str | None, key: str) -> None:
            run = {"_id": {"n": namespace or "", "k": key}}
            changed = await runs.update_one(run, {"$set": {"body": b'{"not": 1}'}})
            assert changed.matched_count == 1, f"no stored run {(namespace, key)}"

        yield DurableHarness(
            name="mongodb",
            stores=lambda namespace: MongoDurableStore(uri, database=database, namespace=namespace),
            event_stores=lambda namespace: MongoRunEventStore(
                uri, database=database, namespace=namespace
            ),
            corrupt=corrupt,
        )
