"""Agent Framework checkpoint storage: MongoDB vs the framework's FileCheckpointStorage.

    python -m benchmarks af_mongodb [--quick]

Both storages get the same workflow checkpoints: a real paused run's
checkpoint (one pending request_info, its workflow messages) whose state is
replaced by ~10 KB of agent-like data. "bare pickle+insert" is the floor:
``pickle.dumps(checkpoint.to_dict())`` plus one ``insert_one`` of those bytes
into the same server, with no validation, scope, sequence or idempotency.

Targets (issue 5): get_latest <= 2 ms with 10,000 checkpoints in the run;
paging through 1,000 checkpoints <= 0.3 s; save <= 2x bare pickle+insert.
"""

import asyncio
import os
import pickle
import random
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

from agent_framework import (
    Executor,
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    WorkflowBuilder,
    WorkflowCheckpoint,
    WorkflowContext,
    handler,
)
from bson.binary import Binary
from pymongo import AsyncMongoClient

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from benchmarks.common import Table, median, ms, nested_state, time_calls

# No `from __future__ import annotations`: Agent Framework 1.13 reads handler
# annotations unevaluated.

WORKFLOW = "bench-approval"
ALLOWED = (f"{__name__}:Ask",)


@dataclass
class Ask:
    question: str


class Asker(Executor):
    @handler
    async def ask(self, question: str, ctx: WorkflowContext[str]) -> None:
        await ctx.request_info(Ask(question), str)


async def template() -> WorkflowCheckpoint:
    """The paused checkpoint of a real run, carrying a message from its entry checkpoint."""
    memory = InMemoryCheckpointStorage()
    builder = WorkflowBuilder(name=WORKFLOW, start_executor=Asker(id="asker"),
                              checkpoint_storage=memory)  # fmt: skip
    await builder.build().run("approve the budget?")
    saved = await memory.list_checkpoints(workflow_name=WORKFLOW)
    paused = next(c for c in saved if c.pending_request_info_events)
    entry = next(c for c in saved if c.messages)
    paused.messages = entry.messages
    return paused


def variant(base: WorkflowCheckpoint, step: int) -> WorkflowCheckpoint:
    data = base.to_dict()
    data.update(checkpoint_id=str(uuid.uuid4()), iteration_count=step,
                state={**base.state, "agent": nested_state(step)})  # fmt: skip
    return WorkflowCheckpoint.from_dict(data)


async def fill(storage: Any, base: WorkflowCheckpoint, count: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, count, 50):
        batch = [variant(base, i) for i in range(start, min(count, start + 50))]
        ids += await asyncio.gather(*(storage.save(c) for c in batch))
    return ids


def mongo(uri: str, collection: str, session: str) -> MongoDBCheckpointStorage:
    options = MongoDBCheckpointStorageOptions(
        tenant_id="bench", workflow_name=WORKFLOW, session_id=session,
        database_name="agentflow_bench", collection_name=collection,
        allowed_checkpoint_types=ALLOWED,
    )  # fmt: skip
    return MongoDBCheckpointStorage(options, connection_string=uri)


async def run(quick: bool) -> list[Table]:
    uri = os.environ.get("MONGODB_URI") or _started_uri()
    base = await template()
    samples, big, paged = (50, 1_000, 300) if quick else (300, 10_000, 1_000)
    collection = f"bench-af-{uuid.uuid4().hex[:8]}"
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    raw = client["agentflow_bench"][collection + "-raw"]
    directory = tempfile.mkdtemp(prefix="bench-af-file-")
    file_store = FileCheckpointStorage(directory, allowed_checkpoint_types=list(ALLOWED))
    storage = mongo(uri, collection, "latency")
    try:
        await storage.ensure_indexes()
        one = variant(base, 0)
        size = len(pickle.dumps(one.to_dict()))

        async def bare() -> None:
            cp = variant(base, 1)
            payload = Binary(pickle.dumps(cp.to_dict(), protocol=5))
            await raw.insert_one({"_id": cp.checkpoint_id, "checkpoint": payload})

        save_rows = {}
        for name, target in (("mongo", storage), ("file", file_store)):
            save_rows[name] = await _save_samples(target, base, samples)
        save_rows["bare"] = await time_calls(bare, samples)
        # Subtract the variant() construction each sample includes.
        build = median(await time_calls(_async(lambda: variant(base, 2)), samples))
        save = {k: max(median(v) - build, 0.0) for k, v in save_rows.items()}

        ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW)
        file_ids = await file_store.list_checkpoint_ids(workflow_name=WORKFLOW)
        load = {
            "mongo": median(await time_calls(lambda: storage.load(random.choice(ids)), samples)),
            "file": median(
                await time_calls(lambda: file_store.load(random.choice(file_ids)), samples)
            ),  # fmt: skip
        }

        big_store = mongo(uri, collection, "big")
        await fill(big_store, base, big)
        latest_mongo = median(
            await time_calls(lambda: big_store.get_latest(workflow_name=WORKFLOW), samples)
        )
        big_dir = tempfile.mkdtemp(prefix="bench-af-file-big-")
        big_file = FileCheckpointStorage(big_dir, allowed_checkpoint_types=list(ALLOWED))
        file_count = min(big, 2_000)
        await fill(big_file, base, file_count)
        latest_file = median(await time_calls(
            lambda: big_file.get_latest(workflow_name=WORKFLOW), 3))  # fmt: skip
        shutil.rmtree(big_dir, ignore_errors=True)

        page_store = mongo(uri, collection, "paged")
        await fill(page_store, base, paged)
        paging = median(await time_calls(lambda: _page_all(page_store), 5))
        listing = median(
            await time_calls(lambda: page_store.list_checkpoints(workflow_name=WORKFLOW), 3)
        )
        page_dir = tempfile.mkdtemp(prefix="bench-af-file-page-")
        page_file = FileCheckpointStorage(page_dir, allowed_checkpoint_types=list(ALLOWED))
        await fill(page_file, base, paged)
        file_listing = median(
            await time_calls(lambda: page_file.list_checkpoints(workflow_name=WORKFLOW), 3)
        )
        shutil.rmtree(page_dir, ignore_errors=True)
        await big_store.close()
        await page_store.close()
    finally:
        await client["agentflow_bench"].drop_collection(collection)
        await raw.drop()
        await client.close()
        await storage.close()
        shutil.rmtree(directory, ignore_errors=True)

    table = Table(
        title=f"Agent Framework checkpoint storage ({'quick' if quick else 'full'})",
        headers=["operation", "MongoDBCheckpointStorage", "FileCheckpointStorage",
                 "bare pickle+insert", "target", "met"],
    )  # fmt: skip
    ratio = save["mongo"] / save["bare"] if save["bare"] else float("inf")
    table.rows += [
        ["save p50 (validated round trip)", ms(save["mongo"]), ms(save["file"]), ms(save["bare"]),
         "<= 2x bare", f"{ratio:.2f}x {'yes' if ratio <= 2 else 'no'}"],
        ["load p50", ms(load["mongo"]), ms(load["file"]), "", "", ""],
        [f"get_latest p50, {big:,} in run", ms(latest_mongo),
         f"{ms(latest_file)} ({file_count:,} files)", "", "<= 2 ms",
         "yes" if latest_mongo <= 0.002 else "no"],
        [f"page through {paged:,} (limit 100)", f"{paging:.3f} s", "", "", "<= 0.3 s",
         "yes" if paging <= 0.3 else "no"],
        [f"list_checkpoints, {paged:,}", f"{listing:.3f} s", f"{file_listing:.3f} s", "", "", ""],
    ]  # fmt: skip
    table.notes += [
        f"checkpoint: one pending request_info, workflow messages, ~{size / 1024:.1f} KB pickled",
        f"{samples} samples per latency; medians; 2 shared vCPUs, noisy",
        "FileCheckpointStorage.get_latest decodes every file of the workflow on each call",
    ]
    return [table]


async def _save_samples(storage: Any, base: WorkflowCheckpoint, count: int) -> list[float]:
    return await time_calls(lambda: storage.save(variant(base, 3)), count)


async def _page_all(storage: MongoDBCheckpointStorage) -> int:
    cursor, total = None, 0
    while True:
        page = await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=cursor, limit=100)
        total += len(page.checkpoints)
        if page.next_cursor is None:
            return total
        cursor = page.next_cursor


def _async(fn: Any) -> Any:
    async def call() -> Any:
        return fn()

    return call


def _started_uri() -> str:
    from tests.support.mongod import mongodb_uri

    return mongodb_uri()


if __name__ == "__main__":
    start = time.perf_counter()
    for t in asyncio.run(run(quick=True)):
        print(t.markdown())
    print(f"{time.perf_counter() - start:.1f} s")
